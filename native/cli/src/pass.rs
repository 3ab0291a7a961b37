//! One replay pass over a loaded trace, a piece of its spooled operations at a time: the
//! outcome `Replayer::run_ops` gives for all of them held at once, and the time spent
//! replaying alone.
//!
//! Invariants: the outcome is `run_ops`'s over the whole trace (counts summed over the
//! pieces; peaks those the allocator's statistics hold after the last piece, which only rise
//! within a pass; the first out of memory and a failed operation numbered from the trace's
//! start); the clock runs around the replay of each piece, never around reading it.

use std::time::{Duration, Instant};

use cachalot_core::replay::ReplayError;
use cachalot_core::{Allocator, Device, ReplayOutcome, Replayer};

use super::input::NamedTrace;

/// Replays every operation of `t` on `alloc` without freeing what is left live (as
/// `Replayer::run_ops`); on a failed operation, what is live is freed and the error names
/// the trace and the operation.
pub fn replay_pass<D: Device>(
    t: &NamedTrace,
    replayer: &mut Replayer,
    alloc: &mut Allocator<D>,
) -> Result<(ReplayOutcome, Duration), String> {
    let mut total = ReplayOutcome::default();
    let mut spent = Duration::ZERO;
    t.pieces(|p| {
        let start = Instant::now();
        let out = replayer.run_ops(alloc, &p.ops);
        spent += start.elapsed();
        let out = out.map_err(|e| format!("{}: {}", t.name, ReplayError { op: p.first + e.op, error: e.error }))?;
        total.ops += out.ops;
        total.ooms += out.ooms;
        total.device_allocs += out.device_allocs;
        total.device_frees += out.device_frees;
        if total.first_oom.is_none() {
            total.first_oom = out.first_oom.map(|(i, report)| (p.first + i, report));
        }
        total.peak_requested_bytes = out.peak_requested_bytes;
        total.peak_allocated_bytes = out.peak_allocated_bytes;
        total.peak_reserved_bytes = out.peak_reserved_bytes;
        Ok(())
    })?;
    Ok((total, spent))
}

/// [`replay_pass`], then what the trace left live freed (as `Replayer::run_pass`).
pub fn replay_whole_pass<D: Device>(
    t: &NamedTrace,
    replayer: &mut Replayer,
    alloc: &mut Allocator<D>,
) -> Result<(ReplayOutcome, Duration), String> {
    let out = replay_pass(t, replayer, alloc)?;
    replayer.free_live(alloc).map_err(|error| format!("{}: {}", t.name, ReplayError { op: t.ops.len(), error }))?;
    Ok(out)
}
