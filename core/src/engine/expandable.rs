//! PyTorch's expandable segments (`policy:pytorch,expandable_segments:True`): one virtual
//! range per stream and pool, 2 MiB pages for the small pool and `large_segment_size_mb` (20 MiB)
//! pages for the large, mapped where the free space at the lowest unmapped address can grow into the
//! request; blocks always split; pages are unmapped only when the cache is released.
//!
//! Invariant: the decisions are PyTorch 2.11's `find_expandable_block`, `map_block` and the
//! best-fit tweak of `get_free_block` that prefers a block that can grow over a larger one.

use alloc::vec::Vec;

use crate::base::device::{Device, DeviceError, Stream};
use crate::base::error::AllocError;
use crate::base::size::{Pool, SMALL_BUFFER};
use crate::data::block::{BlockState, NIL};
use crate::data::free_index::Key;
use crate::engine::allocator::Allocator;
use crate::engine::vrange::Chunk;
use crate::report::explain::Decision;

impl<D: Device> Allocator<D> {
    /// Size a block could reach: itself plus an unmapped block right after it.
    fn expandable_size(&self, id: u32) -> u64 {
        let b = &self.heap[id];
        let next = b.next;
        b.size + if next != NIL && self.heap[next].state == BlockState::Unmapped { self.heap[next].size } else { 0 }
    }

    /// PyTorch's tweak of best fit for expandable blocks: walk on while the next candidate
    /// of the stream could grow less far than the current one.
    pub(crate) fn prefer_expandable(&self, pool: Pool, stream: Stream, size: u64, found: (Key, u32)) -> (Key, u32) {
        let mut cur = found;
        let mut rest = self.heap.free_index(pool).iter_from(stream, size).skip_while(|&(_, id)| id != found.1).skip(1);
        while self.heap[cur.1].in_vm {
            match rest.next() {
                Some(next) if self.expandable_size(next.1) < self.expandable_size(cur.1) => cur = next,
                _ => break,
            }
        }
        cur
    }

    /// True when block `id` could become part of an allocation: free or unmapped, with no
    /// pending events.
    fn allocatable(&self, id: u32) -> bool {
        id != NIL && matches!(self.heap[id].state, BlockState::Free | BlockState::Unmapped)
    }

    /// The lowest-address unmapped block of `stream` (with the free block before it) that
    /// starts enough contiguous free space, or a fresh range's block.
    fn find_expandable_block(&mut self, pool: Pool, stream: Stream, size: u64) -> Result<Option<u32>, AllocError> {
        let starts: Vec<u32> = self.vm.unmapped[pool.index()]
            .range((stream, 0)..)
            .take_while(|((s, _), _)| *s == stream)
            .map(|(_, &id)| id)
            .collect();
        for id in starts {
            let prev = self.heap[id].prev;
            let c = if self.allocatable(prev) { prev } else { id };
            let (mut bytes, mut at) = (0, c);
            while bytes < size && self.allocatable(at) {
                bytes += self.heap[at].size;
                at = self.heap[at].next;
            }
            if bytes >= size {
                return Ok(Some(c));
            }
        }
        let page = if pool == Pool::Small { SMALL_BUFFER } else { self.config.large_segment_size };
        if size > self.range_size(page, pool) {
            // PyTorch reserves a range here even so, and the range, never mapped, is never
            // released: each such out-of-memory would leave one more range to search.
            return Ok(None);
        }
        self.reserve_range(stream, pool, page)
    }

    /// Maps the pages covering the first `size` bytes of the unmapped block `id`; returns
    /// the free block holding them, or `None` when the device has no memory for them.
    fn map_block(&mut self, id: u32, size: u64) -> Result<Option<u32>, AllocError> {
        let r = self.vm.range_of(self.heap[id].addr).expect("block lies in a range");
        let page = self.vm.ranges[r].page;
        let pages = size.div_ceil(page);
        let mut handles: Vec<Chunk> = Vec::with_capacity(pages as usize);
        for _ in 0..pages {
            match self.device.vm_create(page) {
                Ok(handle) => handles.push(Chunk { handle, pages: 1, counted_in: None, from: None, wait: None }),
                Err(e) => {
                    self.destroy_unmapped(handles, page);
                    return match e {
                        DeviceError::OutOfMemory => Ok(None),
                        e => Err(e.into()),
                    };
                }
            }
        }
        let from = self.heap[id].addr;
        match self.map_chunks(id, from, &handles) {
            Ok(mapped) => {
                let size = pages * page;
                self.explainer.note(|| Decision::MappedPages { addr: from, size, new_bytes: size });
                Ok(Some(mapped))
            }
            Err(failure) => {
                // Pages mapped before the failure stay mapped and counted; the rest go back.
                self.destroy_unmapped(handles.split_off(failure.mapped), page);
                Err(failure.error)
            }
        }
    }

    /// Gives back pages created for a mapping that failed; one the device refuses to destroy
    /// is kept, counted, rather than left held by the device and by no one's figures.
    fn destroy_unmapped(&mut self, handles: Vec<Chunk>, page: u64) {
        for c in handles {
            if self.device.vm_destroy(c.handle, page).is_err() {
                self.keep_undestroyed(c, page);
            }
        }
    }

    /// PyTorch's `try_allocate_expandable_block`: a free block of at least `size` bytes,
    /// taken out of the free index, or `None` when mapping fails.
    pub(crate) fn grow_expandable(&mut self, pool: Pool, stream: Stream, size: u64) -> Result<Option<u32>, AllocError> {
        let Some(mut candidate) = self.find_expandable_block(pool, stream, size)? else { return Ok(None) };
        if self.heap[candidate].state == BlockState::Unmapped {
            let want = self.heap[candidate].size.min(size);
            match self.map_block(candidate, want)? {
                Some(id) => candidate = id,
                None => return Ok(None),
            }
        }
        while self.heap[candidate].size < size {
            let remaining = size - self.heap[candidate].size;
            let next = self.heap[candidate].next;
            let want = remaining.min(self.heap[next].size);
            match self.map_block(next, want)? {
                Some(id) => candidate = id,
                None => return Ok(None),
            }
        }
        self.uncache(candidate);
        Ok(Some(candidate))
    }
}
