//! Hand-written SVG of the privacy-utility picture, in two parts:
//!
//! - paired differences: each release's recovery minus each reference release's (strict WCPQ,
//!   no output), paired over the same test pairs, as a point with its 95% interval per row;
//! - one panel per workflow family: pooled secret recovery (x, with its interval) against the
//!   mean realized cost averaged over the family's workflows (y). Lower-left is better.
//!
//! Every release keeps one colour and marker across the picture, named in the legend.

use std::fmt::Write as _;

use super::report::{ReleaseReport, Report};

mod plot;

use plot::{Frame, forest, panel};

const PANEL_W: f64 = 520.0;
/// Family panels per row (the default workflow set has three families).
const COLUMNS: usize = 3;
const PANEL_H: f64 = 420.0;
const MARGIN_L: f64 = 72.0;
const MARGIN_R: f64 = 24.0;
const MARGIN_T: f64 = 40.0;
const MARGIN_B: f64 = 52.0;
const TITLE_H: f64 = 36.0;
const LEGEND_ROW: f64 = 20.0;
/// Height of one row of the paired-difference plot.
const FOREST_ROW: f64 = 22.0;
/// Width reserved for the release names left of the paired-difference axes.
const FOREST_LABELS: f64 = 220.0;
/// Colours that stay distinct for colour-blind readers (Okabe–Ito, then Tol's muted).
const PALETTE: [&str; 12] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#882255",
    "#117733", "#999933", "#332288", "#AA4499",
];

/// One plotted point.
struct Point {
    release: usize,
    x: (f64, f64, f64),
    y: f64,
}

/// The colour of release `release` (the palette repeats).
fn color(release: usize) -> &'static str {
    PALETTE[release % PALETTE.len()]
}

/// A marker: circle, square or diamond (the shape changes when the colours repeat).
fn marker(out: &mut String, release: usize, cx: f64, cy: f64) {
    let c = color(release);
    let _ = match (release / PALETTE.len()) % 3 {
        0 => writeln!(
            out,
            r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="5.5" fill="{c}" stroke="white"/>"#
        ),
        1 => writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="{c}" stroke="white"/>"#,
            cx - 5.0,
            cy - 5.0
        ),
        _ => writeln!(
            out,
            r#"<path d="M {cx:.1} {:.1} L {:.1} {cy:.1} L {cx:.1} {:.1} L {:.1} {cy:.1} Z" fill="{c}" stroke="white"/>"#,
            cy - 6.5,
            cx + 6.5,
            cy + 6.5,
            cx - 6.5
        ),
    };
}

/// The family of a workflow named `family/profile` (the whole name otherwise).
fn family(workflow: &str) -> &str {
    workflow.split('/').next().unwrap_or(workflow)
}

/// Renders the report as a standalone SVG document. Without any workflow costs a single panel
/// plots recovery against the release index.
pub fn render(report: &Report) -> String {
    let families = families(report);
    let references = references(report);
    let layout = Layout::of(report, families.len(), references.len());
    let mut out = String::new();
    layout.open(&mut out);
    if !references.is_empty() {
        let panel_w = layout.width / references.len() as f64;
        for (r, reference) in references.iter().enumerate() {
            let frame = Frame {
                left: panel_w * r as f64,
                top: TITLE_H,
                width: panel_w,
            };
            forest(&mut out, report, reference, &frame, r == 0);
        }
    }
    let top = TITLE_H + layout.forest_h;
    if families.is_empty() {
        recovery_only(&mut out, report, top);
    } else {
        let per_row = layout.n_panels.min(COLUMNS);
        for (f, name) in families.iter().enumerate() {
            let (column, row) = (f % per_row, f / per_row);
            panel(
                &mut out,
                PANEL_W * column as f64,
                top + PANEL_H * row as f64,
                &format!("{name} workflows"),
                "mean realized cost (family average)",
                &family_points(report, name),
            );
        }
    }
    legend(
        &mut out,
        report,
        top + PANEL_H * layout.rows as f64 + 8.0,
        layout.width,
    );
    out.push_str("</svg>\n");
    out
}

/// The workflow families the report has costs for, in order of first appearance.
fn families(report: &Report) -> Vec<String> {
    let mut families: Vec<String> = Vec::new();
    for rel in &report.releases {
        for u in &rel.utility {
            let f = family(&u.workflow);
            if !families.iter().any(|g| g == f) {
                families.push(f.to_string());
            }
        }
    }
    families
}

/// The reference releases of the paired differences, in order of first appearance.
fn references(report: &Report) -> Vec<String> {
    let mut references: Vec<String> = Vec::new();
    for rel in &report.releases {
        for p in &rel.paired {
            if !references.contains(&p.reference) {
                references.push(p.reference.clone());
            }
        }
    }
    references
}

/// Columns of the legend.
const LEGEND_COLUMNS: usize = 3;

/// The document's size and the part of it each section takes.
struct Layout {
    /// Family panels (at least one).
    n_panels: usize,
    /// Rows of family panels.
    rows: usize,
    /// Document width.
    width: f64,
    /// Document height.
    height: f64,
    /// Height of the paired-difference plots (0 without references).
    forest_h: f64,
}

// === impl Layout ===

impl Layout {
    /// The layout of `report` with `families` panels and `references` paired plots.
    fn of(report: &Report, families: usize, references: usize) -> Layout {
        let n_panels = families.max(1);
        let columns = n_panels.min(COLUMNS).max(references.min(COLUMNS));
        let rows = n_panels.div_ceil(n_panels.min(COLUMNS));
        let width = PANEL_W * columns as f64;
        let forest_h = if references == 0 {
            0.0
        } else {
            MARGIN_T + FOREST_ROW * report.releases.len() as f64 + MARGIN_B
        };
        let legend_h = LEGEND_ROW * report.releases.len().div_ceil(LEGEND_COLUMNS) as f64 + 16.0;
        let height = TITLE_H + forest_h + PANEL_H * rows as f64 + legend_h;
        Layout {
            n_panels,
            rows,
            width,
            height,
            forest_h,
        }
    }

    /// The document's opening tag, background and title.
    fn open(&self, out: &mut String) {
        let (width, height) = (self.width, self.height);
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif" font-size="13">"#
        );
        let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="24" text-anchor="middle" font-size="16" font-weight="bold">What each release lets a recipient recover, and what it costs</text>"#,
            width / 2.0
        );
    }
}

/// A release's pooled recovery as a point's x (mean, lower, upper).
fn recovery(rel: &ReleaseReport) -> (f64, f64, f64) {
    (
        rel.pooled.accuracy.mean,
        rel.pooled.accuracy.lower,
        rel.pooled.accuracy.upper,
    )
}

/// The single panel without workflow costs: recovery against the release index.
fn recovery_only(out: &mut String, report: &Report, top: f64) {
    let points: Vec<Point> = report
        .releases
        .iter()
        .enumerate()
        .map(|(i, rel)| Point {
            release: i,
            x: recovery(rel),
            y: i as f64,
        })
        .collect();
    panel(
        out,
        0.0,
        top,
        "recovery only (no workflow costs supplied)",
        "release index",
        &points,
    );
}

/// Each release with costs in family `name`: recovery against the family's mean cost.
fn family_points(report: &Report, name: &str) -> Vec<Point> {
    report
        .releases
        .iter()
        .enumerate()
        .filter_map(|(i, rel)| {
            let costs: Vec<f64> = rel
                .utility
                .iter()
                .filter(|u| family(&u.workflow) == name)
                .map(|u| u.pooled.mean)
                .collect();
            (!costs.is_empty()).then(|| Point {
                release: i,
                x: recovery(rel),
                y: costs.iter().sum::<f64>() / costs.len() as f64,
            })
        })
        .collect()
}

/// The legend: every release's marker and name, from `top`.
fn legend(out: &mut String, report: &Report, top: f64, width: f64) {
    for (i, rel) in report.releases.iter().enumerate() {
        let x = 20.0 + (i % LEGEND_COLUMNS) as f64 * (width - 40.0) / LEGEND_COLUMNS as f64;
        let y = top + LEGEND_ROW * (i / LEGEND_COLUMNS) as f64 + 8.0;
        marker(out, i, x, y);
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 12.0,
            y + 4.5,
            escape(&rel.release)
        );
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::plot::{tick, ticks};
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let t = ticks(0.0, 1.0);
        assert_eq!(t.len(), 6);
        for (v, e) in t.iter().zip([0.0, 0.2, 0.4, 0.6, 0.8, 1.0]) {
            assert!((v - e).abs() < 1e-12);
        }
        let t = ticks(0.47, 0.91);
        assert!(
            t.iter()
                .all(|v| (v * 10.0 - (v * 10.0).round()).abs() < 1e-9)
        );
        assert_eq!(ticks(1.0, 1.0), vec![1.0]);
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(50.0), "50");
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape("a<b>&\"c\""), "a&lt;b&gt;&amp;&quot;c&quot;");
    }
}
