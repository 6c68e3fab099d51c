//! Hand-written SVG of the privacy-utility picture: pooled secret recovery (x)
//! against mean realized cost (y), one panel per workflow, one labelled point
//! per release with 95% interval whiskers on both axes. Lower-left is better.

use std::fmt::Write as _;

use super::report::Report;

const PANEL_W: f64 = 440.0;
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
    let width = PANEL_W * n_panels as f64;
    let legend_h = LEGEND_ROW * report.releases.len().div_ceil(4) as f64 + 12.0;
    let height = TITLE_H + PANEL_H + legend_h;
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
            panel(&mut out, PANEL_W * w as f64, workflow, "mean cost", &points);
        }
    }
    // Legend.
    let top = TITLE_H + PANEL_H + 6.0;
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

fn panel(out: &mut String, left: f64, title: &str, y_label: &str, points: &[Point]) {
    let x0 = left + MARGIN_L;
    let x1 = left + PANEL_W - MARGIN_R;
    let y0 = TITLE_H + MARGIN_T;
    let y1 = TITLE_H + PANEL_H - MARGIN_B;
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
    let (ymin, ymax) = nice_range(
        ymin.min(0.0).max(if ymin >= 0.0 { 0.0 } else { ymin }),
        ymax,
    );
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
    for t in 0..=4 {
        let xv = xmin + (xmax - xmin) * t as f64 / 4.0;
        let yv = ymin + (ymax - ymin) * t as f64 / 4.0;
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{y0:.1}" x2="{0:.1}" y2="{y1:.1}" stroke="#eee"/><text x="{0:.1}" y="{1:.1}" text-anchor="middle">{2:.0}%</text>"##,
            sx(xv),
            y1 + 16.0,
            100.0 * xv
        );
        let _ = writeln!(
            out,
            r##"<line x1="{x0:.1}" y1="{0:.1}" x2="{x1:.1}" y2="{0:.1}" stroke="#eee"/><text x="{1:.1}" y="{2:.1}" text-anchor="end">{3}</text>"##,
            sy(yv),
            x0 - 6.0,
            sy(yv) + 4.0,
            tick(yv)
        );
    }
    let _ = writeln!(
        out,
        r##"<line x1="{0:.1}" y1="{y0:.1}" x2="{0:.1}" y2="{y1:.1}" stroke="#888" stroke-dasharray="4 3"/><text x="{1:.1}" y="{2:.1}" fill="#666" font-size="10">no-output level 50%</text>"##,
        sx(0.5),
        sx(0.5) + 3.0,
        y0 + 12.0
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
        let _ = writeln!(
            out,
            r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="5" fill="{}" stroke="white"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
            p.color,
            cx + 7.0,
            cy - 6.0,
            escape(&p.label)
        );
    }
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
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
