//! A regrowing stream's region (`regrowth.rs` says why it has one; `regrow_region` turns it
//! on): given at a miss once the stream's misses look like regrowth, at the top of its own
//! large ranges; misses of its large pool are placed there (`paging.rs`, `best_run`), a
//! request whose best fit lies behind free memory of its run goes, on a device nearly full,
//! to the run's front (`behind_front_of_run`), and no layout is learned once one is given.
//!
//! Invariants: a region starts where nothing was mapped above it in its range when given, and
//! ends where that range ends; it lies in none of a planned layout's ranges.

use crate::base::device::{Device, Stream};
use crate::base::size::Pool;
use crate::data::block::{BlockState, NIL};
use crate::engine::allocator::Allocator;
use crate::engine::paged::paging::MAX_CHUNK_PAGES;
use crate::engine::paged::regrowth::Region;
use crate::report::explain::Decision;

impl<D: Device> Allocator<D> {
    /// Counts a miss of `stream` and gives the stream its region once its misses look like
    /// regrowth.
    pub(crate) fn note_miss(&mut self, stream: Stream) {
        if self.config.regrow_region && self.paged.regrowth.note(stream) {
            if let Some(region) = self.top_of_ranges(stream) {
                self.paged.regrowth.set(stream, region);
                self.explainer.note(|| Decision::RegionForRegrowth { stream, from: region.from });
                // A plan is learned from requests that repeat; a stream regrowing tensors asks
                // for a longer one each step, and a plan of its prompt alone, followed, holds
                // pages the region's holes need (b64_p256_n256_l16_h2048: 6% more reserved
                // from the fourth generation on).
                self.stop_learning();
            }
        }
    }

    /// From the end of the highest mapping in `stream`'s own large ranges to that range's
    /// end; a range with nothing mapped offers its whole length.
    fn top_of_ranges(&self, stream: Stream) -> Option<Region> {
        let own = self.vm.ranges.iter().filter(|r| r.pool == Pool::Large && r.stream == stream);
        let own = own.filter(|r| !self.paged.plan_ranges.contains(&r.base));
        let tops = own.map(|r| {
            let from = r.mappings.iter().next_back().map_or(r.base, |(&a, &(len, _))| a + len);
            Region { from, end: r.base + r.size }
        });
        tops.filter(|r| r.from < r.end).max_by_key(|r| r.from)
    }

    /// Whether a request of `size` bytes of `stream`'s `pool` that the free index would serve
    /// from cached block `id` goes to the front of the block's run instead (`grow_paged`
    /// places it there): the stream has a region, free or unmapped memory lies before the
    /// block, and the front costs no move, or the device is nearly full.
    ///
    /// A hole in the region is where the tensors regrown before it ended: each placed at its
    /// front, the hole slides up as K and V are regrown and stays one. Placed further in,
    /// where the cached block is, a tensor leaves the front behind as a gap between two live
    /// tensors that no longer tensor fits, each gap holding up to a page; on a device nearly
    /// full, b16_p64_n768_l24_h1024 then needed 1.0139 times its peak requested bytes (1.0025
    /// with the front). But a front whose pages were given up under pressure takes pages
    /// moved from elsewhere, while the cached block is mapped: with a few pages to spare the
    /// gap costs less than the moves (b64_p256_n256_l16_h2048 made 18,621 driver calls on
    /// the device PyTorch's default needs, against 7,417), so the front is taken then only
    /// once the device cannot give a chunk of the largest size (docs/benchmarks.md).
    pub(crate) fn behind_front_of_run(&self, pool: Pool, stream: Stream, id: u32, size: u64) -> bool {
        let in_run = |b: u32| b != NIL && matches!(self.heap[b].state, BlockState::Free | BlockState::Unmapped);
        if pool != Pool::Large || !in_run(self.heap[id].prev) || self.region_of(pool, stream).is_none() {
            return false;
        }
        let mut front = id;
        while in_run(self.heap[front].prev) {
            front = self.heap[front].prev;
        }
        let end = self.heap[front].addr + size;
        let mut b = front;
        while b != NIL && self.heap[b].addr < end {
            if self.heap[b].state == BlockState::Unmapped {
                return self.headroom() < MAX_CHUNK_PAGES * self.paged.paged_page;
            }
            b = self.heap[b].next;
        }
        true
    }

    /// The region of `stream`'s `pool`, if it has one.
    pub(crate) fn region_of(&self, pool: Pool, stream: Stream) -> Option<Region> {
        if pool != Pool::Large {
            return None;
        }
        self.paged.regrowth.region(stream)
    }
}
