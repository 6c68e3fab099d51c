//! The SVG's plots: a paired-difference plot against one reference and a family panel,
//! each with its axes, grid and ticks.

use std::fmt::Write as _;

use super::super::bootstrap::Estimate;
use super::super::report::Report;
use super::{
    FOREST_LABELS, FOREST_ROW, MARGIN_B, MARGIN_L, MARGIN_R, MARGIN_T, PANEL_H, PANEL_W, Point,
    color, escape, marker,
};

/// Where a paired-difference plot goes.
pub(super) struct Frame {
    /// Left edge.
    pub(super) left: f64,
    /// Top edge.
    pub(super) top: f64,
    /// Width.
    pub(super) width: f64,
}

/// The paired differences against one reference: one row per release that has one.
pub(super) fn forest(
    out: &mut String,
    report: &Report,
    reference: &str,
    frame: &Frame,
    labels: bool,
) {
    let rows: Vec<(usize, &Estimate)> = report
        .releases
        .iter()
        .enumerate()
        .filter_map(|(i, rel)| {
            rel.paired
                .iter()
                .find(|p| p.reference == reference)
                .map(|p| (i, &p.difference))
        })
        .collect();
    let x0 = frame.left + if labels { FOREST_LABELS } else { MARGIN_L };
    let x1 = frame.left + frame.width - MARGIN_R;
    let y0 = frame.top + MARGIN_T;
    let y1 = y0 + FOREST_ROW * report.releases.len() as f64;
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    for (_, e) in &rows {
        lo = lo.min(e.lower);
        hi = hi.max(e.upper);
    }
    let (lo, hi) = nice_range(lo, hi);
    let axes = Axes {
        x0,
        x1,
        y0,
        y1,
        x: (lo, hi),
        // Rows are placed by index; the y range is not read.
        y: (0.0, 1.0),
    };
    forest_axes(out, &axes, reference);
    for (i, rel) in report.releases.iter().enumerate() {
        let cy = y0 + FOREST_ROW * (i as f64 + 0.5);
        if labels {
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                x0 - 8.0,
                cy + 4.5,
                escape(&rel.release)
            );
        }
        if let Some((_, e)) = rows.iter().find(|(r, _)| *r == i) {
            let _ = writeln!(
                out,
                r#"<line x1="{:.1}" y1="{cy:.1}" x2="{:.1}" y2="{cy:.1}" stroke="{}" stroke-width="2"/>"#,
                axes.sx(e.lower),
                axes.sx(e.upper),
                color(i)
            );
            marker(out, i, axes.sx(e.mean), cy);
        }
    }
}

/// A paired-difference plot's title, box, ticks and zero line.
fn forest_axes(out: &mut String, axes: &Axes, reference: &str) {
    let Axes { x0, x1, y0, y1, .. } = *axes;
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="14" font-weight="bold">recovery minus {}, paired (points, 95% CI)</text>"#,
        (x0 + x1) / 2.0,
        y0 - 14.0,
        escape(reference)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##,
        x1 - x0,
        y1 - y0
    );
    for v in ticks(axes.x.0, axes.x.1) {
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{y0:.1}" x2="{0:.1}" y2="{y1:.1}" stroke="#e4e4e4"/><text x="{0:.1}" y="{1:.1}" text-anchor="middle">{2}</text>"##,
            axes.sx(v),
            y1 + 16.0,
            tick(100.0 * v)
        );
    }
    let _ = writeln!(
        out,
        r##"<line x1="{0:.1}" y1="{y0:.1}" x2="{0:.1}" y2="{y1:.1}" stroke="#666" stroke-dasharray="4 3"/>"##,
        axes.sx(0.0)
    );
}

/// A plot's box (`x0..x1`, `y0..y1` in the document) and the ranges its axes show.
#[derive(Debug, Clone, Copy)]
struct Axes {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    /// The x axis's (min, max).
    x: (f64, f64),
    /// The y axis's (min, max).
    y: (f64, f64),
}

// === impl Axes ===

impl Axes {
    /// The document x of value `v`.
    fn sx(&self, v: f64) -> f64 {
        self.x0 + (v - self.x.0) / (self.x.1 - self.x.0) * (self.x1 - self.x0)
    }

    /// The document y of value `v` (up is larger).
    fn sy(&self, v: f64) -> f64 {
        self.y1 - (v - self.y.0) / (self.y.1 - self.y.0) * (self.y1 - self.y0)
    }

    /// A family panel's axes at (`left`, `top`), fitted to `points`: recovery always shows
    /// the 50% reference, and costs are anchored at zero when none is negative.
    fn fit(left: f64, top: f64, points: &[Point]) -> Axes {
        let (mut xmin, mut xmax) = (0.5_f64, 0.5_f64);
        let (mut ymin, mut ymax) = (f64::INFINITY, f64::NEG_INFINITY);
        for p in points {
            xmin = xmin.min(p.x.1).min(p.x.0);
            xmax = xmax.max(p.x.2).max(p.x.0);
            ymin = ymin.min(p.y);
            ymax = ymax.max(p.y);
        }
        if !ymin.is_finite() || !ymax.is_finite() {
            (ymin, ymax) = (0.0, 1.0);
        }
        let (xmin, xmax) = nice_range(xmin, xmax);
        let nonnegative = ymin >= 0.0;
        let (ymin, ymax) = nice_range(if nonnegative { 0.0 } else { ymin }, ymax);
        let ymin = if nonnegative { 0.0 } else { ymin };
        Axes {
            x0: left + MARGIN_L,
            x1: left + PANEL_W - MARGIN_R,
            y0: top + MARGIN_T,
            y1: top + PANEL_H - MARGIN_B,
            x: (xmin, xmax),
            y: (ymin, ymax),
        }
    }
}

/// One family panel at (`left`, `top`): recovery (x) against `y_label` (y).
pub(super) fn panel(
    out: &mut String,
    left: f64,
    top: f64,
    title: &str,
    y_label: &str,
    points: &[Point],
) {
    let axes = Axes::fit(left, top, points);
    panel_grid(out, &axes, title);
    panel_labels(out, &axes, left, y_label);
    for p in points {
        let cy = axes.sy(p.y);
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{cy:.1}" x2="{:.1}" y2="{cy:.1}" stroke="{}" stroke-width="1.5"/>"#,
            axes.sx(p.x.1),
            axes.sx(p.x.2),
            color(p.release)
        );
    }
    // Markers above whiskers; the legend names them (labels inside the panel would overlap).
    for p in points {
        marker(out, p.release, axes.sx(p.x.0), axes.sy(p.y));
    }
}

/// A family panel's title, box and grid lines with their tick labels.
fn panel_grid(out: &mut String, axes: &Axes, title: &str) {
    let Axes { x0, x1, y0, y1, .. } = *axes;
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
    for xv in ticks(axes.x.0, axes.x.1) {
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{y0:.1}" x2="{0:.1}" y2="{y1:.1}" stroke="#e4e4e4"/><text x="{0:.1}" y="{1:.1}" text-anchor="middle">{2}%</text>"##,
            axes.sx(xv),
            y1 + 16.0,
            tick(100.0 * xv)
        );
    }
    for yv in ticks(axes.y.0, axes.y.1) {
        let _ = writeln!(
            out,
            r##"<line x1="{x0:.1}" y1="{0:.1}" x2="{x1:.1}" y2="{0:.1}" stroke="#e4e4e4"/><text x="{1:.1}" y="{2:.1}" text-anchor="end">{3}</text>"##,
            axes.sy(yv),
            x0 - 6.0,
            axes.sy(yv) + 4.0,
            tick(yv)
        );
    }
}

/// A family panel's 50% line and axis labels.
fn panel_labels(out: &mut String, axes: &Axes, left: f64, y_label: &str) {
    let Axes { x0, x1, y0, y1, .. } = *axes;
    let _ = writeln!(
        out,
        r##"<line x1="{0:.1}" y1="{y0:.1}" x2="{0:.1}" y2="{y1:.1}" stroke="#888" stroke-dasharray="4 3"/><text x="{1:.1}" y="{2:.1}" fill="#666" font-size="10">50%</text>"##,
        axes.sx(0.5),
        axes.sx(0.5) + 3.0,
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
}

/// Round tick values covering `[lo, hi]` (about five).
pub(super) fn ticks(lo: f64, hi: f64) -> Vec<f64> {
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

/// `[lo, hi]` padded by 8% of its span (`[0, 1]` when that is not a finite range).
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

/// A tick label: at most three decimals, no trailing zeros, never `-0`.
pub(super) fn tick(v: f64) -> String {
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}
