//! SVG timelines: requested, allocated and reserved bytes over a replay, the peak of
//! reserved memory labelled and out-of-memory operations marked; or several configs'
//! reserved bytes overlaid on the trace's requested bytes. Both axes have round ticks (see
//! [`axis_ticks`]), and a capacity given on the command line is a dashed line.
//!
//! Invariant: the output is one self-contained SVG document (no scripts, no external
//! references) whose text includes each plotted peak's value; tick labels carry the class
//! `tick-x` or `tick-y`, the capacity line the class `capacity`.

use std::fmt::Write;

use super::axis_ticks;
use super::byte_size::human;
use super::series::Series;

const W: f64 = 960.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
/// Space under the plot: the x ticks' labels, the axis label, then one legend row per line.
const BELOW: f64 = 64.0;
/// A capacity more than this many times the peak is not drawn (it would flatten the plot)
/// but said in the legend.
const CAPACITY_SCALE: f64 = 2.0;
const PLOT_H: f64 = 330.0;
const COLOURS: [&str; 6] = ["#d62728", "#1f77b4", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"];

struct Frame {
    ops: f64,
    max: f64,
    rows: usize,
}

/// The axis' top for data peaking at `peak` bytes: a little above the peak, or above the
/// capacity when it is given and close enough to draw.
fn top(peak: u64, capacity: Option<u64>) -> f64 {
    let peak = peak.max(1) as f64;
    match capacity {
        Some(c) if (c as f64) <= peak * CAPACITY_SCALE => (c as f64).max(peak) * 1.08,
        _ => peak * 1.08,
    }
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

fn polyline(
    out: &mut String,
    f: &Frame,
    pts: impl Iterator<Item = (usize, u64)>,
    colour: &str,
    width: f64,
    dashes: Option<&str>,
) {
    let mut d = String::new();
    for (op, v) in pts {
        let _ = write!(d, "{:.1},{:.1} ", f.x(op), f.y(v));
    }
    let dashes = dashes.map_or(String::new(), |d| format!(r#" stroke-dasharray="{d}""#));
    let _ = writeln!(
        out,
        r#"<polyline fill="none" stroke="{colour}" stroke-width="{width}"{dashes} points="{}"/>"#,
        d.trim_end()
    );
}

fn axes(out: &mut String, f: &Frame, title: &str) {
    let h = f.height();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = writeln!(out, r#"<text x="{LEFT}" y="22" font-size="15">{}</text>"#, escape(title));
    for (v, label) in axis_ticks::bytes(f.max, 5) {
        let y = f.y(v);
        let _ = writeln!(out, r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##, W - RIGHT);
        let _ = writeln!(
            out,
            r#"<text class="tick-y" x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#,
            LEFT - 6.0,
            y + 4.0
        );
    }
    let base = f.base();
    for (op, label) in axis_ticks::counts(f.ops, 8) {
        let x = f.x(op as usize);
        let _ = writeln!(out, r#"<line x1="{x:.1}" x2="{x:.1}" y1="{base}" y2="{:.1}" stroke="black"/>"#, base + 5.0);
        let _ = writeln!(
            out,
            r#"<text class="tick-x" x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
            base + 18.0
        );
    }
    let _ = writeln!(out, r#"<line x1="{LEFT}" x2="{:.1}" y1="{base}" y2="{base}" stroke="black"/>"#, W - RIGHT);
    let _ = writeln!(out, r#"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}" stroke="black"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">operation (of {})</text>"#,
        (W + LEFT) / 2.0,
        base + 36.0,
        f.ops as usize
    );
}

fn legend(out: &mut String, f: &Frame, row: usize, colour: &str, text: &str) {
    let y = f.base() + 54.0 + 16.0 * row as f64;
    let _ = writeln!(out, r#"<rect x="{LEFT}" y="{:.1}" width="14" height="4" fill="{colour}"/>"#, y - 4.0);
    let _ = writeln!(out, r#"<text x="{:.1}" y="{y:.1}">{}</text>"#, LEFT + 20.0, escape(text));
}

/// The capacity as a dashed line across the plot where it is on the scale, and its legend
/// row either way.
fn capacity(out: &mut String, f: &Frame, row: usize, capacity: Option<u64>) {
    let Some(c) = capacity else { return };
    if (c as f64) <= f.max {
        let y = f.y(c);
        let _ = writeln!(
            out,
            r#"<line class="capacity" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="black" stroke-dasharray="6 4"/>"#,
            W - RIGHT
        );
        legend(out, f, row, "black", &format!("capacity {} (dashed)", human(c)));
    } else {
        legend(
            out,
            f,
            row,
            "black",
            &format!("capacity {}, off the scale (over {CAPACITY_SCALE}x the peak)", human(c)),
        );
    }
}

/// Height of a line of label text and a little air: peak labels closer than this touch.
const LABEL_GAP: f64 = 15.0;

/// Where each series' peak label sits: just above its peak, pushed down where it would
/// overwrite the label above it (configs often peak at the same operation with close values).
fn peak_label_ys(f: &Frame, all: &[&Series]) -> Vec<f64> {
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
        // The white outline keeps a label readable where another config's line runs through it.
        r#"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}" fill="{colour}" stroke="white" stroke-width="3" paint-order="stroke">peak reserved {}</text>"#,
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

/// One replay: requested, allocated and reserved bytes; requested drawn dashed over
/// allocated, which it follows closely, so both show.
pub fn timeline(trace: &str, s: &Series, capacity: Option<u64>) -> String {
    let rows = 3 + usize::from(capacity.is_some());
    let f = Frame { ops: s.ops as f64, max: top(s.peak_reserved.1, capacity), rows };
    let mut out = String::new();
    axes(&mut out, &f, &format!("{trace} under {}", s.label));
    polyline(&mut out, &f, s.points.iter().map(|p| (p.0, p.2)), "#1f77b4", 1.6, None);
    polyline(&mut out, &f, s.points.iter().map(|p| (p.0, p.1)), "#2ca02c", 1.2, Some("5 3"));
    polyline(&mut out, &f, s.points.iter().map(|p| (p.0, p.3)), COLOURS[0], 1.6, None);
    mark_peak_and_ooms(&mut out, &f, s, COLOURS[0], f.y(s.peak_reserved.1) - 6.0);
    let peak_req = s.points.iter().map(|p| p.1).max().unwrap_or(0);
    legend(&mut out, &f, 0, "#2ca02c", &format!("requested (peak {}, dashed)", human(peak_req)));
    legend(&mut out, &f, 1, "#1f77b4", "allocated (rounded blocks)");
    let ooms = if s.ooms.is_empty() { String::new() } else { format!(", {} out-of-memory events (×)", s.ooms.len()) };
    legend(&mut out, &f, 2, COLOURS[0], &format!("reserved (peak {}){ooms}", human(s.peak_reserved.1)));
    self::capacity(&mut out, &f, 3, capacity);
    out.push_str("</svg>\n");
    out
}

/// Several configs on one trace: each config's reserved bytes over the requested bytes.
pub fn overlay(trace: &str, all: &[Series], capacity: Option<u64>) -> String {
    let peak = all.iter().map(|s| s.peak_reserved.1).max().unwrap_or(1);
    let ops = all.first().map_or(1, |s| s.ops) as f64;
    let f = Frame { ops, max: top(peak, capacity), rows: all.len() + 1 + usize::from(capacity.is_some()) };
    let mut out = String::new();
    axes(&mut out, &f, &format!("{trace}: reserved bytes under {} configs", all.len()));
    if let Some(first) = all.first() {
        polyline(&mut out, &f, first.points.iter().map(|p| (p.0, p.1)), "#2ca02c", 1.2, Some("5 3"));
        let peak_req = first.points.iter().map(|p| p.1).max().unwrap_or(0);
        legend(&mut out, &f, 0, "#2ca02c", &format!("requested (peak {}, dashed)", human(peak_req)));
    }
    // A config whose line is another's exactly is drawn under it: its legend says so, and
    // only the first of them gets a peak label.
    let same_as: Vec<Option<usize>> = (0..all.len())
        .map(|i| (0..i).find(|&j| all[j].points.iter().map(|p| p.3).eq(all[i].points.iter().map(|p| p.3))))
        .collect();
    let shown: Vec<&Series> = all.iter().zip(&same_as).filter(|(_, same)| same.is_none()).map(|(s, _)| s).collect();
    let mut label_ys = peak_label_ys(&f, &shown).into_iter();
    for (i, s) in all.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        polyline(&mut out, &f, s.points.iter().map(|p| (p.0, p.3)), colour, 1.4, None);
        let same = same_as[i].map_or(String::new(), |j| format!("; the same line as {}", all[j].label));
        legend(&mut out, &f, i + 1, colour, &format!("{} (peak {}{same})", s.label, human(s.peak_reserved.1)));
    }
    // Labels after every line, so no line runs over a label.
    for (i, s) in all.iter().enumerate() {
        if same_as[i].is_none() {
            let y = label_ys.next().unwrap_or(0.0);
            mark_peak_and_ooms(&mut out, &f, s, COLOURS[i % COLOURS.len()], y);
        }
    }
    self::capacity(&mut out, &f, all.len() + 1, capacity);
    out.push_str("</svg>\n");
    out
}
