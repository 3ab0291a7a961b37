//! The recorded run itself, as a PyTorch snapshot tells it (not a replay): from the history
//! of one device (`device_traces[d]`) and the snapshot's `segments`, its reserved and
//! allocated bytes after every operation of the trace read from that history, its peaks,
//! device allocations and refusals, and the stack frames of its events, segments and blocks
//! (through [`FrameTable`], within its bounds).
//!
//! Bytes follow PyTorch's own accounting: `segment_alloc`/`segment_map` add to reserved,
//! `segment_free`/`segment_unmap` take away; `alloc` adds to allocated and `free_completed`
//! takes away (`free_requested` where the history logs no completions). A history that
//! PyTorch's ring buffer cut (`max_entries`) starts mid-run: what was held before its first
//! entry is the snapshot's own total (its segments and their live blocks) less what the
//! history adds, never below zero, and is counted in from the start.
//!
//! Invariants: `reserved` and `allocated` have one value per operation of the trace, the
//! bytes after the event that operation came from (its `Position::Event`); `op_stacks`
//! one stack id per operation; `segment_stacks` follows `snapshot_map::flat`'s order
//! (segments by address, blocks by address within theirs).

use cachalot_core::{Position, Trace};
use serde::Serialize;
use serde_json::Value;

use cachalot_core::trace::frame_table::{FrameTable, NONE};

/// The run's own figures, as the page's row shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RecordedFigures {
    /// History entries of the device read.
    pub events: usize,
    pub peak_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    /// The history entry after which reserved memory first reached its peak.
    pub peak_reserved_event: Option<usize>,
    /// Segments the snapshot lists for the device, as they were when it was taken.
    pub segments: usize,
    pub reserved_at_snapshot_bytes: u64,
    pub allocated_at_snapshot_bytes: u64,
    /// `segment_alloc` and `segment_map` entries: the run's calls for device memory.
    pub device_allocs: u64,
    /// `oom` entries: requests the run's allocator refused.
    pub ooms: u64,
    /// Bytes held before the history's first entry (a history cut by `max_entries`).
    pub reserved_before_history_bytes: u64,
    pub allocated_before_history_bytes: u64,
    /// Stacks met past the frame table's bounds, not kept.
    pub stacks_not_kept: u64,
}

/// The recorded run of one device.
#[derive(Default)]
pub struct Recorded {
    pub figures: RecordedFigures,
    pub reserved: Vec<f64>,
    pub allocated: Vec<f64>,
    pub op_stacks: Vec<u32>,
    /// Per segment in address order: its stack, its block count, then each block's stack.
    pub segment_stacks: Vec<u32>,
    pub frames: FrameTable,
}

fn u64_of(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// Signed change of (reserved, allocated) by one history entry, and whether it asked the device.
fn change(e: &Value, logs_completions: bool) -> (i128, i128, bool) {
    let size = i128::from(u64_of(e, "size"));
    match e.get("action").and_then(Value::as_str).unwrap_or("") {
        "segment_alloc" | "segment_map" => (size, 0, true),
        "segment_free" | "segment_unmap" => (-size, 0, false),
        "alloc" => (0, size, false),
        "free_completed" => (0, -size, false),
        "free_requested" if !logs_completions => (0, -size, false),
        _ => (0, 0, false),
    }
}

/// The segments of `snapshot` that belong to `device` (all when the snapshot names none).
fn segments_of(snapshot: &Value, device: usize) -> Vec<&Value> {
    let all = snapshot.get("segments").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    all.iter().filter(|s| s.get("device").and_then(Value::as_u64).is_none_or(|d| d == device as u64)).collect()
}

/// The recorded run of `trace`, read from `snapshot` (already within the reader's limits),
/// whose stacks are interned in `frames` (those it already holds, read with the snapshot, and
/// those met here).
pub fn recorded(snapshot: &Value, trace: &Trace, frames: FrameTable) -> Recorded {
    let lists = snapshot.get("device_traces").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    // The device read: named on the trace when the snapshot lists several, else the only
    // one with allocations (as the core's reader chose it).
    let allocates = |l: &Value| {
        l.as_array().is_some_and(|l| l.iter().any(|e| e.get("action").and_then(Value::as_str) == Some("alloc")))
    };
    let device = trace.device.unwrap_or_else(|| lists.iter().position(allocates).unwrap_or(0));
    let entries = lists.get(device).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let mut r = Recorded { frames, ..Recorded::default() };
    let f = &mut r.figures;
    f.events = entries.len();

    // The snapshot's own state, then what held before the history began.
    let mut segments = segments_of(snapshot, device);
    segments.sort_by_key(|s| u64_of(s, "address"));
    f.segments = segments.len();
    let live =
        |b: &&Value| matches!(b.get("state").and_then(Value::as_str), Some("active_allocated" | "active_pending_free"));
    for s in &segments {
        f.reserved_at_snapshot_bytes += u64_of(s, "total_size");
        let blocks = s.get("blocks").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        f.allocated_at_snapshot_bytes += blocks.iter().filter(live).map(|b| u64_of(b, "size")).sum::<u64>();
    }
    let logs_completions = entries.iter().any(|e| e.get("action").and_then(Value::as_str) == Some("free_completed"));
    let (mut net_r, mut net_a) = (0i128, 0i128);
    for e in entries {
        let (dr, da, _) = change(e, logs_completions);
        net_r += dr;
        net_a += da;
    }
    let before = |end: u64, net: i128| u64::try_from((i128::from(end) - net).max(0)).unwrap_or(0);
    if !segments.is_empty() {
        f.reserved_before_history_bytes = before(f.reserved_at_snapshot_bytes, net_r);
        f.allocated_before_history_bytes = before(f.allocated_at_snapshot_bytes, net_a);
    }

    // Walk the history once, sampling after each operation's own event.
    let (mut res, mut all) =
        (i128::from(f.reserved_before_history_bytes), i128::from(f.allocated_before_history_bytes));
    f.peak_reserved_bytes = f.reserved_before_history_bytes;
    f.peak_allocated_bytes = f.allocated_before_history_bytes;
    let n = trace.ops.len();
    r.reserved.reserve_exact(n);
    r.allocated.reserve_exact(n);
    // An operation's sample is taken just before the event of the next one (or a new segment,
    // made for the next), so it holds what its own event and those it folded in (a free's
    // completion, a segment given back) did.
    let event_of = |k: usize| match trace.positions.get(k) {
        Some(Position::Event(p)) => *p as usize,
        _ => usize::MAX,
    };
    let mut op = 0;
    for (i, e) in entries.iter().enumerate() {
        // A new segment is made for the next allocation: it starts that one's span.
        let grows = matches!(e.get("action").and_then(Value::as_str), Some("segment_alloc" | "segment_map"));
        while op < n && event_of(op) < i && (grows || event_of(op + 1) <= i) {
            r.reserved.push(res as f64);
            r.allocated.push(all as f64);
            op += 1;
        }
        let (dr, da, asks) = change(e, logs_completions);
        res = (res + dr).max(0);
        all = (all + da).max(0);
        f.device_allocs += u64::from(asks);
        f.ooms += u64::from(e.get("action").and_then(Value::as_str) == Some("oom"));
        if res as u64 > f.peak_reserved_bytes || (f.peak_reserved_event.is_none() && res > 0) {
            f.peak_reserved_bytes = res as u64;
            f.peak_reserved_event = Some(i);
        }
        f.peak_allocated_bytes = f.peak_allocated_bytes.max(all as u64);
    }
    while r.reserved.len() < n {
        r.reserved.push(res as f64);
        r.allocated.push(all as f64);
    }
    r.op_stacks = (0..n).map(|k| entries.get(event_of(k)).map_or(NONE, |e| r.frames.stack_of(e))).collect();

    r.segment_stacks = segment_stacks(snapshot, &mut r.frames);
    r.figures.stacks_not_kept = r.frames.dropped;
    r
}

/// Whole and exact as a JS number (what `snapshot_map::flat` keeps).
fn exact(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64).filter(|&n| n < 1 << 53)
}

/// The stacks of every segment `snapshot_map::flat` draws, in its order and with its filter.
fn segment_stacks(snapshot: &Value, frames: &mut FrameTable) -> Vec<u32> {
    let all = snapshot.get("segments").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let mut segments: Vec<&Value> =
        all.iter().filter(|s| exact(s, "address").is_some() && exact(s, "total_size").is_some()).collect();
    segments.sort_by_key(|s| u64_of(s, "address"));
    let mut out = Vec::new();
    for s in segments {
        let mut blocks: Vec<&Value> = s.get("blocks").and_then(Value::as_array).map_or(Vec::new(), |b| {
            b.iter().filter(|b| exact(b, "address").is_some() && exact(b, "size").is_some()).collect()
        });
        blocks.sort_by_key(|b| u64_of(b, "address"));
        out.push(frames.stack_of(s));
        out.push(blocks.len() as u32);
        for b in blocks {
            out.push(frames.stack_of(b));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::{read_file_whole, BROWSER_LIMITS};

    const MIB: u64 = 1 << 20;

    fn snapshot(events: &str, segments: &str) -> (Value, Trace) {
        let text = format!(r#"{{"segments": [{segments}], "device_traces": [[{events}]]}}"#);
        let (mut traces, v) = read_file_whole(text.as_bytes(), "t.json", &BROWSER_LIMITS).unwrap();
        (v.unwrap(), traces.remove(0))
    }

    #[test]
    fn figures_follow_the_history_and_line_up_with_the_operations() {
        let f = r#"[{"filename": "train.py", "line": 7, "name": "forward"}]"#;
        let (v, t) = snapshot(
            &format!(
                r#"{{"action": "segment_alloc", "addr": 0, "size": {s}, "frames": {f}}},
                   {{"action": "alloc", "addr": 0, "size": {a}, "frames": {f}}},
                   {{"action": "alloc", "addr": {a}, "size": {a}}},
                   {{"action": "oom", "addr": 0, "size": {s}}},
                   {{"action": "free_requested", "addr": 0, "size": {a}}},
                   {{"action": "free_completed", "addr": 0, "size": {a}}},
                   {{"action": "segment_free", "addr": 0, "size": {s}}}"#,
                s = 20 * MIB,
                a = 4 * MIB
            ),
            "",
        );
        let r = recorded(&v, &t, FrameTable::default());
        let fig = &r.figures;
        assert_eq!((fig.peak_reserved_bytes, fig.peak_allocated_bytes), (20 * MIB, 8 * MIB));
        assert_eq!((fig.device_allocs, fig.ooms, fig.events, fig.segments), (1, 1, 7, 0));
        assert_eq!(fig.peak_reserved_event, Some(0));
        assert_eq!(t.ops.len(), 3, "two allocations and a free");
        assert_eq!(
            r.reserved,
            [20.0 * MIB as f64, 20.0 * MIB as f64, 0.0],
            "the last free folds in the segment freed after it"
        );
        assert_eq!(r.allocated, [4.0 * MIB as f64, 8.0 * MIB as f64, 4.0 * MIB as f64]);
        assert_eq!(r.frames.lines(r.op_stacks[0]), ["forward (train.py:7)"]);
        assert_eq!(r.op_stacks[1], 0, "no frames recorded");
    }

    #[test]
    fn a_cut_history_counts_what_was_held_before_it() {
        // The snapshot holds 40 MiB reserved, 10 MiB live; the history saw one 20 MiB segment and a 2 MiB alloc.
        let seg = |addr: u64, live: u64| {
            format!(
                r#"{{"device": 0, "address": {addr}, "total_size": {t}, "segment_type": "large",
                     "frames": [{{"filename": "s.py", "line": {addr}, "name": "seg"}}],
                     "blocks": [{{"address": {addr}, "size": {live}, "state": "active_allocated"}}]}}"#,
                t = 20 * MIB
            )
        };
        let segs = format!("{}, {}", seg(64 * MIB, 2 * MIB), seg(0, 8 * MIB));
        let (v, t) = snapshot(
            &format!(
                r#"{{"action": "segment_alloc", "addr": {b}, "size": {s}}}, {{"action": "alloc", "addr": {b}, "size": {a}}}"#,
                b = 64 * MIB,
                s = 20 * MIB,
                a = 2 * MIB
            ),
            &segs,
        );
        let r = recorded(&v, &t, FrameTable::default());
        let fig = &r.figures;
        assert_eq!((fig.reserved_before_history_bytes, fig.allocated_before_history_bytes), (20 * MIB, 8 * MIB));
        assert_eq!((fig.peak_reserved_bytes, fig.peak_allocated_bytes), (40 * MIB, 10 * MIB));
        assert_eq!(fig.segments, 2);
        // By address: the segment at 0 first, then its one block.
        assert_eq!(r.segment_stacks.len(), 6);
        assert_eq!(r.frames.lines(r.segment_stacks[0]), ["seg (s.py:0)"]);
        assert_eq!(r.frames.lines(r.segment_stacks[3]), [format!("seg (s.py:{})", 64 * MIB)]);
    }
}
