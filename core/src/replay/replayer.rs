//! The replay engine: drives an allocator with a trace, operation by operation, and reports
//! what happened.
//!
//! An allocation the allocator refuses (out of memory) is counted and its slot left empty;
//! the trace's later free of it is skipped, as a program that caught the error would. A
//! pass ends by freeing what the trace left live, so the next pass starts from a warm cache
//! with nothing allocated, as PyTorch's reference replay does. A deferred free (the block was
//! still used on another stream) holds a stand-in stream busy on the device until the trace
//! completes it, and a pass's end completes the frees still waiting.
//!
//! Invariant: `addrs[slot]` is non-zero iff the trace's allocation in that slot is live in
//! the allocator (unless the caller freed it behind the replay's back: then the step that
//! frees it fails, and fails again if retried, leaving the slot as it was).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use crate::base::device::{Device, Stream};
use crate::base::error::{AllocError, OomReport};
use crate::engine::allocator::Allocator;
use crate::trace::operations::{Trace, TraceOp};

/// What one pass over a trace did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReplayOutcome {
    /// Operations executed.
    pub ops: usize,
    /// Peak bytes requested by live allocations.
    pub peak_requested_bytes: u64,
    /// Peak bytes of allocated blocks.
    pub peak_allocated_bytes: u64,
    /// Peak bytes of segments held.
    pub peak_reserved_bytes: u64,
    /// Segments obtained from the device during the pass.
    pub device_allocs: u64,
    /// Segments returned to the device during the pass.
    pub device_frees: u64,
    /// Allocations refused for lack of memory.
    pub ooms: u64,
    /// The first refusal: operation index and report.
    #[serde(skip)]
    pub first_oom: Option<(usize, Box<OomReport>)>,
}

/// A replay failed for a reason other than memory.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayError {
    /// Index of the operation that failed.
    pub op: usize,
    /// The allocator's error.
    pub error: AllocError,
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "replay failed at operation {}: {}", self.op, self.error)
    }
}

/// What a single step did.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// An allocation landed at this address.
    Allocated(u64),
    /// The allocation at this address was freed.
    Freed(u64),
    /// An allocation was refused for lack of memory.
    OutOfMemory(Box<OomReport>),
    /// A free of an allocation that had been refused, skipped.
    Skipped,
}

/// Replays traces; holds the slot table between passes.
#[derive(Clone, Debug, Default)]
pub struct Replayer {
    addrs: Vec<u64>,
    /// Lanes below this may be held busy on the device; a pass's end completes them.
    lanes_held: u32,
}

/// The stream that stands for `lane`'s other-stream work: counted down from the top of the
/// range, far from the handles a recorded run's streams have.
fn lane_stream(lane: u32) -> Stream {
    Stream::MAX - u64::from(lane)
}

impl Replayer {
    /// A replayer for traces with up to `slots` slots.
    pub fn new(slots: u32) -> Replayer {
        Replayer { addrs: alloc::vec![0; slots as usize], lanes_held: 0 }
    }

    /// Executes one operation.
    #[inline(always)]
    pub fn step<D: Device>(&mut self, alloc: &mut Allocator<D>, op: &TraceOp) -> Result<Step, AllocError> {
        match *op {
            TraceOp::Alloc { slot, size, stream } => {
                let (addr, step) = match alloc.malloc(size, stream) {
                    Ok(addr) => (addr, Step::Allocated(addr)),
                    Err(AllocError::OutOfMemory(report)) => (0, Step::OutOfMemory(report)),
                    Err(e) => return Err(e),
                };
                match self.addrs.get_mut(slot as usize) {
                    Some(entry) => *entry = addr,
                    None => self.grow(slot, addr),
                }
                Ok(step)
            }
            TraceOp::Free { slot } => {
                let Some(live) = self.addrs.get_mut(slot as usize) else { return Ok(Step::Skipped) };
                let addr = *live;
                if addr == 0 {
                    return Ok(Step::Skipped);
                }
                // The slot empties only once the free succeeds, so a failed step changes
                // nothing and a retry fails the same way instead of skipping the free.
                alloc.free(addr)?;
                *live = 0;
                Ok(Step::Freed(addr))
            }
            TraceOp::FreeDeferred { .. } | TraceOp::FreeCompleted { .. } => self.step_waiting(alloc, op),
        }
    }

    /// A free that waits: the block is marked as used on `lane`'s stream, which the device
    /// holds busy until the lane completes, so the allocator keeps it from reuse until then,
    /// by PyTorch's rule for blocks used on other streams. On a device that cannot hold a
    /// stream, the free is at once.
    /// Kept out of [`Replayer::step`], whose other operations are on the hot path: one call
    /// for both kinds of waiting operation costs the hot path less than an arm for each.
    #[cold]
    #[inline(never)]
    fn step_waiting<D: Device>(&mut self, alloc: &mut Allocator<D>, op: &TraceOp) -> Result<Step, AllocError> {
        let (slot, lane) = match *op {
            TraceOp::FreeDeferred { slot, lane } => (slot, lane),
            TraceOp::FreeCompleted { lane } => {
                alloc.device_mut().finish_replayed_stream(lane_stream(lane));
                return Ok(Step::Skipped);
            }
            // Only the two operations above come here (`step` sends them).
            TraceOp::Alloc { .. } | TraceOp::Free { .. } => return Ok(Step::Skipped),
        };
        let Some(&addr) = self.addrs.get(slot as usize) else { return Ok(Step::Skipped) };
        if addr == 0 {
            return Ok(Step::Skipped);
        }
        let stream = lane_stream(lane);
        if alloc.device_mut().hold_replayed_stream(stream) {
            self.lanes_held = self.lanes_held.max(lane + 1);
            alloc.record_stream(addr, stream)?;
        }
        alloc.free(addr)?;
        self.addrs[slot as usize] = 0;
        Ok(Step::Freed(addr))
    }

    /// Records `addr` in a slot past the table: a trace of more slots than this replayer was
    /// made for.
    #[cold]
    fn grow(&mut self, slot: u32, addr: u64) {
        self.addrs.resize(slot as usize + 1, 0);
        self.addrs[slot as usize] = addr;
    }

    /// Frees everything the trace left live. Every slot is emptied even when a free fails
    /// (an address freed behind the replay's back); the first failure is returned.
    pub fn free_live<D: Device>(&mut self, alloc: &mut Allocator<D>) -> Result<(), AllocError> {
        // Frees still waiting at the end complete, so the next pass starts from no work held.
        for lane in 0..core::mem::take(&mut self.lanes_held) {
            alloc.device_mut().finish_replayed_stream(lane_stream(lane));
        }
        let mut first_error = None;
        for a in self.addrs.iter_mut() {
            let addr = core::mem::take(a);
            if addr != 0 {
                if let Err(e) = alloc.free(addr) {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Replays `ops` and then frees what is left live, reading nothing else of the allocator:
    /// requests refused for lack of memory are passed over. Statistics read after each pass
    /// ([`Replayer::run_pass`]) make the decision memo apply what it answered, as a program
    /// that reads them each step does; the replay benchmarks time both.
    pub fn run_unread<D: Device>(&mut self, alloc: &mut Allocator<D>, ops: &[TraceOp]) -> Result<(), ReplayError> {
        for (i, op) in ops.iter().enumerate() {
            if let Err(error) = self.step(alloc, op) {
                let _ = self.free_live(alloc);
                return Err(ReplayError { op: i, error });
            }
        }
        self.free_live(alloc).map_err(|error| ReplayError { op: ops.len(), error })
    }

    /// Replays `ops` (a prefix or all of a trace) without freeing what is left live, unless
    /// an operation fails: then what is live is freed before the error returns.
    /// Peaks are those of the allocator's statistics since its last peak reset.
    pub fn run_ops<D: Device>(
        &mut self,
        alloc: &mut Allocator<D>,
        ops: &[TraceOp],
    ) -> Result<ReplayOutcome, ReplayError> {
        let (allocs0, frees0) = (alloc.stats().num_device_alloc, alloc.stats().num_device_free);
        let mut out = ReplayOutcome::default();
        for (i, op) in ops.iter().enumerate() {
            match self.step(alloc, op) {
                Ok(Step::OutOfMemory(report)) => {
                    out.ooms += 1;
                    if out.first_oom.is_none() {
                        out.first_oom = Some((i, report));
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    // Nothing the pass allocated stays behind with no slot to free it by.
                    let _ = self.free_live(alloc);
                    return Err(ReplayError { op: i, error });
                }
            }
        }
        let s = alloc.stats();
        out.ops = ops.len();
        out.peak_requested_bytes = s.requested_bytes.all.peak as u64;
        out.peak_allocated_bytes = s.allocated_bytes.all.peak as u64;
        out.peak_reserved_bytes = s.reserved_bytes.all.peak as u64;
        out.device_allocs = s.num_device_alloc - allocs0;
        out.device_frees = s.num_device_free - frees0;
        Ok(out)
    }

    /// Replays `ops` and then frees what is left live (device frees that causes are not
    /// counted in the outcome).
    pub fn run_pass<D: Device>(
        &mut self,
        alloc: &mut Allocator<D>,
        ops: &[TraceOp],
    ) -> Result<ReplayOutcome, ReplayError> {
        let out = self.run_ops(alloc, ops)?;
        self.free_live(alloc).map_err(|error| ReplayError { op: ops.len(), error })?;
        Ok(out)
    }

    /// Replays a whole trace on `alloc` once.
    pub fn replay<D: Device>(alloc: &mut Allocator<D>, trace: &Trace) -> Result<ReplayOutcome, ReplayError> {
        Replayer::new(trace.slots).run_pass(alloc, &trace.ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, SimDevice};

    /// A deferred free keeps its block from reuse until its lane completes, and a pass's
    /// end completes the frees still waiting, so the next pass may reuse them.
    #[test]
    fn a_deferred_free_is_reused_only_after_its_completion() {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
        let mut r = Replayer::new(3);
        let alloc = |slot| TraceOp::Alloc { slot, size: 8 << 20, stream: 0 };
        let Ok(Step::Allocated(x)) = r.step(&mut a, &alloc(0)) else { panic!("allocation refused") };
        r.step(&mut a, &TraceOp::FreeDeferred { slot: 0, lane: 0 }).unwrap();
        // Counted as freed at once, as PyTorch counts a free whose memory waits.
        assert_eq!(a.stats().allocated_bytes.all.current, 0);
        assert_ne!(r.step(&mut a, &alloc(1)), Ok(Step::Allocated(x)), "reused while the other stream used it");
        r.step(&mut a, &TraceOp::FreeCompleted { lane: 0 }).unwrap();
        assert_eq!(r.step(&mut a, &alloc(2)), Ok(Step::Allocated(x)));
        r.step(&mut a, &TraceOp::FreeDeferred { slot: 2, lane: 0 }).unwrap();
        r.free_live(&mut a).unwrap();
        a.empty_cache().unwrap();
        assert_eq!(a.stats().reserved_bytes.all.current, 0, "the waiting free completed at the pass's end");
    }

    /// A free the allocator refuses (its address freed behind the replay's back) leaves the
    /// slot as it was: a retry fails the same way rather than skipping the trace's free.
    #[test]
    fn a_failed_step_changes_nothing_and_a_retry_fails_again() {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
        let mut r = Replayer::new(2);
        let Ok(Step::Allocated(x)) = r.step(&mut a, &TraceOp::Alloc { slot: 0, size: 4096, stream: 0 }) else {
            panic!("allocation refused")
        };
        r.step(&mut a, &TraceOp::Alloc { slot: 1, size: 8192, stream: 0 }).unwrap();
        a.free(x).unwrap();
        let free = TraceOp::Free { slot: 0 };
        let first = r.step(&mut a, &free).unwrap_err();
        assert_eq!(r.step(&mut a, &free).unwrap_err(), first);
        // Ending the pass still frees the other slot and reports the failure.
        assert_eq!(r.free_live(&mut a).unwrap_err(), first);
        assert_eq!(a.stats().allocated_bytes.all.current, 0);
        assert_eq!(r.step(&mut a, &free), Ok(Step::Skipped));
    }
}
