//! The `trace` target: any text through `parse_trace` (RMM CSV, or PyTorch snapshot JSON when
//! it starts with `{`), then a replay of what parsed.
//!
//! Checks: parsing never panics; an error formats; a parsed trace keeps its invariants (every
//! slot below `slots`, each free names a live slot, one time per operation, the report's
//! counts equal a recount, allocations are never of zero bytes); `peak_requested` and
//! `describe` work; replaying it on a small device keeps the allocator's invariants.

use std::collections::BTreeSet;

use cachalot_core::{parse_trace, Allocator, Config, Replayer, SimDevice, Trace, TraceOp};

/// Known parser bug, excluded until it is fixed (then set this to false): a clock time
/// (`HH:MM:SS.ffffff`) whose hours or seconds are huge overflows `u64` arithmetic in
/// `parse_time` (a panic with overflow checks, a wrong time without). While set, CSV inputs
/// with such a field are skipped (`fuzz_corpus.rs`: `a_huge_clock_time_is_an_error`).
const KNOWN_BUG_CLOCK_OVERFLOW: bool = true;

/// Known bug, excluded until it is fixed (then set this to false): `Trace::peak_requested`
/// adds sizes without overflow checks, so live sizes summing past `u64::MAX` panic (or wrap).
/// While set, it is not called on such traces (`fuzz_corpus.rs`:
/// `peak_requested_of_huge_sizes_does_not_overflow`).
const KNOWN_BUG_PEAK_OVERFLOW: bool = true;

/// Operations of a parsed trace that are replayed (the parser is the target, not the replay).
const REPLAYED_OPS: usize = 2000;

/// Runs one input; panics on a crash.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if KNOWN_BUG_CLOCK_OVERFLOW && !text.trim_start().starts_with('{') && has_overflowing_clock(&text) {
        return;
    }
    let trace = match parse_trace(&text) {
        Ok(t) => t,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    check(&trace).unwrap_or_else(|e| panic!("{e}\ninput: {text:?}"));
    if !KNOWN_BUG_PEAK_OVERFLOW || live_sizes_fit(&trace) {
        let _ = trace.peak_requested();
    }
    let _ = trace.describe();
    replay(&trace);
}

/// True when some comma-separated field of three `:`-separated parts would overflow in
/// `parse_time`, which multiplies and adds part by part as each parses (the trigger of the
/// clock bug; checked on every column, which over-approximates).
fn has_overflowing_clock(text: &str) -> bool {
    text.lines().flat_map(|l| l.split(',')).any(|f| {
        let parts: Vec<&str> = f.trim().split(':').collect();
        let [h, m, s] = parts[..] else { return false };
        let secs = s.split_once('.').map_or(s, |(w, _)| w);
        let Ok(h) = h.parse::<u64>() else { return false };
        let Some(hours) = h.checked_mul(3600) else { return true };
        let Ok(m) = m.parse::<u64>() else { return false };
        let Some(minutes) = m.checked_mul(60).and_then(|v| v.checked_add(hours)) else { return true };
        let Ok(secs) = secs.parse::<u64>() else { return false };
        let whole = secs.checked_add(minutes);
        whole.and_then(|w| w.checked_mul(1_000_000)?.checked_add(999_999)).is_none()
    })
}

/// True when the sizes of all allocations together fit in a `u64` (so live sizes do).
fn live_sizes_fit(t: &Trace) -> bool {
    t.ops
        .iter()
        .try_fold(0u64, |sum, op| match *op {
            TraceOp::Alloc { size, .. } => sum.checked_add(size),
            TraceOp::Free { .. } => Some(sum),
        })
        .is_some()
}

fn check(t: &Trace) -> Result<(), String> {
    if t.ops.len() != t.times_us.len() {
        return Err(format!("{} operations but {} times", t.ops.len(), t.times_us.len()));
    }
    let mut live = BTreeSet::new();
    let (mut allocs, mut frees) = (0, 0);
    let mut streams = BTreeSet::new();
    for (i, op) in t.ops.iter().enumerate() {
        match *op {
            TraceOp::Alloc { slot, size, stream } => {
                if slot >= t.slots || !live.insert(slot) || size == 0 {
                    return Err(format!("op {i}: allocation into slot {slot} of {} ({size} bytes)", t.slots));
                }
                streams.insert(stream);
                allocs += 1;
            }
            TraceOp::Free { slot } => {
                if !live.remove(&slot) {
                    return Err(format!("op {i}: free of slot {slot}, which is not live"));
                }
                frees += 1;
            }
        }
    }
    let r = &t.report;
    let recount = (allocs, frees, live.len(), streams.len());
    if (r.allocs, r.frees, r.live_at_end, r.streams) != recount {
        return Err(format!("report {r:?} disagrees with a recount (allocs, frees, live, streams) = {recount:?}"));
    }
    Ok(())
}

/// Replays up to [`REPLAYED_OPS`] operations on a 256 MiB device under PyTorch's policy.
fn replay(t: &Trace) {
    let mut a = Allocator::new(SimDevice::new(256 << 20), Config::pytorch());
    let mut r = Replayer::new(t.slots);
    for op in t.ops.iter().take(REPLAYED_OPS) {
        // Huge sizes are refused with an error; that is fine, as long as nothing breaks.
        let _ = r.step(&mut a, op);
        if let Err(e) = a.check_invariants() {
            panic!("replaying {op:?}: {e}");
        }
    }
}
