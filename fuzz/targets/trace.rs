//! The `trace` target: any text through `parse_trace` (RMM CSV, or PyTorch snapshot JSON when
//! it starts with `{`), then a replay of what parsed.
//!
//! Checks: parsing never panics; an error formats; a parsed trace keeps its invariants (every
//! slot below `slots`, each free names a live slot, one time per operation, the report's
//! counts equal a recount, allocations are never of zero bytes); `peak_requested` and
//! `describe` work; replaying it on a small device keeps the allocator's invariants.

use std::collections::BTreeSet;

use cachalot_core::{parse_trace, Allocator, Config, Replayer, SimDevice, Trace, TraceOp};

/// Operations of a parsed trace that are replayed (the parser is the target, not the replay).
const REPLAYED_OPS: usize = 2000;

/// Runs one input; panics on a crash.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let trace = match parse_trace(&text) {
        Ok(t) => t,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    check(&trace).unwrap_or_else(|e| panic!("{e}\ninput: {text:?}"));
    let _ = trace.peak_requested();
    let _ = trace.describe();
    replay(&trace);
}

fn check(t: &Trace) -> Result<(), String> {
    if t.ops.len() != t.times_us.len() {
        return Err(format!("{} operations but {} times", t.ops.len(), t.times_us.len()));
    }
    let mut live = BTreeSet::new();
    let (mut allocs, mut frees) = (0, 0);
    let mut streams = BTreeSet::new();
    let (mut waiting, mut deferred) = (BTreeSet::new(), 0);
    for (i, op) in t.ops.iter().enumerate() {
        match *op {
            TraceOp::Alloc { slot, size, stream } => {
                if slot >= t.slots || !live.insert(slot) || size == 0 {
                    return Err(format!("op {i}: allocation into slot {slot} of {} ({size} bytes)", t.slots));
                }
                streams.insert(stream);
                allocs += 1;
            }
            TraceOp::Free { slot } | TraceOp::FreeDeferred { slot, .. } => {
                if !live.remove(&slot) {
                    return Err(format!("op {i}: free of slot {slot}, which is not live"));
                }
                if let TraceOp::FreeDeferred { lane, .. } = *op {
                    if lane >= t.lanes || !waiting.insert(lane) {
                        return Err(format!("op {i}: deferred free on lane {lane} of {}, already waiting", t.lanes));
                    }
                    deferred += 1;
                }
                frees += 1;
            }
            TraceOp::FreeCompleted { lane } => {
                if !waiting.remove(&lane) {
                    return Err(format!("op {i}: completion of lane {lane}, on which no free waits"));
                }
            }
        }
    }
    let r = &t.report;
    let recount = (allocs, frees, live.len(), streams.len());
    let recount = (recount.0, recount.1, recount.2, recount.3, deferred);
    if (r.allocs, r.frees, r.live_at_end, r.streams, r.deferred_frees) != recount {
        let what = "(allocs, frees, live, streams, deferred frees)";
        return Err(format!("report {r:?} disagrees with a recount {what} = {recount:?}"));
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
