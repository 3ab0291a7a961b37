//! A regrowing stream's region (`regrowth.rs` says why it has one; `regrow_region` turns it
//! on): given at a miss once the stream's misses look like regrowth, at the top of its own
//! large ranges; misses of its large pool are placed there (`paging.rs`, `best_run`), a
//! request whose best fit lies behind free memory of its run is placed, on a device nearly
//! full, as a miss is, from the front of a run (`at_front_of_run`), and no layout is learned
//! once one is given.
//!
//! Slots: a region given for tensors regrown of at least [`MIN_SLOTTED_PAGES`] pages is cut
//! into slots of [`SLOT_PER_REQUEST`] times those tensors (a power of two), and each request of
//! at least a sixteenth of a slot, hit or miss, is placed at the start of the slot with the
//! most mapped bytes under it, of those the one with the fewest mapped in all (`SlotFit`), then
//! the lowest. Packed side by side, a tensor regrown one token longer fits no hole its
//! predecessors left, so holes multiply and keep their pages: a DynamicCache-style serving
//! loop reserved 1.197 times its peak requested bytes over four runs, where PyTorch's default
//! reserves 1.101. Apart, the slot a tensor leaves is the next one's, one page short at most,
//! mapped at its end where nothing lies; the waste is a slot's tail, one page a tensor, and a
//! free slot's pages, which (unlike a packed region's holes) move before the device is asked
//! for pages beyond the peak. On a device near full, packed holes give their pages up a tensor
//! at a time, and slots, which keep each tensor's pages where the next one goes, move far
//! fewer: 12,854 driver calls against 249,306 at that loop's smallest device. The region needs
//! room for its slots: the large pool's range spans 11 times the device's memory (`vm.rs`,
//! `REGION_RANGES`).
//!
//! Invariants: a region starts where nothing was mapped above it in its range when given, and
//! ends where that range ends; it lies in none of a planned layout's ranges; its slots do not
//! change while it lives.

use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::base::size::Pool;
use crate::data::block::{BlockState, NIL};
use crate::engine::allocator::Allocator;
use crate::engine::paged::paging::{Placement, MAX_CHUNK_PAGES};
use crate::engine::paged::regrowth::{Region, RegionIdle, SlotFit};
use crate::report::explain::Decision;

/// A region's tensors of fewer pages than this are packed: a slot's tail wastes up to a page
/// a tensor.
pub const MIN_SLOTTED_PAGES: u64 = 16;

/// Slots are this many times the tensors regrown when the region was given, rounded up to a
/// power of two: room for those tensors to grow fourfold.
pub const SLOT_PER_REQUEST: u64 = 4;

impl<D: Device> Allocator<D> {
    /// The slot size of a region for tensors regrown of `size` bytes: 0 (packed) for a tensor
    /// under [`MIN_SLOTTED_PAGES`] pages, whose slot's tail (up to a page) would cost more than
    /// the holes.
    fn slot_for(&self, size: u64) -> u64 {
        if size < MIN_SLOTTED_PAGES * self.paged.paged_page {
            return 0;
        }
        size.saturating_mul(SLOT_PER_REQUEST).checked_next_power_of_two().unwrap_or(0)
    }

    /// Counts a miss of `stream` and gives the stream its region once its misses look like
    /// regrowth, slotted by the size of the tensors regrown.
    pub(crate) fn note_miss(&mut self, stream: Stream) {
        if !self.config.regrow_region {
            return;
        }
        let Some(regrown) = self.paged.regrowth.note(stream, MIN_SLOTTED_PAGES * self.paged.paged_page) else {
            return;
        };
        if let Some(region) = self.top_of_ranges(stream, self.slot_for(regrown)) {
            self.paged.regrowth.set(stream, region);
            self.explainer.note(|| Decision::RegionForRegrowth { stream, from: region.from });
            // A plan is learned from requests that repeat; a stream regrowing tensors asks
            // for a longer one each step, and a plan of its prompt alone, followed, holds
            // pages the region's holes need (b64_p256_n256_l16_h2048: 6% more reserved
            // from the fourth generation on).
            self.stop_learning();
        }
    }

    /// From the end of the highest mapping in `stream`'s own large ranges to that range's
    /// end; a range with nothing mapped offers its whole length.
    fn top_of_ranges(&self, stream: Stream, slot: u64) -> Option<Region> {
        let own = self.vm.ranges.iter().filter(|r| r.pool == Pool::Large && r.stream == stream);
        let own = own.filter(|r| !self.paged.plan_ranges.contains(&r.base));
        let tops = own.map(|r| {
            let from = r.mappings.iter().next_back().map_or(r.base, |(&a, &(len, _))| a + len);
            Region { from, end: r.base + r.size, slot }
        });
        tops.filter(|r| r.from < r.end).max_by_key(|r| r.from)
    }

    /// Where a request of `size` bytes of `stream`'s `pool`, given cached block `id` by the
    /// free index (taken out of it), is served: placed as a miss is (`grow_paged`: the
    /// smallest run of the region holding it, from its front) when
    /// [`Allocator::behind_front_of_run`] says so and the pages can be had, else in the block
    /// itself (`place_against_live`), as the free index chose, with no release of the cache.
    /// Returns the block to hand out; `None` only when the block was lost to the failed try
    /// (a chunk moved for it that the device refused to map back): the request then grows as
    /// any miss.
    pub(crate) fn at_front_of_run(
        &mut self,
        pool: Pool,
        stream: Stream,
        id: u32,
        size: u64,
    ) -> Result<Option<u32>, AllocError> {
        if !self.behind_front_of_run(pool, stream, id, size) {
            return Ok(Some(self.place_against_live(id, size)));
        }
        let block = self.heap[id].addr;
        self.explainer.note(|| Decision::ToFrontOfHole { block });
        self.cache(id);
        if let Some(front) = self.grow_paged(pool, stream, size)? {
            return Ok(Some(front));
        }
        // Its chunks moved for the miss went back onto their ghosts: the block serves.
        let Some(again) = self.take_free_block::<false>(pool, stream, size) else { return Ok(None) };
        let block = self.heap[again].addr;
        self.explainer.note(|| Decision::FrontLackedPages { block });
        Ok(Some(self.place_against_live(again, size)))
    }

    /// Whether a request of `size` bytes of `stream`'s `pool`, which the free index would
    /// serve from cached block `id`, is placed as a miss is instead: the stream has a region,
    /// free or unmapped memory lies before the block in its run, and that run's front has its
    /// pages mapped, or the device is nearly full; or the request goes at a slot's start.
    ///
    /// A hole in the region is where the tensors regrown before it ended: each placed at its
    /// front, the hole slides up as K and V are regrown and stays one. Placed further in,
    /// where the cached block is, a tensor leaves the front behind as a gap between two live
    /// tensors that no longer tensor fits, each gap holding up to a page; on a device nearly
    /// full, b16_p64_n768_l24_h1024 then needed 1.0139 times its peak requested bytes (1.0025
    /// placed as a miss). But a front whose pages were given up under pressure takes pages
    /// moved from elsewhere, while the cached block is mapped: with a few pages to spare the
    /// gap costs less than the moves (b64_p256_n256_l16_h2048 made 18,621 driver calls on
    /// the device PyTorch's default needs, against 7,417), so such a front is taken only once
    /// the device cannot give a chunk of the largest size (docs/benchmarks.md).
    fn behind_front_of_run(&self, pool: Pool, stream: Stream, id: u32, size: u64) -> bool {
        let in_run = |b: u32| b != NIL && matches!(self.heap[b].state, BlockState::Free | BlockState::Unmapped);
        let Some(region) = self.region_of(pool, stream) else { return false };
        if region.slotted(size) {
            return true;
        }
        if !in_run(self.heap[id].prev) {
            return false;
        }
        let mut front = id;
        while in_run(self.heap[front].prev) {
            front = self.heap[front].prev;
        }
        let (end, mut b, mut mapped) = (self.heap[front].addr + size, front, true);
        while mapped && b != NIL && self.heap[b].addr < end {
            mapped = self.heap[b].state != BlockState::Unmapped;
            b = self.heap[b].next;
        }
        // On a GPU, asking what is free may be a driver call: only for a front lacking pages.
        mapped || self.headroom() < MAX_CHUNK_PAGES * self.paged.paged_page
    }

    /// Where in `run` (a run of free and unmapped blocks, from its first block) a request of
    /// `size` bytes would start in `region`'s slots, by [`SlotFit`]: the slot start of the run
    /// with the most bytes mapped under the request, and of those the one whose slot holds
    /// the fewest mapped bytes in the run. A tensor shorter than the slot then leaves a
    /// slot mapped whole to the request that needs it whole: a prompt's temporaries (half a
    /// slot or more), when the shorter keys and values of the same prompt took their slots,
    /// moved pages out of those tensors' slots' tails, every generation.
    pub(crate) fn slot_in_run(&self, region: Region, run: Placement, size: u64) -> Option<(SlotFit, Placement)> {
        // Most of a stream's runs lie below its region, or hold no slot start of the region.
        if run.run_end <= region.from.saturating_add(size) {
            return None;
        }
        let (first, slot) = (region.next_slot_start(run.addr), region.slot);
        // The run's mapped bytes in `[from, to)`: a request longer than a slot (a temporary of
        // a prompt longer than the one that set the slots) lies over the slots after its own.
        let mapped_in = |from: u64, to: u64| {
            let mut id = run.start;
            let mut mapped = 0;
            while id != NIL && self.heap[id].addr < to {
                let b = &self.heap[id];
                if b.state == BlockState::Free {
                    mapped += b.end().min(to).saturating_sub(b.addr.max(from));
                }
                id = b.next;
            }
            mapped
        };
        let mut best: Option<(SlotFit, u64)> = None;
        let mut consider = |mut fit: SlotFit, at: u64| {
            let fits = region.holds(at) && at + size <= run.run_end;
            if fits && size > slot {
                fit.under = mapped_in(at, at + size);
            }
            if fits && best.is_none_or(|(b, a)| fit.better_than(&b) || (fit == b && at < a)) {
                best = Some((fit, at));
            }
        };
        // One walk over the run's blocks, summing each slot's mapped bytes as it passes. Of the
        // slots with no pages only the lowest is scored: the others are no better.
        let mut summing: Option<(u64, SlotFit)> = None;
        let (mut empty, mut empty_found) = (first, false);
        let mut id = run.start;
        while id != NIL && self.heap[id].addr < run.run_end {
            let b = &self.heap[id];
            let (mut from, end) = (b.addr.max(first), b.end());
            while b.state == BlockState::Free && from < end {
                let at = region.slot_start(from);
                if summing.is_none_or(|(s, _)| s != at) {
                    if let Some((s, fit)) = summing.take() {
                        consider(fit, s);
                    }
                    // Slots are met in address order: one skipped before `at` has no pages.
                    if !empty_found {
                        empty_found = empty < at;
                        if empty == at {
                            empty = at + slot;
                        }
                    }
                }
                let (_, fit) = summing.get_or_insert((at, SlotFit { under: 0, slot: 0 }));
                let to = end.min(at + slot);
                fit.slot += to - from;
                fit.under += to.min(at + size).saturating_sub(from);
                from = to;
            }
            id = b.next;
        }
        if let Some((s, fit)) = summing {
            consider(fit, s);
        }
        consider(SlotFit { under: 0, slot: 0 }, empty);
        best.map(|(fit, at)| (fit, Placement { addr: at, ..run }))
    }

    /// What holds the idle chunk at `addr`, in free block `block`, back while the device makes
    /// new pages: nothing outside a region or in a slot's tail (past a tensor smaller than
    /// the one the slot held); a free slot's start, for the next tensor; a packed region's
    /// hole.
    pub(crate) fn region_idle(&self, addr: u64, block: u32) -> RegionIdle {
        match self.paged.regrowth.holding(addr) {
            None => RegionIdle::Movable,
            Some(r) if r.slot == 0 => RegionIdle::Hole,
            Some(r) if self.heap[block].addr > r.slot_start(addr) => RegionIdle::Movable,
            Some(_) => RegionIdle::FreeSlot,
        }
    }

    /// The region of `stream`'s `pool`, if it has one.
    pub(crate) fn region_of(&self, pool: Pool, stream: Stream) -> Option<Region> {
        if pool != Pool::Large {
            return None;
        }
        self.paged.regrowth.region(stream)
    }
}
