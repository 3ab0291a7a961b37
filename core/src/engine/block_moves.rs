//! The allocator's moves on the block heap (`block_heap.rs`) with what the rest adds to them:
//! PyTorch's split rule and the facts explained, the history's entries, and cachalot's policy
//! (parked blocks stay out of the free index, idle pages are counted, planned ranges note
//! their blocks). The heap does the moves; this file decides them and reports them.
//!
//! Invariant: as the heap's; a parked block is free and in no free index.

use crate::base::device::{Device, Stream};
use crate::base::size::{Pool, MIN_BLOCK, SMALL_SIZE};
use crate::data::block::NIL;
use crate::engine::allocator::Allocator;
use crate::engine::heap::block_heap::Cut;
use crate::engine::split_rule::{SplitClause, SplitRule};
use crate::engine::vrange::VmMode;
use crate::report::explain::Decision;
use crate::report::history::Action;

impl<D: Device> Allocator<D> {
    /// PyTorch's split rule: small pool when at least 512 B remain; large pool when the
    /// request is below `max_split_size` and more than 1 MiB remains.
    #[inline]
    pub(crate) fn should_split<const PLAIN: bool>(&self, id: u32, rounded: u64) -> bool {
        self.split_rule::<PLAIN>(id, rounded).splits()
    }

    /// PyTorch's split rule for block `id` and a request rounded to `rounded`, with the
    /// clause that decided: in the small pool, or in virtual memory (expandable segments and
    /// the paged policy), a remainder of at least 512 B is split off; in the large pool, one
    /// of more than 1 MiB, unless the request is `max_split_size` or more.
    #[inline(always)]
    pub(crate) fn split_rule<const PLAIN: bool>(&self, id: u32, rounded: u64) -> SplitRule {
        let b = &self.heap[id];
        let remaining = b.size - rounded;
        let in_vm = !PLAIN && (b.in_vm || self.config.expandable_segments);
        let (clause, split) = if b.pool == Pool::Small || in_vm {
            (if in_vm { SplitClause::VirtualMemory } else { SplitClause::SmallPool }, remaining >= MIN_BLOCK)
        } else if rounded >= self.config.max_split_size {
            (SplitClause::MaxSplitSize, false)
        } else {
            (SplitClause::LargePool, remaining > SMALL_SIZE)
        };
        SplitRule { clause, split, exact: remaining == 0 }
    }

    /// Hands out block `id` (taken from the free index or fresh from the device) for a
    /// rounded request, splitting off the remainder when the split rule says so; returns the
    /// address and the id of the block handed out. `RECALLED`: the decision memo chose `id`
    /// and the id `recalled_front` for a block split off it, and the address table and the free index
    /// are left alone.
    #[inline(always)]
    pub(crate) fn hand_out<const PLAIN: bool, const RECALLED: bool>(
        &mut self,
        id: u32,
        rounded: u64,
        requested: u64,
        recalled_front: u32,
    ) -> (u64, u32) {
        let (pool, in_vm) = (self.heap[id].pool, !PLAIN && self.heap[id].in_vm);
        let split = self.should_split::<PLAIN>(id, rounded);
        debug_assert!(!RECALLED || split == (recalled_front != NIL), "the memo's split is the rule's");
        if !PLAIN && self.explainer.decisions.is_some() {
            let (addr, block_size) = (self.heap[id].addr, self.heap[id].size);
            let reason = self.split_rule::<PLAIN>(id, rounded).reason();
            self.explainer.note(|| Decision::Split {
                addr,
                block_size,
                remainder: block_size - rounded,
                split,
                reason,
            });
        }
        let stamp = self.lookups[pool.index()];
        let front = if RECALLED { Some(recalled_front) } else { None };
        let cut = Cut { rounded, split, front, in_vm, stamp };
        let handed = self.heap.hand_out(id, requested, cut, !RECALLED);
        if let Some(rest) = handed.rest {
            if in_vm {
                if handed.head {
                    self.set_range_head(handed.id);
                }
                let rest_addr = self.heap[rest].addr;
                self.note_in_plan(handed.addr, handed.id);
                self.note_in_plan(rest_addr, rest);
            }
            if !RECALLED {
                self.cache_as::<PLAIN>(rest);
            }
        }
        let (addr, id) = (handed.addr, handed.id);
        self.count_allocation::<PLAIN>(pool, addr, handed.size, requested, handed.lane);
        if in_vm && self.vm.mode == VmMode::Paged {
            self.paged.peak_in_use = self.paged.peak_in_use.max(self.paged.pages_in_use(self.vm.mapped_pages));
            if pool == Pool::Large && self.config.regrow_region {
                self.paged.regrowth.handed_out(self.heap.stream_of_lane(handed.lane), handed.size);
            }
        }
        (addr, id)
    }

    /// Counts an allocation of `size` bytes at `addr`, asked for as `requested` bytes, in the
    /// statistics and the history; `PLAIN` as [`Allocator::plain`] says.
    #[inline(always)]
    pub(crate) fn count_allocation<const PLAIN: bool>(
        &mut self,
        pool: Pool,
        addr: u64,
        size: u64,
        requested: u64,
        lane: u32,
    ) {
        self.heap.count_allocation(pool, size, requested, size >= self.config.max_split_size);
        self.record_lane_if::<PLAIN>(Action::Alloc, addr, requested, lane);
    }

    /// Puts free block `id` in its pool's free index, unless it is parked in a followed
    /// plan's range (and counts its idle pages).
    #[inline(always)]
    pub(crate) fn cache(&mut self, id: u32) {
        self.cache_as::<false>(id);
    }

    /// [`Allocator::cache`]; `PLAIN` as [`Allocator::plain`] says.
    #[inline(always)]
    pub(crate) fn cache_as<const PLAIN: bool>(&mut self, id: u32) {
        if PLAIN || !self.is_parked(&self.heap[id]) {
            self.heap.cache(id);
        }
        let b = &self.heap[id];
        if !PLAIN && b.in_vm && self.vm.mode == VmMode::Paged {
            self.paged.idle_pages += self.paged.whole_page_count(b.addr, b.size);
        }
    }

    /// Takes free block `id` out of its pool's free index (a parked one is in none).
    #[inline(always)]
    pub(crate) fn uncache(&mut self, id: u32) {
        self.uncache_as::<false>(id);
    }

    /// [`Allocator::uncache`]; `PLAIN` as [`Allocator::plain`] says.
    #[inline(always)]
    pub(crate) fn uncache_as<const PLAIN: bool>(&mut self, id: u32) {
        if PLAIN || !self.is_parked(&self.heap[id]) {
            self.heap.uncache(id);
        }
        if !PLAIN {
            self.uncounted_idle(id);
        }
    }

    /// Stops counting the idle pages of block `id`, just taken out of the free index.
    #[inline]
    pub(crate) fn uncounted_idle(&mut self, id: u32) {
        let b = &self.heap[id];
        if b.in_vm && self.vm.mode == VmMode::Paged {
            self.paged.idle_pages -= self.paged.whole_page_count(b.addr, b.size);
        }
    }

    /// The stream block `id` belongs to.
    #[inline]
    pub(crate) fn stream_of(&self, id: u32) -> Stream {
        self.heap.stream_of_lane(self.heap[id].stream_index)
    }

    /// Records that block `id` now starts its virtual range.
    pub(crate) fn set_range_head(&mut self, id: u32) {
        let addr = self.heap[id].addr;
        if let Some(r) = self.vm.range_of(addr) {
            self.vm.ranges[r].head = id;
        }
    }
}
