//! Virtual-memory primitives on blocks: reserve and release ranges, map physical pages into
//! unmapped blocks and unmap whole pages out of free blocks, splitting and merging blocks so
//! that the chain keeps tiling the range.
//!
//! Invariants kept here: unmapped blocks cover whole pages and sit in the unmapped index;
//! mapping or unmapping updates the range's page table, `mapped_pages`, reserved bytes and
//! the statistics together; a failed device call leaves blocks and counts as they were.

use alloc::vec::Vec;

use crate::allocator::Allocator;
use crate::block::{Block, BlockState, NIL};
use crate::device::{Device, DeviceError, PhysHandle, Stream};
use crate::error::AllocError;
use crate::history::Action;
use crate::size::Pool;
use crate::vrange::VirtualRange;

impl<D: Device> Allocator<D> {
    /// Reserves a range for `stream` and `pool` with pages of `page` bytes, large enough for
    /// the device's whole memory and an eighth more. Returns its single unmapped block, or
    /// `None` if the device has no address space left.
    pub(crate) fn reserve_range(&mut self, stream: Stream, pool: Pool, page: u64) -> Result<Option<u32>, AllocError> {
        let total = self.device.total_memory();
        let size = (total + total / 8).next_multiple_of(page).max(page);
        let base = match self.device.vm_reserve(size) {
            Ok(b) => b,
            Err(DeviceError::OutOfMemory) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let id = self.blocks.insert(Block {
            addr: base,
            size,
            requested: 0,
            stream,
            prev: NIL,
            next: NIL,
            gc_base: 0,
            event_count: 0,
            state: BlockState::Unmapped,
            pool,
            in_vm: true,
        });
        self.vm.unmapped[pool.index()].insert((stream, base), id);
        let pages = (size / page) as usize;
        self.vm.ranges.push(VirtualRange { base, size, page, stream, pool, pages: alloc::vec![None; pages], head: id });
        self.stats.segment.increase(pool, 1);
        Ok(Some(id))
    }

    /// Returns a range whose only block is the unmapped block `id` to the device.
    pub(crate) fn release_range(&mut self, id: u32) -> Result<(), AllocError> {
        let b = &self.blocks[id];
        debug_assert!(b.state == BlockState::Unmapped && !b.is_split());
        let (addr, size, stream, pool) = (b.addr, b.size, b.stream, b.pool);
        self.device.vm_release(addr, size)?;
        self.vm.unmapped[pool.index()].remove(&(stream, addr));
        self.blocks.remove(id);
        if let Some(r) = self.vm.range_of(addr) {
            self.vm.ranges.swap_remove(r);
        }
        self.stats.segment.decrease(pool, 1);
        Ok(())
    }

    /// Splits block `id` at `at` (strictly inside it): `id` keeps the front, the returned
    /// new block takes the back, in the same state. Index membership is the caller's.
    pub(crate) fn split_at(&mut self, id: u32, at: u64) -> u32 {
        let b = &self.blocks[id];
        debug_assert!(at > b.addr && at < b.end());
        let back = Block { addr: at, size: b.end() - at, prev: id, next: b.next, requested: 0, ..b.clone() };
        let back_id = self.blocks.insert(back);
        let next = self.blocks[back_id].next;
        if next != NIL {
            self.blocks[next].prev = back_id;
        }
        let b = &mut self.blocks[id];
        b.size = at - b.addr;
        b.next = back_id;
        back_id
    }

    /// Cuts `[from, from + len)` out of block `id` (not indexed by the caller) and returns
    /// the id of that middle piece; the pieces before and after keep `id`'s state and are
    /// put back in their index.
    fn carve(&mut self, id: u32, from: u64, len: u64) -> u32 {
        let (start, end) = (self.blocks[id].addr, self.blocks[id].end());
        let mut mid = id;
        if from > start {
            mid = self.split_at(id, from);
            self.index_block(id);
        }
        if from + len < end {
            let tail = self.split_at(mid, from + len);
            self.index_block(tail);
        }
        mid
    }

    /// Puts a `Free` or `Unmapped` block into its index.
    pub(crate) fn index_block(&mut self, id: u32) {
        match self.blocks[id].state {
            BlockState::Free => self.cache(id),
            BlockState::Unmapped => {
                let b = &self.blocks[id];
                self.vm.unmapped[b.pool.index()].insert((b.stream, b.addr), id);
            }
            _ => {}
        }
    }

    /// Maps `handles` (one page each, each with the pool whose reserved bytes it counts in,
    /// if any) at consecutive pages from `from` inside the unmapped block `id`, then merges
    /// the mapped piece with free neighbours. Returns the free block holding it. On a device
    /// error, nothing stays mapped and the handles are unchanged.
    pub(crate) fn map_pages(
        &mut self,
        id: u32,
        from: u64,
        handles: &[(PhysHandle, Option<Pool>)],
    ) -> Result<u32, AllocError> {
        let b = &self.blocks[id];
        debug_assert_eq!(b.state, BlockState::Unmapped);
        let (stream, pool) = (b.stream, b.pool);
        let r = self.vm.range_of(from).expect("mapped address lies in a range");
        let page = self.vm.ranges[r].page;
        let len = page * handles.len() as u64;
        for (i, &(h, _)) in handles.iter().enumerate() {
            if let Err(e) = self.device.vm_map(from + i as u64 * page, page, h) {
                if i > 0 {
                    let _ = self.device.vm_unmap(from, i as u64 * page);
                }
                return Err(e.into());
            }
        }
        if let Err(e) = self.device.vm_set_access(from, len) {
            let _ = self.device.vm_unmap(from, len);
            return Err(e.into());
        }
        let range = &mut self.vm.ranges[r];
        let first = range.page_of(from);
        for (i, &(h, _)) in handles.iter().enumerate() {
            range.pages[first + i] = Some(h);
        }
        for &(_, counted_in) in handles {
            match counted_in {
                Some(q) if q == pool => {}
                Some(q) => {
                    self.stats.reserved_bytes.decrease(q, page);
                    self.stats.reserved_bytes.increase(pool, page);
                }
                None => {
                    self.reserved += page;
                    self.stats.reserved_bytes.increase(pool, page);
                }
            }
        }
        self.vm.mapped_pages += handles.len() as u64;
        self.stats.num_device_alloc += 1;
        self.record(Action::SegmentMap, from, len, stream);
        self.vm.unmapped[pool.index()].remove(&(stream, self.blocks[id].addr));
        let mid = self.carve(id, from, len);
        let [prev, next] = [self.blocks[mid].prev, self.blocks[mid].next];
        self.try_merge(mid, prev, BlockState::Free);
        self.try_merge(mid, next, BlockState::Free);
        self.blocks[mid].state = BlockState::Free;
        self.cache(mid);
        Ok(mid)
    }

    /// Unmaps `pages` whole pages starting at `from` inside the free block `id` and returns
    /// their handles; the unmapped piece merges with unmapped neighbours. Reserved bytes are
    /// unchanged: the caller destroys the handles or keeps them.
    pub(crate) fn unmap_pages(&mut self, id: u32, from: u64, pages: u64) -> Result<Vec<PhysHandle>, AllocError> {
        let r = self.vm.range_of(from).expect("unmapped address lies in a range");
        let page = self.vm.ranges[r].page;
        let len = pages * page;
        debug_assert!(self.blocks[id].state == BlockState::Free && from >= self.blocks[id].addr);
        debug_assert!(from + len <= self.blocks[id].end() && (from - self.vm.ranges[r].base) % page == 0);
        self.device.synchronize_stream(self.vm.ranges[r].stream)?;
        self.device.vm_unmap(from, len)?;
        let range = &mut self.vm.ranges[r];
        let first = range.page_of(from);
        let handles: Vec<PhysHandle> =
            range.pages[first..first + pages as usize].iter_mut().map(|h| h.take().expect("page was mapped")).collect();
        self.vm.mapped_pages -= pages;
        self.stats.num_device_free += 1;
        let stream = self.blocks[id].stream;
        self.record(Action::SegmentUnmap, from, len, stream);
        self.uncache(id);
        let mid = self.carve(id, from, len);
        self.blocks[mid].state = BlockState::Unmapped;
        let [prev, next] = [self.blocks[mid].prev, self.blocks[mid].next];
        self.try_merge(mid, prev, BlockState::Unmapped);
        self.try_merge(mid, next, BlockState::Unmapped);
        self.index_block(mid);
        Ok(handles)
    }

    /// Destroys unmapped physical pages that counted in `pool`'s reserved bytes.
    pub(crate) fn destroy_pages(&mut self, handles: &[PhysHandle], pool: Pool, page: u64) -> Result<(), AllocError> {
        for &h in handles {
            self.device.vm_destroy(h, page)?;
            self.reserved -= page;
            self.stats.reserved_bytes.decrease(pool, page);
        }
        Ok(())
    }

    /// Unmaps every whole page inside the free block `id` and destroys it. Returns the bytes
    /// returned to the device; if that leaves the range wholly unmapped, releases the range.
    pub(crate) fn unmap_free_block(&mut self, id: u32) -> Result<u64, AllocError> {
        let b = &self.blocks[id];
        let Some(r) = self.vm.range_of(b.addr) else { return Ok(0) };
        let (page, pool, base) = (self.vm.ranges[r].page, b.pool, self.vm.ranges[r].base);
        let whole = crate::vrange::whole_pages(b.addr - base, b.size, page);
        if whole.is_empty() {
            return Ok(0);
        }
        let handles = self.unmap_pages(id, base + whole.start * page, whole.end - whole.start)?;
        self.destroy_pages(&handles, pool, page)?;
        self.release_range_if_empty(r)?;
        Ok(handles.len() as u64 * page)
    }

    /// Releases range `r` if a single unmapped block covers it.
    pub(crate) fn release_range_if_empty(&mut self, r: usize) -> Result<(), AllocError> {
        let head = self.vm.ranges[r].head;
        let b = &self.blocks[head];
        if b.state == BlockState::Unmapped && !b.is_split() {
            self.release_range(head)?;
        }
        Ok(())
    }
}
