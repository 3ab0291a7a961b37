//! Out-of-memory recovery's last step: when nothing could serve a request, the report of
//! where the cached memory sits ([`OomReport`]), recounted from the blocks.
//!
//! Invariant: called right after the allocator gave up, when everything releasable has been
//! released.

use alloc::vec::Vec;

use crate::base::device::{Device, Stream};
use crate::base::oom_report::{FreeSpot, OomReport, SegmentUse};
use crate::base::size::Pool;
use crate::data::block::{BlockState, NIL};
use crate::engine::allocator::Allocator;

impl<D: Device> Allocator<D> {
    /// Every segment's use (virtual ranges count their mapped bytes).
    pub(crate) fn segment_uses(&self) -> Vec<SegmentUse> {
        let mut out = Vec::new();
        for (head, b) in self.heap.blocks() {
            if b.prev != NIL {
                continue;
            }
            let mut u = SegmentUse { addr: b.addr, size: 0, free: 0, active: 0, largest_free: 0, pool: b.pool };
            let mut id = head;
            while id != NIL {
                let c = &self.heap[id];
                match c.state {
                    BlockState::Free => {
                        u.free += c.size;
                        u.largest_free = u.largest_free.max(c.size);
                    }
                    BlockState::Allocated | BlockState::PendingFree => u.active += c.size,
                    BlockState::Unmapped => {}
                }
                if c.state != BlockState::Unmapped {
                    u.size += c.size;
                }
                id = c.next;
            }
            out.push(u);
        }
        out
    }

    /// The largest cached free block, as (size, address, id, pool): the free indices' blocks
    /// and those a planned layout holds parked; the first found of equal sizes.
    pub(crate) fn largest_free_block(&self) -> Option<(u64, u64, u32, Pool)> {
        let mut largest: Option<(u64, u64, u32, Pool)> = None;
        for pool in [Pool::Small, Pool::Large] {
            for ((_, size, addr), id) in self.heap.free_index(pool).iter() {
                if largest.is_none_or(|l| size > l.0) {
                    largest = Some((size, addr, id, pool));
                }
            }
        }
        for id in self.parked_blocks() {
            let b = &self.heap[id];
            if largest.is_none_or(|l| b.size > l.0) {
                largest = Some((b.size, b.addr, id, b.pool));
            }
        }
        largest
    }

    /// The report for a request that failed: PyTorch's figures and where the cache sits.
    pub(crate) fn oom_report(
        &self,
        requested: u64,
        rounded: u64,
        segment_size: u64,
        stream: Stream,
        device_free: u64,
    ) -> OomReport {
        let mut uses = self.segment_uses();
        let largest_free = self.largest_free_block().map(|(size, addr, id, pool)| {
            let mut head = id;
            while self.heap[head].prev != NIL {
                head = self.heap[head].prev;
            }
            let segment_addr = self.heap[head].addr;
            let segment_size = uses.iter().find(|u| u.addr == segment_addr).map_or(size, |u| u.size);
            FreeSpot { addr, size, segment_addr, segment_size, pool }
        });
        let mut cached_by_pool = [0u64; 2];
        let (mut pinned_bytes, mut pinned_segments) = (0, 0);
        for u in &uses {
            cached_by_pool[u.pool.index()] += u.free;
            if u.free > 0 && u.active > 0 {
                pinned_bytes += u.free;
                pinned_segments += 1;
            }
        }
        uses.retain(|u| u.free > 0);
        uses.sort_by(|a, b| b.free.cmp(&a.free).then(a.addr.cmp(&b.addr)));
        uses.truncate(5);
        OomReport {
            requested,
            rounded,
            segment_size,
            stream,
            capacity: self.device.total_memory(),
            device_free,
            allowed: self.allowed,
            allocated: self.heap.stats().allocated_bytes.current() as u64,
            reserved: self.reserved,
            held_elsewhere: self.device.reserved_elsewhere(),
            largest_free,
            cached_by_pool,
            pinned_bytes,
            pinned_segments,
            segments: uses,
            virtual_memory: self.uses_virtual_memory(),
        }
    }
}
