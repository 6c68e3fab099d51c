//! Hand-written SVG of the privacy-utility picture: pooled secret recovery (x)
//! against mean realized cost (y), one panel per workflow, one labelled point
//! per release with 95% interval whiskers on both axes. Lower-left is better.

use std::fmt::Write as _;

use super::report::Report;

const PANEL_W: f64 = 440.0;
/// Panels per row (the default workflow set is 3 families x 6 profiles: one family per row).
const COLUMNS: usize = 6;
const PANEL_H: f64 = 360.0;
const MARGIN_L: f64 = 64.0;
const MARGIN_R: f64 = 24.0;
const MARGIN_T: f64 = 40.0;
const MARGIN_B: f64 = 52.0;
const TITLE_H: f64 = 36.0;
const LEGEND_ROW: f64 = 18.0;
const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22",
];

/// One plotted point.
struct Point {
    label: String,
    color: &'static str,
    x: (f64, f64, f64),
    y: (f64, f64, f64),
}

/// Renders the report as a standalone SVG document. Without any workflow
/// costs a single panel plots recovery against the release index.
pub fn render(report: &Report) -> String {
    let mut workflows: Vec<String> = Vec::new();
    for rel in &report.releases {
        for u in &rel.utility {
            if !workflows.contains(&u.workflow) {
                workflows.push(u.workflow.clone());
            }
        }
    }
    let n_panels = workflows.len().max(1);
    let columns = n_panels.min(COLUMNS);
    let rows = n_panels.div_ceil(columns);
    let width = PANEL_W * columns as f64;
    let legend_h = LEGEND_ROW * report.releases.len().div_ceil(4) as f64 + 12.0;
    let height = TITLE_H + PANEL_H * rows as f64 + legend_h;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="22" text-anchor="middle" font-size="15" font-weight="bold">Secret recovery vs mean realized cost per release (lower-left is better)</text>"#,
        width / 2.0
    );
    if workflows.is_empty() {
        let points: Vec<Point> = report
            .releases
            .iter()
            .enumerate()
            .map(|(i, rel)| Point {
                label: rel.release.clone(),
                color: PALETTE[i % PALETTE.len()],
                x: (
                    rel.pooled.accuracy.mean,
                    rel.pooled.accuracy.lower,
                    rel.pooled.accuracy.upper,
                ),
                y: (i as f64, i as f64, i as f64),
            })
            .collect();
        panel(
            &mut out,
            0.0,
            0.0,
            "recovery only (no workflow costs supplied)",
            "release index",
            &points,
        );
    } else {
        for (w, workflow) in workflows.iter().enumerate() {
            let points: Vec<Point> = report
                .releases
                .iter()
                .enumerate()
                .filter_map(|(i, rel)| {
                    let u = rel.utility.iter().find(|u| &u.workflow == workflow)?;
                    Some(Point {
                        label: rel.release.clone(),
                        color: PALETTE[i % PALETTE.len()],
                        x: (
                            rel.pooled.accuracy.mean,
                            rel.pooled.accuracy.lower,
                            rel.pooled.accuracy.upper,
                        ),
                        y: (u.pooled.mean, u.pooled.lower, u.pooled.upper),
                    })
                })
                .collect();
            let (column, row) = (w % columns, w / columns);
            panel(
                &mut out,
                PANEL_W * column as f64,
                PANEL_H * row as f64,
                workflow,
                "mean cost",
                &points,
            );
        }
    }
    // Legend.
    let top = TITLE_H + PANEL_H * rows as f64 + 6.0;
    for (i, rel) in report.releases.iter().enumerate() {
        let x = 16.0 + (i % 4) as f64 * (width - 32.0) / 4.0;
        let y = top + LEGEND_ROW * (i / 4) as f64 + 8.0;
        let _ = writeln!(
            out,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="5" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            PALETTE[i % PALETTE.len()],
            x + 10.0,
            y + 4.0,
            escape(&rel.release)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, left: f64, top: f64, title: &str, y_label: &str, points: &[Point]) {
    let x0 = left + MARGIN_L;
    let x1 = left + PANEL_W - MARGIN_R;
    let y0 = top + TITLE_H + MARGIN_T;
    let y1 = top + TITLE_H + PANEL_H - MARGIN_B;
    // Recovery axis always shows the 50% reference.
    let (mut xmin, mut xmax) = (0.5_f64, 0.5_f64);
    let (mut ymin, mut ymax) = (f64::INFINITY, f64::NEG_INFINITY);
    for p in points {
        xmin = xmin.min(p.x.1).min(p.x.0);
        xmax = xmax.max(p.x.2).max(p.x.0);
        ymin = ymin.min(p.y.1).min(p.y.0);
        ymax = ymax.max(p.y.2).max(p.y.0);
    }
    if !ymin.is_finite() || !ymax.is_finite() {
        (ymin, ymax) = (0.0, 1.0);
    }
    let (xmin, xmax) = nice_range(xmin, xmax);
    // Costs are anchored at zero when none is negative.
    let nonnegative = ymin >= 0.0;
    let (ymin, ymax) = nice_range(if nonnegative { 0.0 } else { ymin }, ymax);
    let ymin = if nonnegative { 0.0 } else { ymin };
    let sx = |v: f64| x0 + (v - xmin) / (xmax - xmin) * (x1 - x0);
    let sy = |v: f64| y1 - (v - ymin) / (ymax - ymin) * (y1 - y0);
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"#,
        (x0 + x1) / 2.0,
        y0 - 14.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##,
        x1 - x0,
        y1 - y0
    );
    for xv in ticks(xmin, xmax) {
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{y0:.1}" x2="{0:.1}" y2="{y1:.1}" stroke="#e4e4e4"/><text x="{0:.1}" y="{1:.1}" text-anchor="middle">{2}%</text>"##,
            sx(xv),
            y1 + 16.0,
            tick(100.0 * xv)
        );
    }
    for yv in ticks(ymin, ymax) {
        let _ = writeln!(
            out,
            r##"<line x1="{x0:.1}" y1="{0:.1}" x2="{x1:.1}" y2="{0:.1}" stroke="#e4e4e4"/><text x="{1:.1}" y="{2:.1}" text-anchor="end">{3}</text>"##,
            sy(yv),
            x0 - 6.0,
            sy(yv) + 4.0,
            tick(yv)
        );
    }
    let _ = writeln!(
        out,
        r##"<line x1="{0:.1}" y1="{y0:.1}" x2="{0:.1}" y2="{y1:.1}" stroke="#888" stroke-dasharray="4 3"/><text x="{1:.1}" y="{2:.1}" fill="#666" font-size="10">50%</text>"##,
        sx(0.5),
        sx(0.5) + 3.0,
        y1 - 5.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">secret recovery (pooled test accuracy)</text>"#,
        (x0 + x1) / 2.0,
        y1 + 36.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{0:.1}" y="{1:.1}" text-anchor="middle" transform="rotate(-90 {0:.1} {1:.1})">{2}</text>"#,
        left + 16.0,
        (y0 + y1) / 2.0,
        escape(y_label)
    );
    for p in points {
        let (cx, cy) = (sx(p.x.0), sy(p.y.0));
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{cy:.1}" x2="{:.1}" y2="{cy:.1}" stroke="{c}" stroke-width="1.5"/><line x1="{cx:.1}" y1="{:.1}" x2="{cx:.1}" y2="{:.1}" stroke="{c}" stroke-width="1.5"/>"#,
            sx(p.x.1),
            sx(p.x.2),
            sy(p.y.1),
            sy(p.y.2),
            c = p.color
        );
    }
    // Points above whiskers; labels placed where they overlap no earlier label.
    let mut placed: Vec<(f64, f64, f64, f64)> = Vec::new();
    for p in points {
        let (cx, cy) = (sx(p.x.0), sy(p.y.0));
        let _ = writeln!(
            out,
            r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="5" fill="{}" stroke="white"/>"#,
            p.color
        );
        let w = 6.2 * p.label.chars().count() as f64;
        let options = [
            (7.0, -7.0, false),
            (7.0, 15.0, false),
            (-7.0, -7.0, true),
            (-7.0, 15.0, true),
            (7.0, -21.0, false),
            (7.0, 29.0, false),
        ];
        for (dx, dy, end) in options {
            let left_x = if end { cx + dx - w } else { cx + dx };
            let bx = (left_x, cy + dy - 10.0, left_x + w, cy + dy + 2.0);
            let inside = bx.0 >= left
                && bx.2 <= left + PANEL_W
                && bx.1 >= TITLE_H
                && bx.3 <= TITLE_H + PANEL_H;
            let clear = placed
                .iter()
                .all(|o| bx.2 < o.0 || bx.0 > o.2 || bx.3 < o.1 || bx.1 > o.3);
            if inside && clear {
                placed.push(bx);
                let _ = writeln!(
                    out,
                    r#"<text x="{:.1}" y="{:.1}" font-size="11" fill="{}"{}>{}</text>"#,
                    cx + dx,
                    cy + dy,
                    p.color,
                    if end { r#" text-anchor="end""# } else { "" },
                    escape(&p.label)
                );
                break;
            }
        }
    }
}

/// Round tick values covering `[lo, hi]` (about five).
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) {
        return vec![lo];
    }
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).ceil();
    (0..20)
        .map(|i| (first + i as f64) * step)
        .take_while(|v| *v <= hi + 1e-9 * step)
        .map(|v| if v.abs() < 1e-12 { 0.0 } else { v })
        .collect()
}

fn nice_range(lo: f64, hi: f64) -> (f64, f64) {
    let span = (hi - lo).abs().max(1e-6);
    let pad = span * 0.08;
    let (a, b) = (lo - pad, hi + pad);
    if (b - a) > 0.0 && a.is_finite() && b.is_finite() {
        (a, b)
    } else {
        (0.0, 1.0)
    }
}

fn tick(v: f64) -> String {
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
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
