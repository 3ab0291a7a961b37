//! Idle chunks: chunks mapped wholly inside free blocks, under no allocation, which the paged
//! policy moves to where memory is wanted (`paging.rs` says in what order it turns to them).
//! Listing them, picking those a span takes, and moving them into a learned layout's range.
//!
//! Invariants: a chunk listed lies wholly inside one free block and outside the addresses the
//! caller keeps; a chunk moved leaves its old mapping as a ghost (`vrange.rs`) and is counted
//! in reserved memory all along.

use alloc::vec::Vec;

use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::base::size::Pool;
use crate::data::block::BlockState;
use crate::engine::allocator::Allocator;
use crate::engine::paged::paging::{Span, MAX_CHUNK_PAGES};
use crate::engine::vrange::{whole_pages, Chunk};
use crate::report::explain::Decision;

/// A chunk mapped wholly inside a free block: its pages, its offset in its range, its
/// address, the free block holding it when it was listed, and whether it lies in a range the
/// plan being followed places requests in.
#[derive(Clone, Copy, Debug)]
pub(super) struct IdleChunk {
    pub pages: u64,
    pub(super) offset: u64,
    pub addr: u64,
    pub block: u32,
    pub planned: bool,
}

impl IdleChunk {
    /// The order idle chunks are taken in: largest first, then the one furthest into its
    /// range, then the lowest address.
    pub(super) fn order(&self) -> (core::cmp::Reverse<u64>, core::cmp::Reverse<u64>, u64) {
        (core::cmp::Reverse(self.pages), core::cmp::Reverse(self.offset), self.addr)
    }
}

impl<D: Device> Allocator<D> {
    /// Idle chunks wholly outside `[keep_lo, keep_hi)` that a span short of `need` pages might take
    /// (`u64::MAX`: every one). The picks in `fill_span` take at most `need / p` chunks of
    /// `p` pages, best first, and then at most one larger chunk, the lowest in its range (a
    /// slot's tail, `slot_tail.rs`, first takes one chunk, the best of the largest). So
    /// from each free block only its `need / p + 1` highest chunks of each size `p` and its
    /// lowest one can be picked; the rest are left out. A free block may hold a hundred
    /// chunks and a span takes a few: listing every one made up most of what growth cost.
    pub(super) fn idle_chunks_outside(&self, keep_lo: u64, keep_hi: u64, need: u64) -> Vec<IdleChunk> {
        // Chunk sizes seen, by pages; a larger chunk (none is made) would simply be listed.
        const SIZES: usize = MAX_CHUNK_PAGES as usize + 1;
        let page = self.paged.paged_page;
        let mut out = Vec::new();
        // The parked blocks of a followed plan's ranges are cached too, outside the index.
        let parked = self.parked_blocks().into_iter().map(|id| (self.heap[id].size, self.heap[id].addr, id));
        let indexed = [Pool::Small, Pool::Large]
            .into_iter()
            .flat_map(|p| self.heap.free_index(p).iter())
            .map(|((_, size, addr), id)| (size, addr, id));
        for (size, addr, id) in indexed.chain(parked) {
            if !self.heap[id].in_vm
                || whole_pages(addr, size, page).is_empty()
                || (keep_lo <= addr && addr + size <= keep_hi)
            {
                continue;
            }
            let Some(r) = self.vm.range_of(addr) else { continue };
            let (range, end) = (&self.vm.ranges[r], addr + size);
            let planned = self.is_followed_range(range.base);
            let mut listed = [0u64; SIZES];
            let mut lowest_left_out: [Option<IdleChunk>; SIZES] = [None; SIZES];
            for (&a, &(len, _)) in range.mappings.range(addr..end).rev() {
                if a + len > end || (a < keep_hi && a + len > keep_lo) {
                    continue;
                }
                let c = IdleChunk { pages: len / page, offset: a - range.base, addr: a, block: id, planned };
                match usize::try_from(c.pages).ok().filter(|&p| p < SIZES) {
                    Some(p) if listed[p] > need / c.pages => lowest_left_out[p] = Some(c),
                    Some(p) => {
                        listed[p] += 1;
                        out.push(c);
                    }
                    None => out.push(c),
                }
            }
            out.extend(lowest_left_out.into_iter().flatten());
        }
        out
    }

    /// Moves a region's idle `chunks` into `got` for `span` (through `idle`, which holds
    /// what is left) for a request of `stream` placed in `run`, those of other holes or slots
    /// first: the run the request fills lends
    /// its own only for what theirs cannot cover. Taken from there, they shift the hole's
    /// unmapped part along to the next K or V placed at its front, which moves as many pages
    /// again, tensor after tensor (docs/design.md, "A hole lends its own pages last"). Other
    /// holes include other streams' regions, whose chunks may have to wait for their stream
    /// where the run's own would not; every decoding workload measured has one regrowing
    /// stream. Returns the pages moved.
    pub(super) fn take_region_idle(
        &mut self,
        span: &Span,
        chunks: Vec<IdleChunk>,
        idle: &mut Vec<IdleChunk>,
        got: &mut Vec<Chunk>,
        (run_lo, run_hi): (u64, u64),
        stream: Stream,
    ) -> Result<u64, AllocError> {
        let (own, others): (Vec<_>, Vec<_>) = chunks.into_iter().partition(|c| run_lo <= c.addr && c.addr < run_hi);
        idle.extend(others);
        let mut moved = self.take_idle(span, idle, got, stream)?;
        if got.iter().map(|c| c.pages).sum::<u64>() < span.need && !own.is_empty() {
            idle.extend(own);
            moved += self.take_idle(span, idle, got, stream)?;
        }
        Ok(moved)
    }

    /// Moves idle chunks from `idle` into `got` for `span`, for a request on `stream`: those
    /// that fit what is missing, largest first (the one furthest into its range first among
    /// equals, then the lowest address); then the smallest that the span's room can take.
    /// Chunks in a followed plan's ranges only once no other will do: the plan wants them
    /// where they are again next period. Picked one at a time rather than sorted: a span takes
    /// a few of the hundreds there may be. Returns the pages moved.
    pub(super) fn take_idle(
        &mut self,
        span: &Span,
        idle: &mut Vec<IdleChunk>,
        got: &mut Vec<Chunk>,
        stream: Stream,
    ) -> Result<u64, AllocError> {
        let have = |got: &Vec<Chunk>| got.iter().map(|c| c.pages).sum::<u64>();
        let mut moved = 0u64;
        for planned in [false, true] {
            while have(got) < span.need {
                let missing = span.need - have(got);
                let fitting = idle.iter().enumerate().filter(|(_, c)| c.planned == planned && c.pages <= missing);
                let Some((i, _)) = fitting.min_by_key(|(_, c)| c.order()) else { break };
                let c = idle.swap_remove(i);
                got.push(self.move_chunk_out(c.addr, c.block, stream)?);
                moved += c.pages;
            }
            let missing = span.need.saturating_sub(have(got));
            let room = span.room - have(got);
            let larger =
                idle.iter().enumerate().filter(|(_, c)| c.planned == planned && c.pages > missing && c.pages <= room);
            if let Some((i, _)) = larger.max_by_key(|(_, c)| c.order()).filter(|_| missing > 0) {
                let c = idle.swap_remove(i);
                got.push(self.move_chunk_out(c.addr, c.block, stream)?);
                moved += c.pages;
            }
        }
        Ok(moved)
    }

    /// Moves kept chunks and idle chunks outside a followed plan's ranges, largest first, to
    /// `from` on in the unmapped block `id`, up to `pages` pages: a plan about to be followed
    /// takes the memory already held before any is created for it, while any chunk fits
    /// (later, a span's room may take only small ones). Returns the pages mapped.
    pub(crate) fn move_idle_into(&mut self, id: u32, from: u64, pages: u64) -> Result<u64, AllocError> {
        let b = &self.heap[id];
        debug_assert!(b.state == BlockState::Unmapped && from >= b.addr);
        let room = pages.min((b.end() - from) / self.paged.paged_page);
        let (lo, hi, stream) = (b.addr, b.end(), self.heap.stream_of_lane(b.stream_index));
        self.paged.page_pool.sort_by_key(|c| core::cmp::Reverse(c.pages));
        let mut got: Vec<Chunk> = Vec::new();
        let mut have = 0;
        while let Some(i) = self.paged.page_pool.iter().position(|c| have + c.pages <= room) {
            let c = self.paged.page_pool.remove(i);
            have += c.pages;
            got.push(c);
        }
        let mut idle = self.idle_chunks_outside(lo, hi, u64::MAX);
        idle.retain(|c| !c.planned);
        idle.sort_unstable_by_key(IdleChunk::order);
        let mut moved = 0;
        for c in idle {
            if have + c.pages > room {
                continue;
            }
            got.push(self.move_chunk_out(c.addr, c.block, stream)?);
            have += c.pages;
            moved += c.pages;
        }
        self.paged.moved_pages += moved;
        if got.is_empty() {
            return Ok(0);
        }
        if let Err(failure) = self.map_chunks(id, from, &got) {
            let _ = self.return_all(core::iter::once(got.into_iter().skip(failure.mapped).collect()));
            return Err(failure.error);
        }
        let page = self.paged.paged_page;
        let moved_bytes = moved * page;
        self.explainer.note(|| Decision::MovedPages { pages: moved, bytes: moved_bytes });
        Ok(have)
    }
}
