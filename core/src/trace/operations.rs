//! A trace as every reader builds it: the operations on *slots* a replay runs, what the reader
//! counted and skipped ([`TraceReport`]), the segment placements the trace gives, and the
//! [`Builder`] that the CSV reader (`csv.rs`) and the snapshot reader (`reader.rs`) feed row by
//! row, with the field parsers both share.
//!
//! Each allocation gets the lowest free slot number, and a free names the slot of the
//! allocation it ends, so a replay needs only an array indexed by slot.
//!
//! Invariants: a `Free` or `FreeDeferred` names a slot whose allocation is live at that point;
//! every slot number is below `slots`, every lane below `lanes`; a lane is completed at most
//! once after each deferred free on it, and reused only after that.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::base::device::Stream;
use crate::base::size::MAX_REQUEST;
use crate::trace::limits::{Limit, TraceLimits};
use crate::trace::position::Position;
use crate::trace::trace_error::{over, TraceError};

/// One operation of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate `size` bytes on `stream` into `slot`.
    Alloc {
        /// Slot the address goes into.
        slot: u32,
        /// Requested bytes.
        size: u64,
        /// Stream of the request.
        stream: Stream,
    },
    /// Free the allocation held in `slot`.
    Free {
        /// Slot of the allocation.
        slot: u32,
    },
    /// Free the allocation held in `slot`, whose memory another stream still uses: it may
    /// not be reused until the [`TraceOp::FreeCompleted`] of `lane`.
    FreeDeferred {
        /// Slot of the allocation.
        slot: u32,
        /// Lane that the completion names.
        lane: u32,
    },
    /// The other stream's work that `lane`'s deferred free waited for has finished.
    FreeCompleted {
        /// Lane of the deferred free.
        lane: u32,
    },
}

/// What the reader saw besides the operations it kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TraceReport {
    /// Data rows (or history entries) read.
    pub rows: usize,
    /// Allocations kept.
    pub allocs: usize,
    /// Frees kept.
    pub frees: usize,
    /// Frees of a pointer the trace never allocated (recording started late).
    pub unknown_frees: usize,
    /// Where the first of `unknown_frees` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_unknown_free: Option<Position>,
    /// Frees of a pointer the trace allocated and had freed already: a double free.
    pub double_frees: usize,
    /// Where the first of `double_frees` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_double_free: Option<Position>,
    /// `allocate failure` rows (or `oom` entries).
    pub alloc_failures: usize,
    /// Allocations of zero bytes (skipped, as PyTorch returns no memory for them).
    pub zero_size: usize,
    /// Allocations at an address still live in the trace (a free was not logged): the
    /// earlier allocation is freed first.
    pub implicit_frees: usize,
    /// Where the first of `implicit_frees` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_implicit_free: Option<Position>,
    /// Snapshot events whose action the reader does not know (skipped).
    pub unknown_actions: usize,
    /// The first of `unknown_actions`: where, and the action it named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_unknown_action: Option<UnknownAction>,
    /// Allocations never freed by the end of the trace.
    pub live_at_end: usize,
    /// Frees that waited for another stream's work (kept as deferred frees).
    pub deferred_frees: usize,
    /// Distinct streams seen.
    pub streams: usize,
}

/// A snapshot event with an action the reader does not know.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UnknownAction {
    /// Where it is.
    pub at: Position,
    /// The action it named ("" when it named none).
    pub action: String,
}

/// A parsed trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The operations, in order.
    pub ops: Vec<TraceOp>,
    /// Time of each operation in microseconds (same length as `ops`).
    pub times_us: Vec<u64>,
    /// Where each operation came from in the input (same length as `ops`; empty for a trace
    /// made by hand, not read).
    pub positions: Vec<Position>,
    /// Number of slots the operations use.
    pub slots: u32,
    /// Number of lanes the deferred frees use (at most this many wait at once).
    pub lanes: u32,
    /// What was counted while reading.
    pub report: TraceReport,
    /// Where the recorded run's device placed its segments, (address, size) in order: a
    /// snapshot's `segment_alloc` entries, or else the segments the allocations' pointers
    /// imply (see `inferred_segments.rs`). A replay follows them
    /// ([`crate::SimDevice::for_replay`]) to break best-fit ties as the run did; clear the
    /// list to replay with the simulated device's own addresses.
    pub segment_placements: Vec<(u64, u64)>,
    /// True when `segment_placements` were inferred from pointers, not recorded.
    pub placements_inferred: bool,
    /// The device whose events these are, when the snapshot listed several devices.
    pub device: Option<usize>,
    /// Operations moved out while reading ([`Trace::take_operations`]), no longer in `ops`:
    /// a reader that streams them holds none.
    pub ops_taken: usize,
}

/// Builds a trace from pointer-level events, assigning slots.
#[derive(Default)]
pub(crate) struct Builder {
    trace: Trace,
    /// Ordered, not hashed: the allocator's fast hash assumes device addresses, and a
    /// crafted file of pointers that collide in it made parsing quadratic.
    slot_of: alloc::collections::BTreeMap<u64, u32>,
    free_slots: Vec<u32>,
    streams: alloc::collections::BTreeSet<Stream>,
    /// The lane of each address whose deferred free has not completed.
    lane_of: alloc::collections::BTreeMap<u64, u32>,
    free_lanes: Vec<u32>,
    /// Pointers freed so far, to tell a double free from a free of a pointer never seen.
    freed: alloc::collections::BTreeSet<u64>,
    /// The position of the row or event being read.
    pub(crate) at: Position,
    /// The bounds kept.
    limits: TraceLimits,
    /// Rows or events read so far.
    events: u64,
    /// The segments the allocations' pointers imply.
    inferred: crate::trace::inferred_segments::InferredSegments,
}

impl Builder {
    /// A builder that keeps `limits`.
    pub(crate) fn within(limits: TraceLimits) -> Builder {
        Builder { limits, ..Builder::default() }
    }

    /// Counts one row or event read (at `line`, 0 for a snapshot), refusing one past the
    /// limit on events.
    pub(crate) fn event(&mut self, line: usize) -> Result<(), TraceError> {
        self.events += 1;
        if self.events > self.limits.events {
            return Err(over(line, Limit::Events(self.limits.events)));
        }
        Ok(())
    }

    /// Makes room for one more operation, or says that memory ran out: a browser's module
    /// has 4 GiB at most, and an allocation that fails there ends the module for good.
    fn room_for_one(&mut self) -> Result<(), String> {
        let (ops, times, positions) = (&mut self.trace.ops, &mut self.trace.times_us, &mut self.trace.positions);
        let reserved = ops.try_reserve(1).and_then(|()| times.try_reserve(1)).and_then(|()| positions.try_reserve(1));
        reserved.map_err(|_| {
            alloc::format!("out of memory after {} operations: the trace is too large to hold here", ops.len())
        })
    }

    /// Records an operation's time and position (with room made by `room_for_one`).
    fn push_time(&mut self, time_us: u64) {
        self.trace.times_us.push(time_us);
        self.trace.positions.push(self.at);
    }

    pub(crate) fn alloc(&mut self, ptr: u64, size: u64, stream: Stream, time_us: u64) -> Result<(), String> {
        self.trace.report.rows += 1;
        if size == 0 {
            self.trace.report.zero_size += 1;
            return Ok(());
        }
        if self.slot_of.contains_key(&ptr) {
            self.trace.report.implicit_frees += 1;
            self.trace.report.first_implicit_free.get_or_insert(self.at);
            self.free(ptr, time_us)?;
            self.trace.report.rows -= 1;
        }
        self.room_for_one()?;
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.trace.slots += 1;
            self.trace.slots - 1
        });
        self.slot_of.insert(ptr, slot);
        self.inferred.see(ptr, size);
        self.streams.insert(stream);
        self.trace.ops.push(TraceOp::Alloc { slot, size, stream });
        self.push_time(time_us);
        self.trace.report.allocs += 1;
        Ok(())
    }

    pub(crate) fn free(&mut self, ptr: u64, time_us: u64) -> Result<(), String> {
        if let Some(slot) = self.release_slot(ptr)? {
            self.trace.ops.push(TraceOp::Free { slot });
            self.push_time(time_us);
        }
        Ok(())
    }

    /// Counts a free row and gives back the slot of `ptr`, with room for its operation;
    /// `None` for a pointer with no live allocation.
    pub(crate) fn release_slot(&mut self, ptr: u64) -> Result<Option<u32>, String> {
        self.trace.report.rows += 1;
        self.room_for_one()?;
        let Some(slot) = self.slot_of.remove(&ptr) else {
            let r = &mut self.trace.report;
            if self.freed.contains(&ptr) {
                r.double_frees += 1;
                r.first_double_free.get_or_insert(self.at);
            } else {
                r.unknown_frees += 1;
                r.first_unknown_free.get_or_insert(self.at);
            }
            return Ok(None);
        };
        self.freed.insert(ptr);
        self.free_slots.push(slot);
        self.trace.report.frees += 1;
        Ok(Some(slot))
    }

    /// A free that waits for another stream: like [`Builder::free`], on a lane that
    /// [`Builder::complete`] ends.
    pub(crate) fn free_deferred(&mut self, ptr: u64, time_us: u64) -> Result<(), String> {
        // A second request for an address still waiting (a log that lost a completion):
        // the first wait ends here, so no lane is held forever.
        self.complete(ptr, time_us)?;
        let Some(slot) = self.release_slot(ptr)? else { return Ok(()) };
        let lane = self.free_lanes.pop().unwrap_or_else(|| {
            self.trace.lanes += 1;
            self.trace.lanes - 1
        });
        self.trace.ops.push(TraceOp::FreeDeferred { slot, lane });
        self.push_time(time_us);
        self.lane_of.insert(ptr, lane);
        self.trace.report.deferred_frees += 1;
        Ok(())
    }

    /// Appends an operation a reader placed itself, at `at` (`late_frees.rs`: a free held
    /// back until the next allocation row), keeping `lanes` and the deferred frees counted.
    pub(crate) fn push_op(&mut self, op: TraceOp, time_us: u64, at: Position) -> Result<(), String> {
        self.room_for_one()?;
        if let TraceOp::FreeDeferred { lane, .. } = op {
            self.trace.lanes = self.trace.lanes.max(lane + 1);
            self.trace.report.deferred_frees += 1;
        }
        self.trace.ops.push(op);
        self.trace.times_us.push(time_us);
        self.trace.positions.push(at);
        Ok(())
    }

    /// The deferred free of `ptr` completes; an address with none waiting is ignored.
    pub(crate) fn complete(&mut self, ptr: u64, time_us: u64) -> Result<(), String> {
        let Some(lane) = self.lane_of.remove(&ptr) else { return Ok(()) };
        self.room_for_one()?;
        self.free_lanes.push(lane);
        self.trace.ops.push(TraceOp::FreeCompleted { lane });
        self.push_time(time_us);
        Ok(())
    }

    pub(crate) fn unknown_action(&mut self, action: &str) {
        let r = &mut self.trace.report;
        r.unknown_actions += 1;
        if r.first_unknown_action.is_none() {
            r.first_unknown_action = Some(UnknownAction { at: self.at, action: action.into() });
        }
    }

    pub(crate) fn failure(&mut self) {
        self.trace.report.rows += 1;
        self.trace.report.alloc_failures += 1;
    }

    /// Moves the operations built so far out (see [`Trace::take_operations`]).
    pub(crate) fn take_operations(&mut self, each: impl FnMut(TraceOp, u64, Position)) {
        self.trace.take_operations(each);
    }

    pub(crate) fn finish(mut self) -> Trace {
        self.trace.report.live_at_end = self.slot_of.len();
        self.trace.report.streams = self.streams.len();
        self.trace.segment_placements = self.inferred.into_placements();
        self.trace.placements_inferred = !self.trace.segment_placements.is_empty();
        self.trace
    }
}

pub(crate) fn parse_hex(field: &str) -> Option<u64> {
    let f = field.trim();
    let digits = f.strip_prefix("0x").or_else(|| f.strip_prefix("0X")).unwrap_or(f);
    if digits.is_empty() {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Microseconds, or `HH:MM:SS.ffffff` as microseconds since midnight.
pub(crate) fn parse_time(field: &str) -> Option<u64> {
    let f = field.trim();
    if f.is_empty() {
        return Some(0);
    }
    if let Ok(us) = f.parse::<u64>() {
        return Some(us);
    }
    let mut parts = f.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut micros: u64 = 0;
    for (i, b) in frac.bytes().take(6).enumerate() {
        micros += (b - b'0') as u64 * 10u64.pow(5 - i as u32);
    }
    // Checked: a time past u64 microseconds (about 585,000 years) is a bad time, not a wrap.
    let whole = h
        .parse::<u64>()
        .ok()?
        .checked_mul(3600)?
        .checked_add(m.parse::<u64>().ok()?.checked_mul(60)?)?
        .checked_add(secs.parse::<u64>().ok()?)?;
    whole.checked_mul(1_000_000)?.checked_add(micros)
}

/// A request size a device could hold: no more than [`MAX_REQUEST`] (1 TiB).
pub(crate) fn checked_size(size: u64) -> Result<u64, String> {
    if size > MAX_REQUEST {
        return Err(alloc::format!("size {size} is more than 1 TiB ({MAX_REQUEST} bytes), more than any device holds"));
    }
    Ok(size)
}

impl Trace {
    /// Operations read: those held in `ops` and those taken out.
    pub fn op_count(&self) -> usize {
        self.ops.len().saturating_add(self.ops_taken)
    }

    /// Moves the operations held out, in order, each with its time and position (0 and
    /// line 0 where the trace has none), into `each`, and counts them in `ops_taken`: what a
    /// reader fed a line at a time calls after each line, so that it holds none of them.
    pub fn take_operations(&mut self, mut each: impl FnMut(TraceOp, u64, Position)) {
        let n = self.ops.len();
        for (i, op) in self.ops.drain(..).enumerate() {
            each(op, self.times_us.get(i).copied().unwrap_or(0), self.positions.get(i).copied().unwrap_or_default());
        }
        self.times_us.clear();
        self.positions.clear();
        self.ops_taken = self.ops_taken.saturating_add(n);
    }

    /// Peak of the bytes live at once, as requested (before rounding), of the operations
    /// held in `ops`.
    pub fn peak_requested(&self) -> u64 {
        let mut size_of = alloc::vec![0u64; self.slots as usize];
        // Summed wide: live sizes of a hand-made trace may add past u64 (the peak saturates).
        let (mut live, mut peak) = (0u128, 0u128);
        for op in &self.ops {
            match *op {
                TraceOp::Alloc { slot, size, .. } => {
                    // A hand-made trace may name a slot past `slots`.
                    if slot as usize >= size_of.len() {
                        size_of.resize(slot as usize + 1, 0);
                    }
                    size_of[slot as usize] = size;
                    live += size as u128;
                    peak = peak.max(live);
                }
                TraceOp::Free { slot } | TraceOp::FreeDeferred { slot, .. } => {
                    live -= size_of.get(slot as usize).copied().unwrap_or(0) as u128
                }
                TraceOp::FreeCompleted { .. } => {}
            }
        }
        u64::try_from(peak).unwrap_or(u64::MAX)
    }

    /// A one-line description of what the reader counted.
    pub fn describe(&self) -> String {
        let r = &self.report;
        let mut s = alloc::format!("{} operations ({} allocations, {} frees)", self.op_count(), r.allocs, r.frees);
        for (n, what) in [
            (r.unknown_frees, "frees of unknown pointers skipped"),
            (r.double_frees, "double frees skipped"),
            (r.unknown_actions, "events with unknown actions skipped"),
            (r.alloc_failures, "allocation failures skipped"),
            (r.zero_size, "zero-byte allocations skipped"),
            (r.implicit_frees, "re-allocated live pointers (implicit frees)"),
            (r.live_at_end, "allocations live at the end"),
            (r.deferred_frees, "frees that waited for another stream"),
        ] {
            if n > 0 {
                s.push_str(&alloc::format!(", {n} {what}"));
            }
        }
        s.to_string()
    }
}
