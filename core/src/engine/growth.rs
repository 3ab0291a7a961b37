//! The growth seam: how the allocator gets memory from the device when no cached block fits
//! (step 5 of malloc, and the retry of step 6), in one place for the three ways it grows:
//! classic segments (PyTorch's default, and every private pool), expandable segments (one
//! growing virtual range per stream and pool, `expandable.rs`), and cachalot's paged policy
//! (pages mapped into ranges, `paged/paging.rs`). The malloc chain (`malloc_chain.rs`) calls
//! [`Allocator::grow`] and [`Allocator::grow_after_release`] and nothing else of these.
//!
//! Order (PyTorch 2.11): collect garbage if a memory fraction and
//! `garbage_collection_threshold` are set → allocate a segment → release one big-enough
//! oversize cached block (or oversize blocks largest first) and retry → wait for pending
//! frees, release every unsplit cached segment and retry (counted in `num_alloc_retries`)
//! → out of memory. Under cachalot's paged policy: map pages (`paging.rs`) → wait for pending
//! frees and retry → return every idle page and retry → out of memory, with what the last try
//! moved returned too. The last resort (release everything and retry) is a step of its own,
//! so that several allocators sharing a device (the native library's per-stream shards) can
//! all release before one retries, as PyTorch's one allocator does. Invariant: only whole
//! cached segments (free blocks with no neighbours) and pages wholly under free blocks are
//! ever returned to the device.

use crate::base::device::{Device, HeldChange, Stream};
use crate::base::error::AllocError;
use crate::base::size::{segment_size, Pool};
use crate::data::block::{Block, BlockState};
use crate::engine::allocator::Allocator;
use crate::engine::vrange::VmMode;
use crate::report::explain::Decision;
use crate::report::history::Action;

/// How the allocator grows for the malloc under way.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Growth {
    /// A segment from the device for each growth (PyTorch's default; every private pool).
    Classic,
    /// PyTorch's expandable segments: pages mapped at the end of a growing range.
    Expandable,
    /// cachalot's paged policy: pages mapped (or moved) under the request.
    Paged,
}

impl<D: Device> Allocator<D> {
    /// How this malloc grows: a private pool's segments are classic ones (`private_pool.rs`).
    #[inline]
    pub(crate) fn growth(&self) -> Growth {
        match (self.vm.mode, self.pools.serving) {
            (VmMode::Paged, 0) => Growth::Paged,
            (VmMode::Expandable, 0) => Growth::Expandable,
            _ => Growth::Classic,
        }
    }

    /// Step 5 of malloc: new memory for a rounded request in every way there is short of
    /// releasing the whole cache: garbage collection, a new segment (or pages), the same stream's oversize
    /// cached segments, pending frees. `None` when the last step, releasing every cached
    /// segment and retrying ([`Allocator::grow_after_release`]), is all that is left.
    pub(crate) fn grow(&mut self, pool: Pool, stream: Stream, rounded: u64) -> Result<Option<u32>, AllocError> {
        let size = segment_size(rounded, self.config.large_segment_size);
        if self.gc_enabled() {
            let before = self.reserved;
            self.garbage_collect()?;
            let bytes = before - self.reserved;
            if bytes > 0 {
                self.explainer.note(|| Decision::GarbageCollected { bytes });
            }
        }
        if self.growth() == Growth::Paged {
            if let Some(id) = self.grow_paged(pool, stream, rounded)? {
                return Ok(Some(id));
            }
            // Waiting for pending frees may leave pages idle that can be moved.
            self.heap.stats_mut().num_alloc_retries += 1;
            self.synchronize_and_free_events()?;
            return self.grow_paged(pool, stream, rounded);
        }
        if let Some(id) = self.allocate_segment(pool, stream, rounded, size, false)? {
            return Ok(Some(id));
        }
        let released = self.noting_releases("release oversize cached segments", |a| {
            a.release_available_cached_blocks(pool, stream, rounded)
        })?;
        if released {
            return self.allocate_segment(pool, stream, rounded, size, false);
        }
        Ok(None)
    }

    /// The last way to find memory: release every cached segment (or idle page) and retry.
    /// `None` is out of memory.
    pub(crate) fn grow_after_release(
        &mut self,
        pool: Pool,
        stream: Stream,
        rounded: u64,
    ) -> Result<Option<u32>, AllocError> {
        if self.growth() == Growth::Paged {
            // As PyTorch returns every cached segment and retries: idle pages that could not
            // be moved under the request (over the memory fraction, or in chunks too large
            // for the span) are returned, and new ones created in their place.
            self.noting_releases("release every idle page and retry", |a| {
                a.release_unused_pools()?;
                a.release_idle_pages(0)
            })?;
            if let Some(id) = self.grow_paged(pool, stream, rounded)? {
                return Ok(Some(id));
            }
            // Out of memory: what the last try moved goes back too, so a failed request leaves
            // the device no fuller than the live allocations need.
            self.release_idle_pages(0)?;
            return Ok(None);
        }
        self.noting_releases("release every unsplit cached segment and retry", |a| a.release_cached_blocks())?;
        self.allocate_segment(pool, stream, rounded, segment_size(rounded, self.config.large_segment_size), true)
    }

    /// Asks the device for a segment of the size a rounded request needs. `Ok(None)` when the
    /// device or the memory fraction says no.
    pub(crate) fn allocate_segment(
        &mut self,
        pool: Pool,
        stream: Stream,
        rounded: u64,
        size: u64,
        is_retry: bool,
    ) -> Result<Option<u32>, AllocError> {
        if is_retry {
            self.heap.stats_mut().num_alloc_retries += 1;
        }
        let expandable = self.growth() == Growth::Expandable;
        if let Some(allowed) = self.allowed_here() {
            if self.reserved + size > allowed {
                if self.config.throw_on_cudamalloc_oom {
                    return Err(self.rejected_before_device(stream, rounded, size));
                }
                let reason = "it would exceed the memory fraction";
                self.explainer.note(|| match expandable {
                    true => Decision::PagesRefused { size, reason },
                    false => Decision::SegmentRefused { size, reason },
                });
                return Ok(None);
            }
        }
        if expandable {
            let found = self.grow_expandable(pool, stream, rounded)?;
            if found.is_none() {
                self.explainer.note(|| Decision::PagesRefused { size, reason: "the device could not map more pages" });
            }
            return Ok(found);
        }
        let addr = match self.device.allocate(size) {
            Ok(addr) => addr,
            Err(crate::base::device::DeviceError::OutOfMemory) => {
                self.explainer.note(|| Decision::SegmentRefused { size, reason: "the device is out of memory" });
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        self.explainer.note(|| Decision::NewSegment { addr, size });
        self.reserved += size;
        let stream_index = self.heap.lane_in(stream, self.pools.serving);
        let id = self.heap.insert_block(Block::new(addr, size, stream_index, BlockState::Free, pool, false));
        let oversize_segments = (size >= self.config.max_split_size) as i64;
        self.count_held(HeldChange { pool, segments: 1, bytes: size as i64, oversize_segments });
        self.heap.stats_mut().num_device_alloc += 1;
        self.record(Action::SegmentAlloc, addr, size, stream);
        Ok(Some(id))
    }
}
