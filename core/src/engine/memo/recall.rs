//! The allocator's side of the decision memo (`decision_memo.rs`): answering a malloc or a
//! free from the memo, applying it to the blocks and the statistics at once, and settling,
//! which ends a replay by rebuilding what it left alone.
//!
//! Invariant: outside a replay the free index, the address table and the slab's list of
//! vacant ids describe the blocks; during one only the blocks and the statistics are kept,
//! always as the usual path would leave them, and [`Allocator::settle`] rebuilds the rest
//! before anything reads it. Nothing is deferred: a reader of the blocks or the statistics
//! needs no catching up, whenever it reads.

use crate::base::device::{Device, Stream};
use crate::base::size::{round_size, Pool};
use crate::data::addr_map::AddrTable;
use crate::data::block::{BlockState, NIL};
use crate::data::free_index::FreeIndex;
use crate::engine::allocator::Allocator;
use crate::engine::memo::decision_memo::{Entry, MemoCounts};

impl<D: Device> Allocator<D> {
    /// What the decision memo is doing: whether it replays, its period, the periods replayed
    /// and the memory it holds.
    pub fn memo_counts(&self) -> MemoCounts {
        self.memo.counts()
    }

    /// The memo's answer to a malloc while replaying: the recorded address, if the malloc is
    /// the one recorded at this position and its block fits; otherwise the allocator settles
    /// and the caller serves the malloc the usual way.
    #[inline(always)]
    pub(crate) fn malloc_recalled(&mut self, size: u64, stream: Stream) -> Option<u64> {
        let e = *self.memo.expected();
        if e.is_free() || e.size() != size || self.heap.stream_of_lane(e.stream_index()) != stream || !self.fits(&e) {
            self.settle();
            return None;
        }
        self.answer(e);
        Some(e.addr)
    }

    /// The memo's answer to a free while replaying: true if `addr` is the free recorded at
    /// this position and its block fits, and the free is done.
    #[inline(always)]
    pub(crate) fn free_recalled(&mut self, addr: u64) -> bool {
        let e = *self.memo.expected();
        if !e.is_free() || e.key != addr || !self.fits(&e) {
            return false;
        }
        self.answer(e);
        true
    }

    /// True when recorded operation `e` fits the blocks as they stand: a malloc's block is
    /// free and the split rule splits it as recorded, into a vacant id; a free's block is
    /// allocated at its address. A replay only applies operations that fit, so a recording
    /// that went wrong ends the replay instead of corrupting the blocks.
    #[inline(always)]
    fn fits(&self, e: &Entry) -> bool {
        match self.heap.block(e.block) {
            Some(b) if e.is_free() => b.state == BlockState::Allocated && b.addr == e.key,
            Some(b) if b.state == BlockState::Free => {
                let rounded = round_size(e.size(), &self.config.roundup_power2_divisions);
                if b.size < rounded || b.stream_index != e.stream_index() || b.pool != Pool::for_size(rounded) {
                    return false;
                }
                let split = self.should_split::<true>(e.block, rounded);
                split == (e.front != NIL) && (!split || self.heap.is_vacant(e.front))
            }
            _ => false,
        }
    }

    /// Applies recorded operation `e`, which fits, and moves the memo past it; ends the
    /// period if it was its last.
    #[inline(always)]
    fn answer(&mut self, e: Entry) {
        self.apply_one(e);
        if self.memo.answered() {
            self.end_period();
        }
    }

    /// Ends a replayed period: its blocks are renamed back to the ids the period began with.
    #[cold]
    #[inline(never)]
    fn end_period(&mut self) {
        self.heap.rename_blocks(self.memo.renames());
        self.memo.next_period();
    }

    /// Applies recorded operation `e` to the blocks and the statistics as the usual path
    /// would: its block is the recorded one, and the address table and the free index are
    /// left alone.
    #[inline(always)]
    fn apply_one(&mut self, e: Entry) {
        if e.is_free() {
            // A recorded free's block has no use on another stream (or the recording would
            // have stopped), so it queues no event and cannot fail.
            let _ = self.free_as::<true, true>(e.key, e.block);
        } else {
            let size = e.size();
            let rounded = round_size(size, &self.config.roundup_power2_divisions);
            self.hand_out::<true, true>(e.block, rounded, size, e.front);
        }
    }

    /// Ends a replay, if one runs, rebuilding the free index, the address table and the
    /// slab's vacant list from the blocks; the memo starts watching again. Every call that
    /// reads those structures, or changes what the memo assumes, settles first.
    pub(crate) fn settle(&mut self) {
        if self.memo.replaying() {
            let (free, live) = self.indexes_from_blocks();
            self.heap.set_indexes(free, live);
        }
        self.memo.restart();
    }

    /// The free index and the address table as the blocks say they should be.
    pub(crate) fn indexes_from_blocks(&self) -> ([FreeIndex; 2], AddrTable) {
        let mut free = [FreeIndex::default(), FreeIndex::default()];
        let mut live = AddrTable::default();
        for (id, b) in self.heap.blocks() {
            match b.state {
                // No block is parked where the memo runs (classic segments only).
                BlockState::Free => {
                    free[b.pool.index()].insert(self.heap.stream_of_lane(b.stream_index), b.size, b.addr, id)
                }
                BlockState::Allocated => live.insert(b.addr, id, self.heap.slab()),
                _ => {}
            }
        }
        (free, live)
    }

    /// True when no event is queued, no block is marked as used on another stream, no
    /// private pool exists and no capture is underway or waited for: what the memo asks of
    /// every operation it records.
    #[inline(always)]
    pub(crate) fn is_quiet(&self) -> bool {
        self.events.is_empty() && self.stream_uses.is_empty() && self.pools.is_empty() && self.captures.is_idle()
    }

    /// While replaying, the memo's invariant: the operation expected next fits the blocks.
    pub(crate) fn check_memo(&self) -> Result<(), alloc::string::String> {
        if !self.memo.replaying() || self.fits(self.memo.expected()) {
            return Ok(());
        }
        let e = self.memo.expected();
        Err(alloc::format!("the decision memo expects {e:?}, which block {} does not fit", e.block))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Allocator, Config, SimDevice};

    /// An allocator replaying a loop, stopped where the next recorded operation is a free
    /// (`free`) or a malloc, with allocations live.
    fn replaying(free: bool) -> Allocator<SimDevice> {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config { decision_memo: true, ..Config::pytorch() });
        let sizes = [3 << 20, 700 << 10, 40 << 20, 512];
        let stop = |a: &Allocator<SimDevice>, free: bool| a.memo.replaying() && a.memo.expected().is_free() == free;
        for _ in 0..200 {
            let mut live = alloc::vec::Vec::new();
            for &size in &sizes {
                if !free && !live.is_empty() && stop(&a, false) {
                    return a;
                }
                live.push(a.malloc(size, 0).unwrap());
            }
            for (i, p) in live.into_iter().enumerate() {
                if free && i > 0 && stop(&a, true) {
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
        moved.memo.expected_mut().key += 512;
        let e = moved.check_invariants().unwrap_err();
        assert!(e.contains("decision memo"), "{e}");
        let mut other = a.clone();
        let id = other.memo.expected().block;
        other.memo.expected_mut().block = other.heap.blocks().map(|(i, _)| i).find(|&i| i != id).unwrap();
        assert!(other.check_invariants().unwrap_err().contains("decision memo"));
        // A malloc's block must be free.
        let mut taken = replaying(false);
        taken.check_invariants().unwrap();
        let busy = taken.heap.blocks().find(|(_, b)| b.state == crate::data::block::BlockState::Allocated).unwrap().0;
        taken.memo.expected_mut().block = busy;
        assert!(taken.check_invariants().unwrap_err().contains("decision memo"));
    }
}
