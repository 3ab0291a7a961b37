//! How little memory a layout planned with hindsight needs: for each reference trace, every
//! allocation of one pass is given an offset knowing when each will be freed (sizes largest
//! first, each at the tightest gap between the blocks alive at the same time, lowest offset on
//! ties), per stream and pool as cachalot's policy keeps its ranges, each range's top rounded up
//! to 2 MiB pages. It prints that layout's bytes against the pass's peak of requested bytes and
//! of rounded bytes alive, beside what cachalot's policy reserves on its first pass: the figure
//! behind "what would close it" for cachalot's policy in docs/design.md.
//! `cargo run --release -p cachalot-core --example plan_layout`
use std::collections::BTreeMap;
use std::io::Read;

use cachalot_core::size::{round_size, Pool};
use cachalot_core::{parse_trace, Allocator, Config, Replayer, SimDevice, Stream, TraceOp};

const PAGE: u64 = 2 << 20;

/// One allocation of the pass: alive from `start` to `end` (operation indices), `bytes` rounded.
#[derive(Clone, Copy)]
struct Life {
    start: usize,
    end: usize,
    bytes: u64,
}

/// The top of a layout placing every life at the tightest gap left by those placed before it
/// whose lives overlap its own.
fn planned_top(mut lives: Vec<Life>) -> u64 {
    lives.sort_by_key(|l| (std::cmp::Reverse(l.bytes), l.start));
    let mut placed: Vec<(Life, u64)> = Vec::with_capacity(lives.len());
    let mut top = 0;
    let mut taken: Vec<(u64, u64)> = Vec::new();
    for life in lives {
        taken.clear();
        taken.extend(
            placed.iter().filter(|(o, _)| o.start < life.end && life.start < o.end).map(|(o, at)| (*at, at + o.bytes)),
        );
        taken.sort_unstable();
        let (mut free_from, mut best): (u64, Option<(u64, u64)>) = (0, None);
        for &(at, end) in &taken {
            let gap = at.saturating_sub(free_from);
            if gap >= life.bytes && best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, free_from));
            }
            free_from = free_from.max(end);
        }
        let at = best.map_or(free_from, |(_, at)| at);
        top = top.max(at + life.bytes);
        placed.push((life, at));
    }
    top
}

/// An allocation not yet freed: where it began, its requested and rounded bytes, its stream.
type Open = (usize, u64, u64, Stream);

/// The lives of each stream's pool.
type Ranges = BTreeMap<(Stream, usize), Vec<Life>>;

/// Ends `alloc`'s life at operation `end`, giving back its requested and rounded bytes.
fn record(ranges: &mut Ranges, (start, size, bytes, stream): Open, end: usize) -> (u64, u64) {
    ranges.entry((stream, Pool::for_size(bytes).index())).or_default().push(Life { start, end, bytes });
    (size, bytes)
}

fn main() {
    let divisions = Config::parse("policy:cachalot").unwrap().roundup_power2_divisions;
    for name in ["gpt2_train.csv.gz", "resnet50_train.csv.gz", "mixed_fc_conv.csv.gz"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces").join(name);
        let mut text = String::new();
        flate2::read::GzDecoder::new(&std::fs::read(path).unwrap()[..]).read_to_string(&mut text).unwrap();
        let trace = parse_trace(&text).unwrap();
        let mut open: Vec<Option<Open>> = vec![None; trace.slots as usize];
        let mut ranges = Ranges::new();
        let (mut requested, mut peak_requested, mut rounded, mut peak_rounded) = (0u64, 0u64, 0u64, 0u64);
        for (i, op) in trace.ops.iter().enumerate() {
            match *op {
                TraceOp::Alloc { slot, size, stream } => {
                    let bytes = round_size(size, &divisions);
                    open[slot as usize] = Some((i, size, bytes, stream));
                    requested += size;
                    rounded += bytes;
                    peak_requested = peak_requested.max(requested);
                    peak_rounded = peak_rounded.max(rounded);
                }
                TraceOp::FreeCompleted { .. } => {}
                TraceOp::Free { slot } | TraceOp::FreeDeferred { slot, .. } => {
                    if let Some(alloc) = open[slot as usize].take() {
                        let (size, bytes) = record(&mut ranges, alloc, i);
                        requested -= size;
                        rounded -= bytes;
                    }
                }
            }
        }
        for alloc in open.iter_mut().filter_map(Option::take) {
            record(&mut ranges, alloc, trace.ops.len());
        }
        let planned: u64 = ranges.into_values().map(|lives| planned_top(lives).div_ceil(PAGE) * PAGE).sum();
        let mut a = Allocator::new(SimDevice::new(140 << 30), Config::parse("policy:cachalot").unwrap());
        let out = Replayer::new(trace.slots).run_pass(&mut a, &trace.ops).unwrap();
        println!(
            "{name:24} planned / requested {:.4}  planned / rounded alive {:.4}  cachalot's policy {:.4}",
            planned as f64 / peak_requested as f64,
            planned as f64 / peak_rounded as f64,
            out.peak_reserved_bytes as f64 / out.peak_requested_bytes as f64,
        );
    }
}
