//! Frees whose memory an RMM CSV says came back late. A row stands where the program made
//! its call; its `Time` says when the allocator acted on it: for an allocation the same
//! moment, for a free the moment its memory could be reused. The two differ for PyTorch's
//! free of a block still used on another stream (`record_stream`): counted freed at once
//! (`free_requested`: allocated bytes fall) and reusable only once that stream's work is
//! done (`free_completed`). So a free row whose time is later than that of the allocation
//! after it waited, as a snapshot's history says with its two entries: [`LateFrees`] makes
//! it a [`TraceOp::FreeDeferred`] at its row and a [`TraceOp::FreeCompleted`] just before
//! the first allocation row whose time is not earlier than the free's (PyTorch completes
//! waiting frees at the start of a malloc), or never if none is (still waiting when the
//! log ended). A log whose times never go back reads as before: each free at its row.
//!
//! Invariants: a free row's slot is given back at its row, and its operation is emitted
//! before the next allocation's (which may take the slot), so operations keep their rows'
//! order and positions never decrease; memory grows with the frees since the last
//! allocation and the frees waiting, never with the rows.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::trace::operations::{Builder, TraceOp};
use crate::trace::position::Position;

/// A free row not yet emitted: its slot, its time, its row.
#[derive(Clone, Copy)]
struct Held {
    slot: u32,
    time_us: u64,
    at: Position,
}

/// The frees a CSV reader has read since its last allocation row, and those waiting.
#[derive(Default)]
pub(crate) struct LateFrees {
    /// Frees since the last allocation row, in row order.
    held: Vec<Held>,
    /// Lanes of deferred frees by the time their memory comes back (with a count, for
    /// equal times).
    waiting: BTreeMap<(u64, u64), u32>,
    /// Deferred frees so far (the count that keeps `waiting`'s keys apart).
    deferred: u64,
    /// Lanes whose free completed, to be taken again.
    free_lanes: Vec<u32>,
    /// Lanes handed out so far.
    lanes: u32,
    /// The time of the last allocation row.
    latest_us: u64,
}

impl LateFrees {
    /// A free row: its slot is given back now, its operation waits for the next allocation.
    pub(crate) fn free(&mut self, b: &mut Builder, ptr: u64, time_us: u64) -> Result<(), &'static str> {
        let Some(slot) = b.release_slot(ptr).map_err(|_| NO_MEMORY)? else { return Ok(()) };
        self.held.try_reserve(1).map_err(|_| NO_MEMORY)?;
        self.held.push(Held { slot, time_us, at: b.at });
        Ok(())
    }

    /// An allocation row at `time_us` follows: the waiting frees whose memory is back by
    /// then complete, and the frees held are emitted, each waiting if its time is later.
    /// Allocation times that go back (a clock time past midnight, or threads logging out of
    /// order) say nothing of when memory came back: every free waiting completes, and the
    /// frees held are at their rows.
    pub(crate) fn before_alloc(&mut self, b: &mut Builder, time_us: u64) -> Result<(), &'static str> {
        let went_back = time_us < self.latest_us;
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > time_us && !went_back {
                break;
            }
            let (&(back_us, _), &lane) = (entry.key(), entry.get());
            entry.remove();
            b.push_op(TraceOp::FreeCompleted { lane }, back_us, b.at).map_err(|_| NO_MEMORY)?;
            self.free_lanes.try_reserve(1).map_err(|_| NO_MEMORY)?;
            self.free_lanes.push(lane);
        }
        self.emit_held(b, Some(time_us).filter(|_| !went_back))?;
        self.latest_us = time_us;
        Ok(())
    }

    /// The rows ended: the frees after the last allocation are at their rows (no row says
    /// whether one was still waiting when the log ended, as the frees of any log's last
    /// rows have later times than its last allocation).
    pub(crate) fn finish(&mut self, b: &mut Builder) -> Result<(), &'static str> {
        self.emit_held(b, None)
    }

    /// Emits the frees held, before an allocation at `next_us` (or, with `None`, each at
    /// its row).
    fn emit_held(&mut self, b: &mut Builder, next_us: Option<u64>) -> Result<(), &'static str> {
        for h in core::mem::take(&mut self.held) {
            if next_us.is_none_or(|next| h.time_us <= next) {
                b.push_op(TraceOp::Free { slot: h.slot }, h.time_us, h.at).map_err(|_| NO_MEMORY)?;
                continue;
            }
            let lane = self.free_lanes.pop().unwrap_or_else(|| {
                self.lanes += 1;
                self.lanes - 1
            });
            // Asked for at its row, between the allocations around it.
            b.push_op(TraceOp::FreeDeferred { slot: h.slot, lane }, self.latest_us, h.at).map_err(|_| NO_MEMORY)?;
            self.waiting.insert((h.time_us, self.deferred), lane);
            self.deferred += 1;
        }
        Ok(())
    }
}

/// What each step says when memory runs out.
const NO_MEMORY: &str = "out of memory while reading the frees that waited: the trace is too large to hold here";

#[cfg(test)]
mod tests {
    use crate::trace::operations::{Trace, TraceOp};
    use crate::trace::parse_csv;
    use crate::trace::Position;
    use alloc::vec::Vec;

    const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream\n";

    fn csv(rows: &str) -> Trace {
        parse_csv(&alloc::format!("{HEADER}{rows}")).unwrap()
    }

    /// A free whose time is later than the allocations after it waited: freed at its row,
    /// its memory back before the first allocation of its time or later.
    #[test]
    fn a_free_whose_memory_came_back_later_waits_until_then() {
        let t = csv("0,10,allocate,0x1000,100,0x0\n\
                     0,11,allocate,0x2000,200,0x0\n\
                     0,14,free,0x1000,100,0x0\n\
                     0,12,allocate,0x3000,300,0x0\n\
                     0,13,allocate,0x4000,400,0x0\n\
                     0,14,allocate,0x5000,50,0x0\n");
        assert_eq!(
            t.ops,
            [
                TraceOp::Alloc { slot: 0, size: 100, stream: 0 },
                TraceOp::Alloc { slot: 1, size: 200, stream: 0 },
                TraceOp::FreeDeferred { slot: 0, lane: 0 },
                TraceOp::Alloc { slot: 0, size: 300, stream: 0 },
                TraceOp::Alloc { slot: 2, size: 400, stream: 0 },
                TraceOp::FreeCompleted { lane: 0 },
                TraceOp::Alloc { slot: 3, size: 50, stream: 0 },
            ]
        );
        assert_eq!(t.times_us, [10, 11, 11, 12, 13, 14, 14]);
        let lines: Vec<Position> = [2, 3, 4, 5, 6, 7, 7].map(Position::Line).into();
        assert_eq!(t.positions, lines);
        assert_eq!((t.lanes, t.report.deferred_frees, t.report.frees), (1, 1, 1));
    }

    /// Times that never go back, and a free of the time of the allocation after it, change
    /// nothing: each free is at its row.
    #[test]
    fn frees_in_time_order_stay_plain() {
        let t = csv("0,10,allocate,0x1000,100,0x0\n\
                     0,11,free,0x1000,100,0x0\n\
                     0,11,allocate,0x2000,200,0x0\n\
                     0,12,free,0x2000,200,0x0\n\
                     0,20,allocate,0x3000,300,0x0\n\
                     0,21,free,0x3000,300,0x0\n");
        assert_eq!((t.lanes, t.report.deferred_frees), (0, 0));
        let frees = t.ops.iter().filter(|op| matches!(op, TraceOp::Free { .. })).count();
        assert_eq!(frees, 3);
        assert_eq!(t.ops[1], TraceOp::Free { slot: 0 });
    }

    /// A clock time past midnight (or rows of threads out of order) makes allocation times go
    /// back: what waited completes, and a free just before is at its row, not kept back a day.
    #[test]
    fn allocation_times_that_go_back_end_every_wait() {
        let t = csv("0,23:59:59.000001,allocate,0xa,512,0x0\n\
                     0,23:59:59.000002,allocate,0xb,512,0x0\n\
                     0,23:59:59.900000,free,0xa,512,0x0\n\
                     0,23:59:59.000003,allocate,0xc,512,0x0\n\
                     0,23:59:59.999999,free,0xb,512,0x0\n\
                     0,00:00:00.000001,allocate,0xd,512,0x0\n\
                     0,00:00:00.000002,allocate,0xe,512,0x0\n");
        let frees: Vec<TraceOp> = t.ops.iter().copied().filter(|op| !matches!(op, TraceOp::Alloc { .. })).collect();
        assert_eq!(
            frees,
            [TraceOp::FreeDeferred { slot: 0, lane: 0 }, TraceOp::FreeCompleted { lane: 0 }, TraceOp::Free { slot: 1 }]
        );
        assert_eq!(t.ops[4], TraceOp::FreeCompleted { lane: 0 }, "before the allocation past midnight");
    }

    /// Two frees waiting at once take two lanes; a lane is taken again after its completion;
    /// a free after the last allocation is at its row.
    #[test]
    fn waiting_frees_take_lanes_and_give_them_back() {
        let t = csv("0,1,allocate,0xa,512,0x0\n\
                     0,2,allocate,0xb,512,0x0\n\
                     0,3,allocate,0xc,512,0x0\n\
                     0,6,free,0xb,512,0x0\n\
                     0,5,free,0xa,512,0x0\n\
                     0,4,allocate,0xd,512,0x0\n\
                     0,7,allocate,0xe,512,0x0\n\
                     0,9,free,0xc,512,0x0\n\
                     0,8,allocate,0xf,512,0x0\n\
                     0,10,free,0xd,512,0x0\n");
        let frees: Vec<TraceOp> = t.ops.iter().copied().filter(|op| !matches!(op, TraceOp::Alloc { .. })).collect();
        assert_eq!(
            frees,
            [
                TraceOp::FreeDeferred { slot: 1, lane: 0 },
                TraceOp::FreeDeferred { slot: 0, lane: 1 },
                TraceOp::FreeCompleted { lane: 1 },
                TraceOp::FreeCompleted { lane: 0 },
                TraceOp::FreeDeferred { slot: 2, lane: 0 },
                TraceOp::Free { slot: 0 },
            ]
        );
        assert_eq!(t.ops[8], TraceOp::Alloc { slot: 1, size: 512, stream: 0 }, "both back before the allocation at 7");
        assert_eq!((t.lanes, t.report.deferred_frees, t.report.live_at_end), (2, 3, 2));
    }
}
