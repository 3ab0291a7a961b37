//! A regrowing stream's region (`regrowth.rs` says why it has one; `regrow_region` turns it
//! on): given at a miss once the stream's misses look like regrowth, at the top of its own
//! large ranges; misses of its large pool are placed there (`paging.rs`, `best_run`), and no
//! layout is learned once one is given.
//!
//! Invariants: a region starts where nothing was mapped above it in its range when given, and
//! ends where that range ends; it lies in none of a planned layout's ranges.

use crate::base::device::{Device, Stream};
use crate::base::size::Pool;
use crate::engine::allocator::Allocator;
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

    /// The region of `stream`'s `pool`, if it has one.
    pub(crate) fn region_of(&self, pool: Pool, stream: Stream) -> Option<Region> {
        if pool != Pool::Large {
            return None;
        }
        self.paged.regrowth.region(stream)
    }
}
