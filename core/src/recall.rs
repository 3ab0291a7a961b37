//! The allocator's side of the decision memo (`decision_memo.rs`): answering a malloc from
//! the memo, and settling, which ends a replay by rebuilding what it left alone.
//!
//! Invariant: outside a replay the free index, the address table and the slab's list of
//! vacant ids describe the blocks; during one only the blocks (and the statistics) are kept,
//! and [`Allocator::settle`] rebuilds the rest from them before anything else reads them.

use crate::addr_map::AddrTable;
use crate::allocator::Allocator;
use crate::block::BlockState;
use crate::decision_memo::MemoCounts;
use crate::device::{Device, Stream};
use crate::free_index::FreeIndex;
use crate::size::round_size;

impl<D: Device> Allocator<D> {
    /// What the decision memo is doing: whether it replays, its period, the periods replayed
    /// and the memory it holds.
    pub fn memo_counts(&self) -> MemoCounts {
        self.memo.counts()
    }

    /// The memo's answer to a malloc while replaying: the address, if the malloc is the one
    /// recorded at this position; otherwise the allocator settles and the caller serves the
    /// malloc the usual way.
    #[inline(always)]
    pub(crate) fn malloc_recalled(&mut self, size: u64, stream: Stream) -> Option<u64> {
        let e = *self.memo.expected();
        // The block the recording took was on the recorded request's stream, and is now.
        if e.is_free() || e.key != size || self.streams.handle(self.blocks[e.block].stream_index) != stream {
            self.settle();
            return None;
        }
        let rounded = round_size(size, &self.config.roundup_power2_divisions);
        let (addr, _) = self.hand_out::<true, true>(e.block, rounded, size, e.front);
        self.memo.advance(&mut self.blocks);
        Some(addr)
    }

    /// Ends a replay, if one runs, rebuilding the free index, the address table and the
    /// slab's vacant list from the blocks; the memo starts watching again. Every call that
    /// reads those structures, or changes what the memo assumes, settles first.
    pub(crate) fn settle(&mut self) {
        if self.memo.replaying() {
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
                BlockState::Free if !self.is_parked(b) => {
                    free[b.pool.index()].insert(self.streams.handle(b.stream_index), b.size, b.addr, id)
                }
                BlockState::Allocated => live.insert(b.addr, id, &self.blocks),
                _ => {}
            }
        }
        (free, live)
    }

    /// True when no event is queued and no block is marked as used on another stream: what
    /// the memo needs of every operation it records.
    #[inline(always)]
    pub(crate) fn is_quiet(&self) -> bool {
        self.events.is_empty() && self.stream_uses.is_empty()
    }

    /// The device's allocations and frees so far.
    #[inline(always)]
    pub(crate) fn device_calls(&self) -> u64 {
        self.stats.num_device_alloc + self.stats.num_device_free
    }

    /// While replaying, the memo's invariant: the block the next operation expects is free
    /// (a malloc) or allocated at the recorded address (a free).
    pub(crate) fn check_memo(&self) -> Result<(), alloc::string::String> {
        if !self.memo.replaying() {
            return Ok(());
        }
        let e = self.memo.expected();
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
