//! SVG timelines: requested, allocated and reserved bytes over a replay, the peak of
//! reserved memory labelled and out-of-memory operations marked; or several configs'
//! reserved bytes overlaid on the trace's requested bytes.
//!
//! Invariant: the output is one self-contained SVG document (no scripts, no external
//! references) whose text includes each plotted peak's value.

use std::fmt::Write;

use super::run::human;
use super::series::Series;

const W: f64 = 960.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
/// Space under the plot: the axis label, then one legend row per line.
const BELOW: f64 = 50.0;
const PLOT_H: f64 = 330.0;
const COLOURS: [&str; 6] = ["#d62728", "#1f77b4", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"];

struct Frame {
    ops: f64,
    max: f64,
    rows: usize,
}

impl Frame {
    fn x(&self, op: usize) -> f64 {
        LEFT + (W - LEFT - RIGHT) * op as f64 / self.ops.max(1.0)
    }
    fn y(&self, bytes: u64) -> f64 {
        TOP + PLOT_H * (1.0 - bytes as f64 / self.max.max(1.0))
    }
    fn base(&self) -> f64 {
        TOP + PLOT_H
    }
    fn height(&self) -> f64 {
        self.base() + BELOW + 16.0 * self.rows as f64
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn polyline(out: &mut String, f: &Frame, pts: impl Iterator<Item = (usize, u64)>, colour: &str, width: f64) {
    let mut d = String::new();
    for (op, v) in pts {
        let _ = write!(d, "{:.1},{:.1} ", f.x(op), f.y(v));
    }
    let _ =
        writeln!(out, r#"<polyline fill="none" stroke="{colour}" stroke-width="{width}" points="{}"/>"#, d.trim_end());
}

fn axes(out: &mut String, f: &Frame, title: &str) {
    let h = f.height();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = writeln!(out, r#"<text x="{LEFT}" y="22" font-size="15">{}</text>"#, escape(title));
    for i in 0..=4 {
        let v = (f.max * i as f64 / 4.0) as u64;
        let y = f.y(v);
        let _ = writeln!(out, r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##, W - RIGHT);
        let _ =
            writeln!(out, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, human(v));
    }
    let base = f.base();
    let _ = writeln!(out, r#"<line x1="{LEFT}" x2="{:.1}" y1="{base}" y2="{base}" stroke="black"/>"#, W - RIGHT);
    let _ = writeln!(out, r#"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}" stroke="black"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">operation (of {})</text>"#,
        (W + LEFT) / 2.0,
        base + 18.0,
        f.ops as usize
    );
}

fn legend(out: &mut String, f: &Frame, row: usize, colour: &str, text: &str) {
    let y = f.base() + 40.0 + 16.0 * row as f64;
    let _ = writeln!(out, r#"<rect x="{LEFT}" y="{:.1}" width="14" height="4" fill="{colour}"/>"#, y - 4.0);
    let _ = writeln!(out, r#"<text x="{:.1}" y="{y:.1}">{}</text>"#, LEFT + 20.0, escape(text));
}

/// Height of a line of label text: peak labels closer than this would overlap.
const LABEL_GAP: f64 = 13.0;

/// Where each series' peak label sits: just above its peak, pushed down where it would
/// overwrite the label above it (configs often peak at the same operation with close values).
fn peak_label_ys(f: &Frame, all: &[Series]) -> Vec<f64> {
    let mut ys: Vec<f64> = all.iter().map(|s| f.y(s.peak_reserved.1) - 6.0).collect();
    let mut order: Vec<usize> = (0..ys.len()).collect();
    order.sort_by(|&a, &b| ys[a].total_cmp(&ys[b]));
    for k in 1..order.len() {
        let floor = ys[order[k - 1]] + LABEL_GAP;
        if ys[order[k]] < floor {
            ys[order[k]] = floor;
        }
    }
    ys
}

fn mark_peak_and_ooms(out: &mut String, f: &Frame, s: &Series, colour: &str, label_y: f64) {
    let (op, v) = s.peak_reserved;
    let (x, y) = (f.x(op), f.y(v));
    let _ = writeln!(out, r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{colour}"/>"#);
    let anchor = if x > W / 2.0 { "end" } else { "start" };
    let dx = if x > W / 2.0 { -8.0 } else { 8.0 };
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}" fill="{colour}">peak reserved {}</text>"#,
        x + dx,
        label_y,
        human(v)
    );
    for &(op, v) in &s.ooms {
        let (x, y) = (f.x(op), f.y(v));
        let _ = writeln!(
            out,
            r#"<path d="M{:.1},{:.1} l8,8 m0,-8 l-8,8" stroke="{colour}" stroke-width="2"><title>out of memory at operation {op}</title></path>"#,
            x - 4.0,
            y - 4.0
        );
    }
}

/// One replay: requested, allocated and reserved bytes.
pub fn timeline(trace: &str, s: &Series) -> String {
    let f = Frame { ops: s.ops as f64, max: s.peak_reserved.1.max(1) as f64 * 1.08, rows: 3 };
    let mut out = String::new();
    axes(&mut out, &f, &format!("{trace} under {}", s.label));
    polyline(&mut out, &f, s.points.iter().map(|p| (p.0, p.1)), "#2ca02c", 1.2);
    polyline(&mut out, &f, s.points.iter().map(|p| (p.0, p.2)), "#1f77b4", 1.2);
    polyline(&mut out, &f, s.points.iter().map(|p| (p.0, p.3)), COLOURS[0], 1.6);
    mark_peak_and_ooms(&mut out, &f, s, COLOURS[0], f.y(s.peak_reserved.1) - 6.0);
    let peak_req = s.points.iter().map(|p| p.1).max().unwrap_or(0);
    legend(&mut out, &f, 0, "#2ca02c", &format!("requested (peak {})", human(peak_req)));
    legend(&mut out, &f, 1, "#1f77b4", "allocated (rounded blocks)");
    let ooms = if s.ooms.is_empty() { String::new() } else { format!(", {} out-of-memory events (×)", s.ooms.len()) };
    legend(&mut out, &f, 2, COLOURS[0], &format!("reserved (peak {}){ooms}", human(s.peak_reserved.1)));
    out.push_str("</svg>\n");
    out
}

/// Several configs on one trace: each config's reserved bytes over the requested bytes.
pub fn overlay(trace: &str, all: &[Series]) -> String {
    let max = all.iter().map(|s| s.peak_reserved.1).max().unwrap_or(1) as f64 * 1.08;
    let ops = all.first().map_or(1, |s| s.ops) as f64;
    let f = Frame { ops, max, rows: all.len() + 1 };
    let mut out = String::new();
    axes(&mut out, &f, &format!("{trace}: reserved bytes under {} configs", all.len()));
    if let Some(first) = all.first() {
        polyline(&mut out, &f, first.points.iter().map(|p| (p.0, p.1)), "#2ca02c", 1.2);
        let peak_req = first.points.iter().map(|p| p.1).max().unwrap_or(0);
        legend(&mut out, &f, 0, "#2ca02c", &format!("requested (peak {})", human(peak_req)));
    }
    let label_ys = peak_label_ys(&f, all);
    for (i, s) in all.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        polyline(&mut out, &f, s.points.iter().map(|p| (p.0, p.3)), colour, 1.4);
        mark_peak_and_ooms(&mut out, &f, s, colour, label_ys[i]);
        legend(&mut out, &f, i + 1, colour, &format!("{} (peak {})", s.label, human(s.peak_reserved.1)));
    }
    out.push_str("</svg>\n");
    out
}
