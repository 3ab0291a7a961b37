//! Virtual-memory primitives on blocks: reserve and release ranges, map chunks of physical
//! memory into unmapped blocks and unmap whole chunks out of free blocks, splitting and
//! merging blocks so that the chain keeps tiling the range.
//!
//! Under the paged policy, unmapping a chunk leaves its mapping in place as a ghost
//! (`vrange.rs`); the driver unmaps it only when the address is mapped to other memory, the
//! chunk is destroyed or its range released. `num_device_free` counts the unmaps made. A
//! chunk moved to its own stream's request before the work queued before its free is known
//! done does not wait for that work: its ghost does (`ghost_waits`), and so does the block it
//! is mapped into, whose stamp is raised to the free's.
//!
//! Invariants kept here: unmapped blocks cover whole pages and sit in the unmapped index;
//! mapping or unmapping updates the range's mappings, `mapped_pages`, reserved bytes and the
//! statistics together; a failed device call leaves blocks and counts as they were; a ghost
//! whose work may still run is unmapped only after that work (`settle_ghost`), and its pages
//! lie in its stream's range in a block in use or stamped at least as late as its wait.

use alloc::vec::Vec;

use crate::base::device::{Device, DeviceError, HeldChange, PhysHandle, Stream};
use crate::base::error::AllocError;
use crate::base::size::Pool;
use crate::data::block::{Block, BlockState, NIL};
use crate::engine::allocator::Allocator;
use crate::engine::vrange::{Chunk, VirtualRange};
use crate::report::history::Action;

/// How a chunk leaves its mapping.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unmapping {
    /// Left mapped as a ghost (the paged policy's moves): no driver call, no device free. The
    /// chunk goes to a range of this stream: when it is the chunk's own, work queued there
    /// later runs after the work queued before the free, so the move waits for nothing and the
    /// ghost's unmap waits instead (`ghost_waits`). A moved chunk is mapped for the request or
    /// put back on its ghost (`return_chunks`), never kept for another stream's request.
    LeaveGhost(Stream),
    /// Unmapped, counted as a device free and recorded in the history.
    Counted,
    /// Unmapped as one page of a larger unmap the caller counts and records once.
    PartOfBlock,
}

/// A `map_chunks` that failed: the error, and how many of the chunks (from the first) it
/// mapped and kept all the same.
pub(crate) struct MapFailure {
    pub error: AllocError,
    pub mapped: usize,
}

/// How many times the device's memory a large pool's range spans under `regrow_region`: 3 for
/// what the moves of a stream's first steps leave mapped before its region is given, and 8
/// for a slotted region's slots (`region.rs`), each under 8 times the tensor that set it, so
/// that the region holds a slot for as many such tensors as the device can. At 3 in all, the
/// DynamicCache-style loop's slots ran out on a device near full, where a request past the
/// last slot fills holes as in a packed region: twelve generations on devices of 6.45 to 7.0 GB
/// made 4,947,420 driver calls slotted and 2,318,319 packed, against 803,119 at 11 (b46203c;
/// docs/design.md, "Slots").
const REGION_RANGES: u64 = 11;

impl<D: Device> Allocator<D> {
    /// Reserves a range for `stream` and `pool` with pages of `page` bytes, of
    /// [`Allocator::range_size`] bytes, or a plain one (the device's whole memory and an eighth
    /// more) where the address space cannot hold that. Returns its single unmapped block, or
    /// `None` if the device has no address space left.
    pub(crate) fn reserve_range(&mut self, stream: Stream, pool: Pool, page: u64) -> Result<Option<u32>, AllocError> {
        self.reserve_range_of(stream, pool, page, self.range_size(page, pool))
    }

    /// A plain range (see [`Allocator::reserve_range`]): for a followed plan's groups, where no
    /// region is given, so a range under `regrow_region` would hold address space for nothing.
    pub(crate) fn reserve_plain_range(
        &mut self,
        stream: Stream,
        pool: Pool,
        page: u64,
    ) -> Result<Option<u32>, AllocError> {
        self.reserve_range_of(stream, pool, page, self.plain_range_size(page))
    }

    /// A range of `size` bytes, or a plain one when the driver has no address space for that
    /// (the only retry: a plain range refused is `None`).
    fn reserve_range_of(
        &mut self,
        stream: Stream,
        pool: Pool,
        page: u64,
        mut size: u64,
    ) -> Result<Option<u32>, AllocError> {
        let base = loop {
            match self.device.vm_reserve(size) {
                Ok(b) => break b,
                // Address space is the process's, shared by every range of every device: a
                // region's room is given up before a range.
                Err(DeviceError::OutOfMemory) if size > self.plain_range_size(page) => {
                    size = self.plain_range_size(page);
                }
                Err(DeviceError::OutOfMemory) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        };
        let stream_index = self.heap.lane_of(stream);
        let id = self.heap.insert_block(Block::new(base, size, stream_index, BlockState::Unmapped, pool, true));
        self.vm.unmapped[pool.index()].insert((stream, base), id);
        let mappings = alloc::collections::BTreeMap::new();
        self.vm.ranges.push(VirtualRange { base, size, page, stream, pool, mappings, head: id });
        self.count_held(HeldChange { pool, segments: self.range_segments(), bytes: 0, oversize_segments: 0 });
        Ok(Some(id))
    }

    /// What one address range adds to the `segment` statistic: nothing under PyTorch's
    /// expandable segments, whose allocator counts only classic segments there (measured on
    /// an H200 with PyTorch 2.11: `segment.all` stays 0); one under cachalot's policy, whose
    /// ranges are its segments.
    pub(crate) fn range_segments(&self) -> i64 {
        i64::from(self.vm.mode != crate::engine::vrange::VmMode::Expandable)
    }

    /// Bytes of a range with pages of `page` bytes: the device's whole memory and an eighth
    /// more, as PyTorch reserves; a large pool's under `regrow_region` [`REGION_RANGES`] times
    /// the device's memory, so that a stream regrowing tensors finds room for its region, and
    /// its slots, above what the moves of its first steps left mapped (`regrowth.rs`). Address
    /// space costs no memory, but a process has 128 TiB of it for every range of every device
    /// (1.4 TiB a range on a 141 GB card): when none is left for that, the range is reserved
    /// plain (`reserve_range`).
    pub(crate) fn range_size(&self, page: u64, pool: Pool) -> u64 {
        let total = self.device.total_memory();
        match self.vm.mode {
            crate::engine::vrange::VmMode::Paged if self.config.regrow_region && pool == Pool::Large => {
                whole_pages_capped(total.saturating_mul(REGION_RANGES), page)
            }
            _ => self.plain_range_size(page),
        }
    }

    /// Bytes of a range with pages of `page` bytes spanning the device's whole memory and an
    /// eighth more, as PyTorch reserves.
    fn plain_range_size(&self, page: u64) -> u64 {
        let total = self.device.total_memory();
        whole_pages_capped(total.saturating_add(total / 8), page)
    }

    /// Returns a range whose only block is the unmapped block `id` to the device.
    pub(crate) fn release_range(&mut self, id: u32) -> Result<(), AllocError> {
        let b = &self.heap[id];
        debug_assert!(b.state == BlockState::Unmapped && !b.is_split());
        let (addr, size, stream, pool) = (b.addr, b.size, self.heap.stream_of_lane(b.stream_index), b.pool);
        self.unmap_ghosts_in(addr, addr + size)?;
        self.paged.regrowth.forget_range(addr, size);
        self.device.vm_release(addr, size)?;
        self.vm.unmapped[pool.index()].remove(&(stream, addr));
        self.heap.remove_block(id);
        if let Some(r) = self.vm.range_of(addr) {
            self.vm.ranges.swap_remove(r);
        }
        self.paged.plan_ranges.retain(|&b| b != addr);
        self.forget_planned_range(addr);
        self.count_held(HeldChange { pool, segments: -self.range_segments(), bytes: 0, oversize_segments: 0 });
        Ok(())
    }

    /// Splits block `id` at `at` (strictly inside it): `id` keeps the front, the returned
    /// new block takes the back, in the same state. Index membership is the caller's.
    pub(crate) fn split_at(&mut self, id: u32, at: u64) -> u32 {
        let b = &self.heap[id];
        debug_assert!(at > b.addr && at < b.end());
        debug_assert!(matches!(b.state, BlockState::Free | BlockState::Unmapped), "only cached space is cut");
        let mut back = b.clone();
        (back.addr, back.size, back.prev) = (at, b.end() - at, id);
        let back_id = self.heap.insert_block(back);
        let next = self.heap[back_id].next;
        if next != NIL {
            self.heap[next].prev = back_id;
        }
        let b = &mut self.heap[id];
        b.size = at - b.addr;
        b.next = back_id;
        self.note_in_plan(at, back_id);
        back_id
    }

    /// Cuts `[from, from + len)` out of block `id` (not indexed by the caller) and returns
    /// the id of that middle piece; the pieces before and after keep `id`'s state and are
    /// put back in their index.
    fn carve(&mut self, id: u32, from: u64, len: u64) -> u32 {
        let (start, end) = (self.heap[id].addr, self.heap[id].end());
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
        match self.heap[id].state {
            BlockState::Free => self.cache(id),
            BlockState::Unmapped => {
                let b = &self.heap[id];
                self.vm.unmapped[b.pool.index()].insert((self.heap.stream_of_lane(b.stream_index), b.addr), id);
            }
            _ => {}
        }
    }

    /// Maps `chunks` one after another from `from` inside the unmapped block `id`, grants
    /// access to them in one call per stretch newly mapped, then merges the mapped piece with
    /// free neighbours. Returns the free block holding it. A chunk whose ghost lies exactly
    /// where it goes is mapped already and costs no call; other ghosts in the way are unmapped
    /// first. When a map fails, the chunks mapped before it are kept mapped (access granted,
    /// counted, a free block), so no rollback is needed; the failure says how many of `chunks`
    /// that took, and the caller still owns the rest. When granting access fails, the
    /// mappings are undone and the caller owns every chunk.
    pub(crate) fn map_chunks(&mut self, id: u32, from: u64, chunks: &[Chunk]) -> Result<u32, MapFailure> {
        let b = &self.heap[id];
        debug_assert_eq!(b.state, BlockState::Unmapped);
        let (stream, pool) = (self.heap.stream_of_lane(b.stream_index), b.pool);
        let r = self.vm.range_of(from).expect("mapped address lies in a range");
        let page = self.vm.ranges[r].page;
        // The stretches this call maps, as (address, bytes, index of their first chunk): they
        // need access granted. Chunks landing on their own ghost are mapped already.
        let mut fresh: Vec<(u64, u64, usize)> = Vec::new();
        let mut landed: Vec<u64> = Vec::new();
        let (mut at, mut done, mut failed) = (from, 0, None);
        for c in chunks {
            let size = c.pages * page;
            if self.paged.ghosts.get(&at) == Some(&(size, c.handle)) {
                landed.push(at);
            } else {
                let mapped = self
                    .wait_if_other_stream(c, stream)
                    .and_then(|()| self.unmap_ghosts_in(at, at + size))
                    .and_then(|()| self.device.vm_map(at, size, c.handle));
                if let Err(e) = mapped {
                    failed = Some(e);
                    break;
                }
                match fresh.last_mut() {
                    Some((start, len, _)) if *start + *len == at => *len += size,
                    _ => fresh.push((at, size, done)),
                }
            }
            at += size;
            done += 1;
        }
        let failure = |error: DeviceError, mapped| MapFailure { error: error.into(), mapped };
        if done == 0 {
            return Err(failure(failed.expect("a map failed or there was nothing to map"), 0));
        }
        let (chunks, len, pages) = (&chunks[..done], at - from, (at - from) / page);
        debug_assert!(from + len <= self.heap[id].end());
        for &(start, bytes, _) in &fresh {
            if let Err(e) = self.device.vm_set_access(start, bytes) {
                // Only what this call mapped is undone: a chunk that landed on its ghost stays
                // there as the ghost, with its wait, for `return_chunks` to put it back.
                for &(start, bytes, first) in &fresh {
                    self.unmap_quietly(start, start + bytes, &chunks[first..], page);
                }
                return Err(failure(e, 0));
            }
        }
        // Back where they were: the blocks they join carry the free's stamp, and with it
        // whatever wait the ghost had.
        for a in landed {
            self.paged.ghosts.remove(&a);
            self.paged.ghost_waits.remove(&a);
        }
        let mut at = from;
        for c in chunks {
            let size = c.pages * page;
            self.vm.ranges[r].mappings.insert(at, (size, c.handle));
            at += size;
            match c.counted_in {
                Some(q) if q == pool => {}
                Some(q) => {
                    self.count_held(HeldChange { pool: q, segments: 0, bytes: -(size as i64), oversize_segments: 0 });
                    self.count_held(HeldChange { pool, segments: 0, bytes: size as i64, oversize_segments: 0 });
                }
                None => {
                    self.reserved += size;
                    self.count_held(HeldChange { pool, segments: 0, bytes: size as i64, oversize_segments: 0 });
                }
            }
        }
        self.vm.mapped_pages += pages;
        if !fresh.is_empty() {
            self.heap.stats_mut().num_device_alloc += 1;
            self.paged.maps += 1;
        }
        self.record(Action::SegmentMap, from, len, stream);
        self.vm.unmapped[pool.index()].remove(&(stream, self.heap[id].addr));
        let mid = self.carve(id, from, len);
        let [prev, next] = [self.heap[mid].prev, self.heap[mid].next];
        self.try_merge(mid, prev, BlockState::Free);
        self.try_merge(mid, next, BlockState::Free);
        self.heap[mid].state = BlockState::Free;
        // Pages whose old work may still run: the block's stamp says so, for whatever next
        // moves them to another stream or unmaps them (its own stamp may be older).
        if let Some(e) = chunks.iter().filter_map(|c| c.wait).filter(|&(s, _)| s == stream).map(|(_, e)| e).max() {
            let b = &mut self.heap[mid];
            b.set_stamp(b.stamp().max(e));
        }
        self.cache(mid);
        match failed {
            None => Ok(mid),
            Some(e) => Err(failure(e, done)),
        }
    }

    /// Undoes the mappings of `chunks` made in `[from, to)` after a later call failed. When
    /// the unmap of the whole stretch fails, each mapping is unmapped on its own (a transient
    /// failure must not leave pages mapped where the allocator counts none); a mapping that
    /// still cannot be unmapped stays, and only then do the device and the allocator disagree.
    fn unmap_quietly(&mut self, from: u64, to: u64, chunks: &[Chunk], page: u64) {
        if to <= from || self.device.vm_unmap(from, to - from).is_ok() {
            return;
        }
        let mut at = from;
        for c in chunks {
            let size = c.pages * page;
            if at + size > to {
                break;
            }
            let _ = self.device.vm_unmap(at, size);
            at += size;
        }
    }

    /// The block of a virtual range that holds `addr`.
    pub(crate) fn block_containing(&self, addr: u64) -> u32 {
        self.block_containing_near(NIL, addr)
    }

    /// [`Allocator::block_containing`], walking from block `hint` when it is a live block of
    /// the same range at or below `addr` (from the range's first block otherwise). A range
    /// may hold thousands of blocks; a caller that knew the block a moment ago passes it, and
    /// any block before `addr` in the range's chain is a correct place to start from.
    pub(crate) fn block_containing_near(&self, hint: u32, addr: u64) -> u32 {
        let r = self.vm.range_of(addr).expect("address lies in a range");
        let range = &self.vm.ranges[r];
        let mut id = match self.heap.block(hint) {
            Some(b) if b.in_vm && range.contains(b.addr) && b.addr <= addr => hint,
            _ => range.head,
        };
        while self.heap[id].end() <= addr {
            id = self.heap[id].next;
        }
        id
    }

    /// The chunks mapped wholly inside the free block `id`, as (address, bytes).
    pub(crate) fn idle_chunks(&self, id: u32) -> Vec<(u64, u64)> {
        let b = &self.heap[id];
        match self.vm.range_of(b.addr) {
            Some(r) => self.vm.ranges[r].mappings_within(b.addr, b.end()),
            None => Vec::new(),
        }
    }

    /// Unmaps the chunk mapped at `addr`, which must lie wholly inside a free block, once the
    /// work queued on the range's stream before the block was freed has finished (known from
    /// the block's free epoch under the paged policy, else by waiting for the stream); the
    /// unmapped piece merges with unmapped neighbours. Returns the chunk, still counted in its
    /// pool's reserved bytes: the caller destroys it or keeps it. A failed unmap changes
    /// nothing.
    /// `near` is a block at or before it, if known ([`Allocator::block_containing_near`]).
    pub(crate) fn unmap_chunk(&mut self, addr: u64, near: u32) -> Result<Chunk, AllocError> {
        self.unmap_chunk_as(addr, Unmapping::Counted, near)
    }

    /// [`Allocator::unmap_chunk`] for a chunk about to be mapped elsewhere (paged policy): the
    /// mapping stays as a ghost and the driver is not called, so the chunk coming back here
    /// later costs nothing.
    /// `to`: the stream whose range the chunk will be mapped in.
    pub(crate) fn move_chunk_out(&mut self, addr: u64, near: u32, to: Stream) -> Result<Chunk, AllocError> {
        self.unmap_chunk_as(addr, Unmapping::LeaveGhost(to), near)
    }

    fn unmap_chunk_as(&mut self, addr: u64, how: Unmapping, near: u32) -> Result<Chunk, AllocError> {
        let r = self.vm.range_of(addr).expect("unmapped address lies in a range");
        let (page, stream, pool) = (self.vm.ranges[r].page, self.vm.ranges[r].stream, self.vm.ranges[r].pool);
        let (size, handle) = self.vm.ranges[r].mappings[&addr];
        let id = self.block_containing_near(near, addr);
        debug_assert!(self.heap[id].state == BlockState::Free && addr + size <= self.heap[id].end());
        let paged = self.vm.mode == crate::engine::vrange::VmMode::Paged;
        let stamp = self.heap[id].stamp();
        let safe = paged && self.paged.epochs.is_safe(stream, stamp);
        // Stream order: a chunk staying on its stream needs no wait while its ghost is mapped.
        let in_order = paged && how == Unmapping::LeaveGhost(stream);
        if !safe && !in_order {
            self.device.synchronize_stream(stream)?;
            if paged {
                self.paged.epochs.synchronized(stream);
            }
        }
        match how {
            Unmapping::LeaveGhost(_) => {
                self.paged.ghosts.insert(addr, (size, handle));
                if !safe && in_order {
                    self.paged.ghost_waits.insert(addr, (stream, stamp));
                }
            }
            Unmapping::Counted | Unmapping::PartOfBlock => self.device.vm_unmap(addr, size)?,
        }
        self.vm.ranges[r].mappings.remove(&addr);
        self.vm.mapped_pages -= size / page;
        if how != Unmapping::PartOfBlock {
            self.heap.stats_mut().num_device_free += u64::from(how == Unmapping::Counted);
            self.record(Action::SegmentUnmap, addr, size, stream);
        }
        self.uncache(id);
        let mid = self.carve(id, addr, size);
        self.heap[mid].state = BlockState::Unmapped;
        let [prev, next] = [self.heap[mid].prev, self.heap[mid].next];
        self.try_merge(mid, prev, BlockState::Unmapped);
        self.try_merge(mid, next, BlockState::Unmapped);
        self.index_block(mid);
        let from = matches!(how, Unmapping::LeaveGhost(_)).then_some(addr);
        let wait = (!safe && in_order).then_some((stream, stamp));
        Ok(Chunk { handle, pages: size / page, counted_in: Some(pool), from, wait })
    }

    /// Keeps a chunk of `size` bytes that the device would not destroy, counted as reserved,
    /// for the next release to try again. Kept chunks count in pages of the paged policy's
    /// size; an expandable segment's pages (2 or 20 MiB) are whole multiples of it.
    pub(crate) fn keep_undestroyed(&mut self, c: Chunk, size: u64) {
        debug_assert_eq!(size % self.paged.paged_page, 0);
        self.keep_chunks(alloc::vec![Chunk { pages: size / self.paged.paged_page, ..c }]);
    }

    /// Destroys an unmapped chunk counted in a pool's reserved bytes (`page`: its range's
    /// page size), its ghosts first. When a ghost cannot be unmapped or the device refuses to
    /// destroy the chunk, it is kept instead (still counted) for the next release to try
    /// again, so none is lost.
    pub(crate) fn destroy_chunk(&mut self, c: Chunk, page: u64) -> Result<(), AllocError> {
        let size = c.pages * page;
        let refused = match self.unmap_ghosts_of(c.handle) {
            Ok(()) => self.device.vm_destroy(c.handle, size).err(),
            Err(e) => Some(e),
        };
        if let Some(e) = refused {
            self.keep_undestroyed(c, size);
            return Err(e.into());
        }
        if let Some(pool) = c.counted_in {
            self.reserved -= size;
            self.count_held(HeldChange { pool, segments: 0, bytes: -(size as i64), oversize_segments: 0 });
        }
        Ok(())
    }

    /// Unmaps and destroys every chunk lying wholly inside the free block `id`. Returns the
    /// bytes returned to the device; if that leaves the range wholly unmapped, releases it.
    /// Under expandable segments this is PyTorch's `unmap_block`: one device free and one
    /// unmap in the history for the block's whole pages, however many pages that is
    /// (measured on an H200 with PyTorch 2.11); under the paged policy each chunk counts.
    pub(crate) fn unmap_free_block(&mut self, id: u32) -> Result<u64, AllocError> {
        let chunks = self.idle_chunks(id);
        let Some(&(first, _)) = chunks.first() else { return Ok(0) };
        let r = self.vm.range_of(first).expect("chunk lies in a range");
        let (page, stream) = (self.vm.ranges[r].page, self.vm.ranges[r].stream);
        let how = if self.vm.mode == crate::engine::vrange::VmMode::Expandable {
            Unmapping::PartOfBlock
        } else {
            Unmapping::Counted
        };
        let mut bytes = 0;
        let mut unmapped = 0;
        let mut result = Ok(());
        for (addr, size) in chunks {
            match self.unmap_chunk_as(addr, how, id) {
                Ok(c) => {
                    unmapped += size;
                    result = self.destroy_chunk(c, page);
                }
                Err(e) => result = Err(e),
            }
            if result.is_err() {
                break;
            }
            bytes += size;
        }
        if how == Unmapping::PartOfBlock && unmapped > 0 {
            self.heap.stats_mut().num_device_free += 1;
            self.record(Action::SegmentUnmap, first, unmapped, stream);
        }
        result?;
        self.release_range_if_empty(r)?;
        Ok(bytes)
    }

    /// Unmaps the ghost at `addr`.
    fn unmap_ghost(&mut self, addr: u64) -> Result<(), DeviceError> {
        let (size, _) = self.paged.ghosts[&addr];
        self.settle_ghost(addr)?;
        self.device.vm_unmap(addr, size)?;
        self.paged.ghosts.remove(&addr);
        self.heap.stats_mut().num_device_free += 1;
        Ok(())
    }

    /// Waits, if it must, for the work that may still use the ghost at `addr` (a chunk moved
    /// within its stream before that work was known done): a ghost is unmapped only once its
    /// stream's work queued before the free has finished.
    fn settle_ghost(&mut self, addr: u64) -> Result<(), DeviceError> {
        let Some(&(stream, stamp)) = self.paged.ghost_waits.get(&addr) else { return Ok(()) };
        self.wait_for_work_before(stream, stamp)?;
        self.paged.ghost_waits.remove(&addr);
        Ok(())
    }

    /// Synchronizes `stream` unless the work queued on it before a free stamped `stamp` is
    /// known done.
    fn wait_for_work_before(&mut self, stream: Stream, stamp: u32) -> Result<(), DeviceError> {
        if !self.paged.epochs.is_safe(stream, stamp) {
            self.device.synchronize_stream(stream)?;
            self.paged.epochs.synchronized(stream);
        }
        Ok(())
    }

    /// Waits for the work that may still use chunk `c`'s pages ([`Chunk::wait`]) before they
    /// are mapped for another stream's work. A moved chunk is mapped in its own stream's
    /// range, so this guards only chunks that changed hands some other way.
    fn wait_if_other_stream(&mut self, c: &Chunk, stream: Stream) -> Result<(), DeviceError> {
        match c.wait {
            Some((on, stamp)) if on != stream => self.wait_for_work_before(on, stamp),
            _ => Ok(()),
        }
    }

    /// Unmaps every ghost that meets `[lo, hi)`.
    pub(crate) fn unmap_ghosts_in(&mut self, lo: u64, hi: u64) -> Result<(), DeviceError> {
        if self.paged.ghosts.is_empty() {
            return Ok(());
        }
        let before = self.paged.ghosts.range(..lo).next_back().filter(|(&a, &(len, _))| a + len > lo).map(|(&a, _)| a);
        let meeting: Vec<u64> = before.into_iter().chain(self.paged.ghosts.range(lo..hi).map(|(&a, _)| a)).collect();
        meeting.into_iter().try_for_each(|a| self.unmap_ghost(a))
    }

    /// Unmaps every ghost of `handle`.
    fn unmap_ghosts_of(&mut self, handle: PhysHandle) -> Result<(), DeviceError> {
        let of: Vec<u64> = self.paged.ghosts.iter().filter(|(_, &(_, h))| h == handle).map(|(&a, _)| a).collect();
        of.into_iter().try_for_each(|a| self.unmap_ghost(a))
    }

    /// Releases range `r` if a single unmapped block covers it.
    pub(crate) fn release_range_if_empty(&mut self, r: usize) -> Result<(), AllocError> {
        let head = self.vm.ranges[r].head;
        let b = &self.heap[head];
        if b.state == BlockState::Unmapped && !b.is_split() {
            self.release_range(head)?;
        }
        Ok(())
    }
}

/// `bytes` rounded up to whole pages of `page` bytes, at least one; a device near 2^64 bytes
/// exists only in simulation: capped rather than overflowing.
fn whole_pages_capped(bytes: u64, page: u64) -> u64 {
    bytes.checked_next_multiple_of(page).unwrap_or(bytes / page * page).max(page)
}
