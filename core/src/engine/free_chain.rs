//! PyTorch's free as one chain: find the allocation's block in the live map → count the free
//! → queue events on the streams that used it (the free then waits) → else merge it with its
//! free neighbours and cache it ([`Allocator::free_as`]); and `record_stream`, which marks
//! the streams a free waits for.
//!
//! Invariant: a free that fails changes nothing; one that succeeds leaves no two free
//! neighbours unmerged.

use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::base::size::Pool;
use crate::data::block::{BlockState, NIL};
use crate::engine::allocator::Allocator;
use crate::engine::vrange::VmMode;
use crate::report::explain::Decision;
use crate::report::history::Action;

impl<D: Device> Allocator<D> {
    /// Frees an address returned by [`Allocator::malloc`]. If the block was used on other
    /// streams, it becomes reusable once the work queued there now has completed.
    #[inline(always)]
    pub fn free(&mut self, addr: u64) -> Result<(), AllocError> {
        // As in malloc: a replay implies the plain copy.
        if self.memo.replaying() && self.free_recalled(addr) {
            return Ok(());
        }
        self.free_served(addr)
    }

    /// [`Allocator::free`] when the decision memo does not answer, out of line.
    #[inline(never)]
    fn free_served(&mut self, addr: u64) -> Result<(), AllocError> {
        if self.memo.replaying() {
            // An address outside every segment is no allocation of this one: refused without
            // ending the replay, since a caller with several allocators (the native library's
            // per-stream shards) asks each in turn.
            if !self.memo.within_segments(addr) {
                return Err(AllocError::UnknownPointer { addr });
            }
            self.settle();
        }
        if self.plain() {
            self.free_as::<true, false>(addr, NIL)
        } else {
            self.free_general(addr)
        }
    }

    /// The general copy of free's work, out of line.
    #[inline(never)]
    fn free_general(&mut self, addr: u64) -> Result<(), AllocError> {
        self.free_as::<false, false>(addr, NIL)
    }

    /// [`Allocator::free`]'s work; `PLAIN` as [`Allocator::plain`] says; `RECALLED` when the
    /// decision memo applies a free it answered (`decision_memo.rs`): its block is the
    /// recorded one, `recalled`, and the address table and the free index are left alone.
    #[inline(always)]
    pub(crate) fn free_as<const PLAIN: bool, const RECALLED: bool>(
        &mut self,
        addr: u64,
        recalled: u32,
    ) -> Result<(), AllocError> {
        let id = if RECALLED {
            recalled
        } else {
            match self.heap.remove_live(addr) {
                Some(id) => id,
                None => return Err(self.diagnose_bad_pointer(addr)),
            }
        };
        let uses = if self.stream_uses.is_empty() { None } else { self.stream_uses.remove(&id) };
        let mut deferred = false;
        if let Some(uses) = uses {
            if self.capturing() {
                // No event may be recorded during a capture: it waits for the captures' end.
                self.defer_events(id, uses);
                deferred = true;
            } else {
                self.forget_uses_during_capture(id);
                if let Err(e) = self.insert_events(id, &uses) {
                    self.stream_uses.insert(id, uses);
                    self.heap.insert_live(addr, id);
                    return Err(e);
                }
            }
        }
        if !PLAIN && self.learns_layout() && self.heap.lanes().owner(self.heap[id].stream_index) == 0 {
            self.log_free(id);
        }
        let b = &mut self.heap[id];
        let (size, pool, lane, requested, pending) =
            (b.size, b.pool, b.stream_index, b.requested(), b.event_count > 0 || deferred);
        b.state = if pending { BlockState::PendingFree } else { BlockState::Free };
        self.heap.stats_mut().allocation.decrease(pool, 1);
        self.heap.stats_mut().allocated_bytes.decrease(pool, size);
        if size >= self.config.max_split_size {
            self.heap.stats_mut().oversize_allocations.decrease(1);
        }
        self.record_lane_if::<PLAIN>(Action::FreeRequested, addr, requested, lane);
        if pending {
            self.heap.stats_mut().active.began(pool, 1);
            self.heap.stats_mut().active_bytes.began(pool, size);
            let events = self.heap[id].event_count as u64;
            self.explainer.note_if::<PLAIN>(|| {
                if deferred {
                    Decision::DeferredByCapture
                } else {
                    Decision::Pending { events }
                }
            });
        } else {
            self.free_block::<PLAIN, RECALLED>(id);
        }
        if PLAIN && !RECALLED && self.config.decision_memo {
            self.memo.free_served(addr, id, self.is_quiet() && !pending);
        }
        Ok(())
    }

    /// Marks the allocation at `addr` as used on `stream`, so that after it is freed it is
    /// not reused until the work queued on `stream` by then has completed.
    pub fn record_stream(&mut self, addr: u64, stream: Stream) -> Result<(), AllocError> {
        self.settle();
        let Some(id) = self.heap.live_block(addr) else {
            return Err(self.diagnose_bad_pointer(addr));
        };
        if self.stream_of(id) == stream {
            return Ok(());
        }
        let uses = self.stream_uses.entry(id).or_default();
        if !uses.contains(&stream) {
            if uses.len() == u8::MAX as usize {
                return Err(AllocError::TooManyStreams { addr });
            }
            uses.push(stream);
        }
        self.note_use_during_capture(id, stream);
        Ok(())
    }

    /// Caches a block whose free has completed: merges it with free neighbours and puts it
    /// in the free index.
    /// `RECALLED` as for [`Allocator::hand_out`].
    #[inline(always)]
    pub(crate) fn free_block<const PLAIN: bool, const RECALLED: bool>(&mut self, id: u32) {
        let b = &self.heap[id];
        let (addr, requested, lane, pool, in_vm) = (b.addr, b.requested(), b.stream_index, b.pool, !PLAIN && b.in_vm);
        let size = b.size;
        let (prev, next) = (b.prev, b.next);
        self.record_lane_if::<PLAIN>(Action::FreeCompleted, addr, requested, lane);
        let before = self.try_merge_as::<PLAIN, RECALLED>(id, prev, BlockState::Free);
        let after = self.try_merge_as::<PLAIN, RECALLED>(id, next, BlockState::Free);
        if !PLAIN && self.explainer.decisions.is_some() {
            for (side, bytes) in [("previous", before), ("next", after)] {
                if bytes > 0 {
                    self.explainer.note(|| Decision::Merged { side, bytes });
                }
            }
        }
        let stamp = if in_vm && self.vm.mode == VmMode::Paged {
            let stream = self.heap.stream_of_lane(lane);
            if pool == Pool::Large && self.config.regrow_region {
                self.paged.regrowth.freed(stream, size);
            }
            self.paged.epochs.freed(stream)
        } else {
            self.lookups[pool.index()]
        };
        let (key_addr, key_size, split) = self.heap.mark_free(id, (before, after), requested, in_vm, stamp);
        if !RECALLED {
            self.cache_as::<PLAIN>(id);
        }
        self.explainer.note_if::<PLAIN>(|| Decision::Cached { addr: key_addr, size: key_size, whole_segment: !split });
    }

    /// Merges the neighbour `other` into block `id` if `other` is in `state` (free or
    /// unmapped), taking it out of its index; returns the bytes gained (0 when not merged).
    #[inline(always)]
    pub(crate) fn try_merge(&mut self, id: u32, other: u32, state: BlockState) -> u64 {
        self.try_merge_as::<false, false>(id, other, state)
    }

    /// [`Allocator::try_merge`]; `PLAIN` as [`Allocator::plain`] says.
    #[inline(always)]
    fn try_merge_as<const PLAIN: bool, const RECALLED: bool>(&mut self, id: u32, other: u32, state: BlockState) -> u64 {
        if other == NIL || self.heap[other].state != state {
            return 0;
        }
        match state {
            BlockState::Free if RECALLED => {}
            BlockState::Free => self.uncache_as::<PLAIN>(other),
            BlockState::Unmapped => {
                let o = &self.heap[other];
                self.vm.unmapped[o.pool.index()].remove(&(self.heap.stream_of_lane(o.stream_index), o.addr));
            }
            _ => unreachable!("only free or unmapped blocks merge"),
        }
        let merged = self.heap.absorb(id, other, !RECALLED);
        if merged.in_vm {
            self.note_in_plan(merged.addr, id);
            if merged.head {
                self.set_range_head(id);
            }
        }
        merged.bytes
    }

    /// Explains why `addr` is not a live allocation (a slow path: it scans the blocks).
    pub(crate) fn diagnose_bad_pointer(&self, addr: u64) -> AllocError {
        for (_, b) in self.heap.blocks() {
            if b.addr == addr {
                return AllocError::DoubleFree { addr };
            }
            if b.addr < addr && addr < b.end() && b.state == BlockState::Allocated {
                return AllocError::InteriorPointer { addr, block: b.addr };
            }
        }
        AllocError::UnknownPointer { addr }
    }
}
