//! The allocator's side of the decision memo (`decision_memo.rs`): answering a malloc or a
//! free from the memo, applying what was answered when something reads the blocks, and
//! settling, which ends a replay by rebuilding what it left alone.
//!
//! Invariant: outside a replay the free index, the address table and the slab's list of
//! vacant ids describe the blocks; during one only the blocks and the statistics are kept,
//! as they stand after the operations applied so far; every call that reads them applies
//! the operations answered since ([`Allocator::catch_up`]), and [`Allocator::settle`]
//! rebuilds the rest before anything else reads it.

use crate::addr_map::AddrTable;
use crate::allocator::Allocator;
use crate::block::BlockState;
use crate::decision_memo::{Entry, MemoCounts, PeriodStats};
use crate::device::{Device, Stream};
use crate::free_index::FreeIndex;
use crate::size::round_size;

impl<D: Device> Allocator<D> {
    /// What the decision memo is doing: whether it replays, its period, the periods replayed
    /// and the memory it holds.
    pub fn memo_counts(&self) -> MemoCounts {
        self.memo.counts()
    }

    /// The memo's answer to a malloc while replaying: the recorded address, if the malloc is
    /// the one recorded at this position; otherwise the allocator settles and the caller
    /// serves the malloc the usual way.
    #[inline(always)]
    pub(crate) fn malloc_recalled(&mut self, size: u64, stream: Stream) -> Option<u64> {
        let e = *self.memo.expected();
        if e.is_free() || e.size() != size || self.streams.handle(e.stream_index()) != stream {
            self.settle();
            return None;
        }
        self.answered(e);
        Some(e.addr)
    }

    /// Moves the memo past the operation `e` just answered: applied at once in a period
    /// after one that was read, and the period ended if it was its last.
    #[inline(always)]
    pub(crate) fn answered(&mut self, e: Entry) {
        if self.memo.eager() {
            self.apply_one(e);
            self.memo.applied_next();
        }
        if self.memo.answered() {
            self.end_period();
        }
    }

    /// Ends a replayed period: a period answered whole left the blocks as they were and adds
    /// its totals and peaks to the statistics; one applied in part is applied to its end and
    /// its blocks renamed back to the ids the period began with.
    #[cold]
    #[inline(never)]
    pub(crate) fn end_period(&mut self) {
        match self.memo.period_stats() {
            Some(&PeriodStats { start, end }) if self.memo.whole_period_unapplied() => self.stats.repeat(&start, &end),
            _ => {
                self.apply_answered();
                self.blocks.rename(self.memo.renames());
            }
        }
        self.memo.next_period();
    }

    /// Applies to the blocks and the statistics the operations the memo answered without
    /// them, as the usual path would have: every call that reads either calls this first.
    #[inline]
    pub(crate) fn catch_up(&mut self) {
        if self.memo.replaying() {
            self.memo.note_read();
            self.apply_answered();
        }
    }

    /// [`Allocator::catch_up`]'s work.
    #[inline]
    fn apply_answered(&mut self) {
        let (from, to) = self.memo.unapplied();
        if from < to {
            self.apply_recalled(from, to);
            self.memo.applied_up_to(to);
        }
    }

    /// Applies the recorded operations `from..to` of the period, in order: each one's block
    /// is the recorded one, and the address table and the free index are left alone.
    #[inline(never)]
    fn apply_recalled(&mut self, from: usize, to: usize) {
        for i in from..to {
            let e = self.memo.period_entries()[i];
            self.apply_one(e);
        }
    }

    /// [`Allocator::apply_recalled`] for one operation.
    #[inline(always)]
    fn apply_one(&mut self, e: Entry) {
        if e.is_free() {
            let freed = self.free_as::<true, true>(e.key, e.block);
            debug_assert!(freed.is_ok(), "a recorded free queues no event");
        } else {
            let size = e.size();
            let rounded = round_size(size, &self.config.roundup_power2_divisions);
            let (addr, _) = self.hand_out::<true, true>(e.block, rounded, size, e.front);
            debug_assert_eq!(addr, e.addr, "the recorded block is at the recorded address");
        }
    }

    /// At a replay's start, with the blocks as the period found them: applies the period
    /// once, with the peaks restarted, to learn what a whole period does to the statistics,
    /// and puts the statistics back (the blocks come back by themselves, renamed).
    #[cold]
    #[inline(never)]
    pub(crate) fn learn_period(&mut self) {
        let kept = self.stats;
        self.stats.reset_peak();
        let start = self.stats;
        self.apply_recalled(0, self.memo.period_entries().len());
        self.blocks.rename(self.memo.renames());
        let end = self.stats;
        self.stats = kept;
        self.memo.learnt(PeriodStats { start, end });
    }

    /// Ends a replay, if one runs, rebuilding the free index, the address table and the
    /// slab's vacant list from the blocks; the memo starts watching again. Every call that
    /// reads those structures, or changes what the memo assumes, settles first.
    pub(crate) fn settle(&mut self) {
        if self.memo.replaying() {
            self.apply_answered();
            let (free, live) = self.indexes_from_blocks();
            (self.free, self.live) = (free, live);
            self.blocks.relink_vacant();
        }
        self.memo.restart();
    }

    /// The free index and the address table as the blocks say they should be.
    pub(crate) fn indexes_from_blocks(&self) -> ([FreeIndex; 2], AddrTable) {
        let mut free = [FreeIndex::default(), FreeIndex::default()];
        let mut live = AddrTable::default();
        for (id, b) in self.blocks.iter() {
            match b.state {
                // No block is parked where the memo runs (classic segments only).
                BlockState::Free => {
                    free[b.pool.index()].insert(self.streams.handle(b.stream_index), b.size, b.addr, id)
                }
                BlockState::Allocated => live.insert(b.addr, id, &self.blocks),
                _ => {}
            }
        }
        (free, live)
    }

    /// True when no event is queued and no block is marked as used on another stream: what
    /// the memo asks of every free it records.
    #[inline(always)]
    pub(crate) fn is_quiet(&self) -> bool {
        self.events.is_empty() && self.stream_uses.is_empty()
    }

    /// While replaying, the memo's invariant: the block of the next operation to apply is
    /// free (a malloc) or allocated at the recorded address (a free).
    pub(crate) fn check_memo(&self) -> Result<(), alloc::string::String> {
        if !self.memo.replaying() {
            return Ok(());
        }
        let e = self.memo.to_apply();
        let ok = match self.blocks.get(e.block) {
            Some(b) if e.is_free() => b.state == BlockState::Allocated && b.addr == e.key,
            Some(b) => b.state == BlockState::Free,
            None => false,
        };
        if ok {
            Ok(())
        } else {
            Err(alloc::format!("the decision memo expects {e:?}, which block {} does not fit", e.block))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Allocator, Config, SimDevice};

    /// An allocator replaying a loop, stopped where the next recorded operation is a free
    /// (`free`) or a malloc, with allocations live.
    fn replaying(free: bool) -> Allocator<SimDevice> {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
        let sizes = [3 << 20, 700 << 10, 40 << 20, 512];
        let stop = |a: &Allocator<SimDevice>, free: bool| a.memo.replaying() && a.memo.expected().is_free() == free;
        for _ in 0..200 {
            let mut live = alloc::vec::Vec::new();
            for &size in &sizes {
                if !free && !live.is_empty() && stop(&a, false) {
                    a.catch_up();
                    return a;
                }
                live.push(a.malloc(size, 0).unwrap());
            }
            for (i, p) in live.into_iter().enumerate() {
                if free && i > 0 && stop(&a, true) {
                    a.catch_up();
                    return a;
                }
                a.free(p).unwrap();
            }
        }
        panic!("no replay: {:?}", a.memo_counts());
    }

    #[test]
    fn the_invariant_check_fails_when_the_next_recorded_operation_does_not_fit_its_block() {
        let a = replaying(true);
        a.check_invariants().unwrap();
        let mut moved = a.clone();
        moved.memo.to_apply_mut().key += 512;
        let e = moved.check_invariants().unwrap_err();
        assert!(e.contains("decision memo"), "{e}");
        let mut other = a.clone();
        let id = other.memo.to_apply().block;
        other.memo.to_apply_mut().block = other.blocks.iter().map(|(i, _)| i).find(|&i| i != id).unwrap();
        assert!(other.check_invariants().unwrap_err().contains("decision memo"));
        // A malloc's block must be free.
        let mut taken = replaying(false);
        taken.check_invariants().unwrap();
        let busy = taken.blocks.iter().find(|(_, b)| b.state == crate::block::BlockState::Allocated).unwrap().0;
        taken.memo.to_apply_mut().block = busy;
        assert!(taken.check_invariants().unwrap_err().contains("decision memo"));
    }
}
