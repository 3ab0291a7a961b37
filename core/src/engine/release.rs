//! What the allocator returns to the device: garbage collection, oversize cached segments,
//! every cached segment (or idle page), and what it reports when even that leaves a request
//! out of memory. The growth seam (`growth.rs`) calls these in PyTorch's order.
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

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::base::device::{Device, HeldChange, Stream};
use crate::base::error::AllocError;
use crate::base::size::{round_size, segment_size, Pool};
use crate::engine::allocator::Allocator;
use crate::engine::vrange::VmMode;
use crate::report::explain::Decision;
use crate::report::history::Action;

impl<D: Device> Allocator<D> {
    /// Runs a release step and notes what it returned to the device: segments (or, under
    /// virtual memory, address ranges) released, and bytes.
    pub(crate) fn noting_releases<T>(
        &mut self,
        step: &'static str,
        f: impl FnOnce(&mut Self) -> Result<T, AllocError>,
    ) -> Result<T, AllocError> {
        // Unmap calls count in `num_device_free` too (ghosts included), so they are no count
        // of segments; and under expandable segments the `segment` statistic, as PyTorch's,
        // counts no range, so ranges are counted where they are.
        let held = |a: &Self| {
            if a.uses_virtual_memory() {
                a.vm.ranges.len() as i64
            } else {
                a.heap.stats().segment.current()
            }
        };
        let (before, reserved) = (held(self), self.reserved);
        let out = f(self)?;
        let segments = (before - held(self)).max(0) as u64;
        let bytes = reserved - self.reserved;
        let virtual_memory = self.uses_virtual_memory();
        self.explainer.note(|| Decision::Released { segments, bytes, step, virtual_memory });
        Ok(out)
    }

    /// Returns a cached segment to the device. The block must be free and unsplit.
    pub(crate) fn release_block(&mut self, id: u32) -> Result<(), AllocError> {
        let b = &self.heap[id];
        debug_assert!(!b.is_split() && !b.in_vm);
        let (addr, size, stream, pool) = (b.addr, b.size, self.heap.stream_of_lane(b.stream_index), b.pool);
        self.device.free(addr, size)?;
        self.uncache(id);
        self.heap.remove_block(id);
        self.reserved -= size;
        self.heap.stats_mut().num_device_free += 1;
        let oversize_segments = -((size >= self.config.max_split_size) as i64);
        self.count_held(HeldChange { pool, segments: -1, bytes: -(size as i64), oversize_segments });
        self.record(Action::SegmentFree, addr, size, stream);
        Ok(())
    }

    /// Releases one cached oversize segment large enough for the request, or else oversize
    /// segments from the largest down until enough is released. True if that succeeded.
    pub(crate) fn release_available_cached_blocks(
        &mut self,
        pool: Pool,
        stream: Stream,
        rounded: u64,
    ) -> Result<bool, AllocError> {
        let max_split = self.config.max_split_size;
        if max_split == u64::MAX {
            return Ok(false);
        }
        let target = rounded.max(max_split);
        let index = self.heap.owner_index(self.pools.serving, pool);
        if let Some((_, id)) = index.best_fit(stream, target) {
            if !self.heap[id].is_split() && !self.heap[id].in_vm {
                self.release_block(id)?;
                return Ok(true);
            }
        }
        let mut chosen = Vec::new();
        let mut total = 0;
        for ((s, size, _), id) in index.before(stream, target) {
            if total >= target || size < max_split || s != stream {
                break;
            }
            if !self.heap[id].is_split() && !self.heap[id].in_vm {
                chosen.push(id);
                total += size;
            }
        }
        for id in chosen {
            self.release_block(id)?;
        }
        Ok(total >= target)
    }

    /// Waits for pending frees, then returns every unsplit cached segment to the device.
    pub(crate) fn release_cached_blocks(&mut self) -> Result<(), AllocError> {
        self.synchronize_and_free_events()?;
        self.release_unsplit_blocks(Pool::Large)?;
        self.release_unsplit_blocks(Pool::Small)?;
        self.release_unused_pools()
    }

    /// Returns every cached segment of `pool` that is one whole free block, and unmaps the
    /// whole pages of every free block in virtual ranges (releasing ranges left empty).
    pub(crate) fn release_unsplit_blocks(&mut self, pool: Pool) -> Result<(), AllocError> {
        let mut to_unmap = Vec::new();
        for id in self.heap.free_index(pool).ids() {
            if self.heap[id].in_vm {
                to_unmap.push(id);
            } else if !self.heap[id].is_split() {
                self.release_block(id)?;
            }
        }
        // A followed plan's parked blocks hold idle pages too.
        to_unmap.extend(self.parked_blocks().into_iter().filter(|&id| self.heap[id].pool == pool));
        for id in to_unmap {
            self.unmap_free_block(id)?;
        }
        // Kept chunks: the paged policy's, and any chunk the device refused to destroy before.
        let page = self.paged.paged_page;
        let (kept, rest): (Vec<_>, Vec<_>) = self.paged.page_pool.drain(..).partition(|c| c.counted_in == Some(pool));
        self.paged.page_pool = rest;
        let mut kept = kept.into_iter();
        while let Some(c) = kept.next() {
            if let Err(e) = self.destroy_chunk(c, page) {
                self.paged.page_pool.extend(kept);
                return Err(e);
            }
        }
        if self.vm.mode == VmMode::Paged {
            // Ranges whose pages all moved elsewhere hold no free block to unmap, yet still
            // count as segments until released.
            for r in (0..self.vm.ranges.len()).rev() {
                if self.vm.ranges[r].pool == pool {
                    self.release_range_if_empty(r)?;
                }
            }
        }
        Ok(())
    }

    /// PyTorch's garbage collection: while reserved memory exceeds the threshold fraction
    /// of the allowed memory, release unsplit cached large blocks at least as old (in
    /// lookups since they were cached) as the average.
    pub(crate) fn garbage_collect(&mut self) -> Result<(), AllocError> {
        let Some(allowed) = self.allowed else { return Ok(()) };
        // Memory other allocators sharing the limit hold counts against the threshold too.
        let threshold = ((self.config.garbage_collection_threshold * allowed as f64) as u64)
            .saturating_sub(self.device.reserved_elsewhere());
        if self.reserved <= threshold {
            return Ok(());
        }
        if self.vm.mode == VmMode::Paged {
            // Idle pages are the paged policy's cache: return them until under the threshold.
            return self.release_idle_pages(threshold).map(|_| ());
        }
        let target = self.reserved - threshold;
        let now = self.lookups[Pool::Large.index()];
        let age = |b: &crate::data::block::Block| now.wrapping_sub(b.stamp()) as u64;
        let mut total_age = 0u64;
        let mut freeable = 0u64;
        for (_, id) in self.heap.free_index(Pool::Large).iter() {
            let b = &self.heap[id];
            if !b.is_split() && !b.in_vm {
                total_age += age(b);
                freeable += 1;
            }
        }
        let mut reclaimed = 0;
        let mut freed_one = true;
        while reclaimed < target && freed_one && freeable > 0 {
            let threshold_age = total_age as f64 / freeable as f64;
            freed_one = false;
            for id in self.heap.free_index(Pool::Large).ids() {
                let b = &self.heap[id];
                let a = age(b);
                if !b.is_split() && !b.in_vm && a as f64 >= threshold_age {
                    freed_one = true;
                    reclaimed += b.size;
                    total_age -= a;
                    freeable -= 1;
                    self.release_block(id)?;
                }
            }
        }
        Ok(())
    }

    /// `throw_on_cudamalloc_oom` (PyTorch 2.12 on): a new segment of `size` bytes that would
    /// pass the memory fraction is refused before the device is asked, and the request ends
    /// out of memory at once, with no cached segment released and no retry; counted in
    /// `num_oom_rejections` as well as `num_ooms`.
    pub(crate) fn rejected_before_device(&mut self, stream: Stream, rounded: u64, size: u64) -> AllocError {
        let reason = "throw_on_cudamalloc_oom: it would exceed the memory fraction, so it is refused before the device";
        self.explainer.note(|| Decision::SegmentRefused { size, reason });
        if let Some(n) = self.heap.stats_mut().num_oom_rejections.as_mut() {
            *n += 1;
        }
        self.out_of_memory(rounded, rounded, stream)
    }

    /// Counts and describes an out-of-memory request.
    pub(crate) fn out_of_memory(&mut self, requested: u64, rounded: u64, stream: Stream) -> AllocError {
        let device_free = self.device.free_memory();
        self.explainer.note(|| Decision::OutOfMemory { requested });
        self.record(Action::Oom, device_free, rounded, stream);
        self.heap.stats_mut().num_ooms += 1;
        let seg =
            segment_size(round_size(requested, &self.config.roundup_power2_divisions), self.config.large_segment_size);
        AllocError::OutOfMemory(Box::new(self.oom_report(requested, rounded, seg, stream, device_free)))
    }
}
