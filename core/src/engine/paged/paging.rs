//! cachalot's paged policy: what happens when no cached (mapped) block fits a request.
//!
//! Every stream and pool has a virtual range (`vm.rs`, `range_size`), tiled by allocated, free
//! (mapped) and unmapped blocks. A request the free index cannot serve goes to the smallest
//! run of consecutive free and unmapped blocks that holds it (lowest address on ties), and
//! each unmapped span under it is filled with chunks of physical memory (about an eighth of
//! the span each, see `chunk_pages`), taken in order from chunks kept unmapped, from new
//! chunks while the pages held stay within the most pages ever in use (counting this
//! request) plus the page slack moving has earned (`page_slack`, 1% by default), from idle
//! chunks — chunks mapped wholly inside free blocks elsewhere, moved here, largest first,
//! their old mapping left in place as a ghost (`vrange.rs`), so that moving one back costs
//! no driver call; single pages among them remade as one chunk once moving is what the
//! workload does, `single_pages.rs` — and last from new chunks beyond that peak (after
//! returning an idle chunk too large for the span's room, when that is all that is idle). So peak
//! reserved memory stays near the peak of pages in use, and each span costs a handful of
//! driver calls, not one per page. A stream regrowing tensors by copy (`regrowth.rs`) has its
//! large misses placed in its region, and the regions' idle chunks are taken only after the
//! new chunks the device (or the memory fraction) still gives, those of other runs before
//! those of the run the request fills; on a device with room, a span at a slot's tail takes
//! its pages up to the slot's next 8-page boundary as one chunk (`slot_tail.rs`). A request
//! served from a cached block that touches live memory only at its back takes that back, so
//! the block's idle chunks stay free to move.
//!
//! Invariants: chunks are taken only from outside the chosen run (for a stream with a region,
//! from outside the pages the request covers, see `map_under`); a span gets chunks adding
//! up to at least what it needs and at most what its unmapped block can hold; reserved bytes
//! equal mapped pages plus kept chunks, and with the chunks created for the request being
//! placed never exceed the memory fraction; on failure, chunks created for the request go
//! back to the device, chunks moved for it go back onto their ghosts (idle where they were,
//! with no driver call) or, without one, stay kept (they were reserved before).

use alloc::vec::Vec;

use crate::base::device::{Device, DeviceError, HeldChange, Stream};
use crate::base::error::AllocError;
use crate::base::size::Pool;
use crate::data::block::{BlockState, NIL};
use crate::engine::allocator::Allocator;
use crate::engine::paged::regrowth::{RegionIdle, SlotFit};
use crate::engine::vrange::{whole_pages, Chunk};
use crate::report::explain::Decision;

/// Pages of the chunks a span needing `need` pages is made of: about an eighth of the span,
/// at most 8 (16 MiB). A chunk moves only when wholly idle, so small chunks keep memory
/// close to what is in use, while each mapping costs the same on a GPU whatever its size
/// (measured on the H200: ~25 µs to map and grant access, ~16 µs to unmap). Splitting a span
/// in eighths keeps the mappings per request bounded and lets a large block's memory move in
/// pieces once it is freed; the cap bounds what one small allocation left in a freed large
/// block can hold back, which otherwise makes a training loop's reserved memory creep up
/// pass after pass (docs/design.md gives the figures behind the choice).
pub(super) fn chunk_pages(need: u64) -> u64 {
    (need / 8).clamp(1, MAX_CHUNK_PAGES)
}

/// The most pages a chunk holds (16 MiB of 2 MiB pages).
pub(crate) const MAX_CHUNK_PAGES: u64 = 8;

/// A chunk created under pressure holds at most this fraction of the memory left (see
/// `chunk_pages_now`): chunks shrink once less than 16 GiB is free, and are single pages, as
/// expandable segments' always are, once less than 4 GiB is. A quarter of that (256) left
/// pages stranded in chunks made early: a decoding job with a 1,024-token prompt then needed
/// 8.71 GiB where expandable segments need 8.65 (`cachalot fit`, docs/benchmarks.md).
pub(super) const HEADROOM_PER_CHUNK: u64 = 1024;

/// Pages to be had from which a new chunk has its full size (16 GiB of 2 MiB pages): below it
/// single pages are remade as chunks (`single_pages.rs`) and slots' tails take no pages ahead
/// (`slot_tail.rs`).
pub(super) const FULL_CHUNK_HEADROOM: u64 = HEADROOM_PER_CHUNK * MAX_CHUNK_PAGES;

/// Pages that must move before one page of slack is earned (`page_slack`). A move costs a
/// GPU tens of microseconds (an unmap, a map and an access grant), a page held costs memory
/// for good: like renting before buying, slack is bought only once moving has cost many
/// times what it saves, so a workload that moves little (a training loop that has settled)
/// earns almost none and one that moves every step earns up to the cap. docs/design.md
/// gives the rates measured.
pub const MOVED_PAGES_PER_SLACK_PAGE: u64 = 64;

/// Where a request will be placed: a block at or before its address (the run's first), the
/// address, and the end of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub start: u32,
    pub addr: u64,
    pub run_end: u64,
}

/// Keeps in `best` the shorter of it and `run` when `run` holds `size` bytes (the lower
/// address on ties).
fn keep_smallest(best: &mut Option<(u64, Placement)>, run: Placement, size: u64) {
    let len = run.run_end - run.addr;
    if len >= size && best.as_ref().is_none_or(|(l, p)| (len, run.addr) < (*l, p.addr)) {
        *best = Some((len, run));
    }
}

/// What one request may still create: pages within the most ever in use, and the bytes of
/// chunks already created for it that reserved memory does not count yet.
pub(super) struct Creation {
    pub(super) within_peak: u64,
    uncounted: u64,
    /// Idle pages moved for the request so far (explained once every span is filled).
    moved: u64,
    /// The stream whose range the request is placed in.
    pub(super) stream: Stream,
    /// Whether 16 GiB or more are to be had (`slot_tail.rs`), once asked: on a GPU, asking
    /// what is free may be a driver call.
    pub(super) roomy: Option<bool>,
    /// The addresses of the run the request is placed in (for a request a followed plan places,
    /// the blocks under it: no region lies in a plan's ranges).
    run: (u64, u64),
}

/// An unmapped stretch under a request: where it starts, the pages the request needs there
/// and the pages its unmapped block could take.
pub(super) struct Span {
    pub(super) from: u64,
    pub need: u64,
    pub(super) room: u64,
}

impl<D: Device> Allocator<D> {
    /// The smallest run of free and unmapped blocks of `stream`'s `pool` ranges holding
    /// `size` bytes (lowest address on ties), outside a followed plan's ranges.
    ///
    /// Every run holds a free or an unmapped block, and outside a followed plan's ranges
    /// every free block is in the free index and every unmapped one in the unmapped index;
    /// so the runs are found from those two, each measured once from its first block,
    /// without a walk over the blocks in use, which a range holds thousands of in a deep
    /// model's first pass.
    fn best_run(&self, pool: Pool, stream: Stream, size: u64) -> Option<Placement> {
        let in_run = |id: u32| id != NIL && matches!(self.heap[id].state, BlockState::Free | BlockState::Unmapped);
        let free = self.heap.free_index(pool).iter_from(stream, 0).map(|(_, id)| id);
        let unmapped = self.vm.unmapped[pool.index()].range((stream, 0)..=(stream, u64::MAX)).map(|(_, &id)| id);
        let region = self.region_of(pool, stream);
        let slotted = region.filter(|r| r.slotted(size));
        // The smallest run anywhere, the smallest of the region's (the part of a run in it),
        // and for a request placed at a slot's start, the start with the most mapped under it
        // and, of those, the fewest mapped in its slot (`SlotFit`).
        let (mut best, mut in_region, mut in_slot) = (None, None, None);
        for start in free.chain(unmapped) {
            let b = &self.heap[start];
            if !b.in_vm || in_run(b.prev) || self.is_parked(b) {
                continue;
            }
            let (addr, mut end, mut id) = (b.addr, b.end(), b.next);
            while in_run(id) {
                end = self.heap[id].end();
                id = self.heap[id].next;
            }
            let run = Placement { start, addr, run_end: end };
            keep_smallest(&mut best, run, size);
            if let Some((fit, at)) = slotted.and_then(|r| self.slot_in_run(r, run, size)) {
                let better = |(f, p): &(SlotFit, Placement)| fit.better_than(f) || (fit == *f && at.addr < p.addr);
                if in_slot.as_ref().is_none_or(better) {
                    in_slot = Some((fit, at));
                }
            }
            if let Some(r) = region.filter(|r| r.holds(end - 1) && addr < r.end) {
                keep_smallest(&mut in_region, Placement { addr: addr.max(r.from), ..run }, size);
            }
        }
        let best = best.map(|(_, p)| p);
        debug_assert_eq!(best, self.best_run_by_walk(pool, stream, size), "runs found from the indexes");
        in_slot.map(|(_, p)| p).or(in_region.map(|(_, p)| p)).or(best)
    }

    /// [`Allocator::best_run`] by a walk over every block of the stream's ranges, which it
    /// must agree with (checked in debug builds).
    fn best_run_by_walk(&self, pool: Pool, stream: Stream, size: u64) -> Option<Placement> {
        let mut best: Option<(u64, Placement)> = None;
        let ranges = self.vm.ranges.iter();
        for r in ranges.filter(|r| r.pool == pool && r.stream == stream && !self.is_followed_range(r.base)) {
            let mut id = r.head;
            while id != NIL {
                let b = &self.heap[id];
                if !matches!(b.state, BlockState::Free | BlockState::Unmapped) {
                    id = b.next;
                    continue;
                }
                let (start, addr) = (id, b.addr);
                let mut end = b.end();
                id = b.next;
                while id != NIL && matches!(self.heap[id].state, BlockState::Free | BlockState::Unmapped) {
                    end = self.heap[id].end();
                    id = self.heap[id].next;
                }
                let len = end - addr;
                if len >= size && best.as_ref().is_none_or(|(l, p)| (len, addr) < (*l, p.addr)) {
                    best = Some((len, Placement { start, addr, run_end: end }));
                }
            }
        }
        best.map(|(_, p)| p)
    }

    /// Pages that may be created beyond `peak`, the most pages ever in use: what moving pages
    /// has earned, up to `page_slack` of that peak.
    fn page_slack(&self, peak: u64) -> u64 {
        (self.paged.moved_pages / MOVED_PAGES_PER_SLACK_PAGE).min(self.most_page_slack(peak))
    }

    /// The most pages `page_slack` allows beyond `peak`, however many have moved.
    pub(super) fn most_page_slack(&self, peak: u64) -> u64 {
        (peak as f64 * self.config.page_slack.max(0.0)) as u64
    }

    /// The unmapped spans under `[addr, addr + size)` and the idle pages it will put to use.
    fn spans_under(&self, start: u32, addr: u64, size: u64) -> (Vec<Span>, u64) {
        let page = self.paged.paged_page;
        let end = addr + size;
        let (mut spans, mut idle) = (Vec::new(), 0);
        let mut id = start;
        while id != NIL && self.heap[id].addr < end {
            let b = &self.heap[id];
            match b.state {
                // An unmapped block of the run wholly before the request (placed at its
                // stream's region) lends it nothing.
                BlockState::Unmapped if b.end() > addr => {
                    // A request placed inside an unmapped block (a planned layout's) needs
                    // pages from the one holding its address on.
                    let from = b.addr.max(addr / page * page);
                    let need = (b.end().min(end) - from).div_ceil(page);
                    spans.push(Span { from, need, room: (b.end() - from) / page });
                }
                BlockState::Free => {
                    let w = whole_pages(b.addr, b.size, page);
                    let used = (b.addr.max(addr) / page)..b.end().min(end).div_ceil(page);
                    idle += w.end.min(used.end).saturating_sub(w.start.max(used.start));
                }
                _ => {}
            }
            id = b.next;
        }
        (spans, idle)
    }

    /// Pages of a chunk created now for a span needing `need` pages: [`chunk_pages`], and
    /// under pressure at most a [`HEADROOM_PER_CHUNK`]th of the memory still to be had
    /// (what the device has free, or the memory fraction leaves), down to one page. A chunk
    /// is freed only when wholly idle, so near the device's end a large one shared with live
    /// memory holds pages nothing else can use, and those pages decide whether a job fits.
    fn chunk_pages_now(&self, need: u64) -> u64 {
        let pages = chunk_pages(need);
        if pages == 1 {
            return 1;
        }
        pages.min(self.headroom() / self.paged.paged_page / HEADROOM_PER_CHUNK).max(1)
    }

    /// A new chunk of `pages` pages, unless the memory fraction (counting the chunks already
    /// created for this request) or the device refuses.
    pub(super) fn create_chunk(&mut self, pages: u64, creation: &mut Creation) -> Result<Option<Chunk>, AllocError> {
        let size = pages * self.paged.paged_page;
        if self.allowed_here().is_some_and(|a| self.reserved + creation.uncounted + size > a) {
            return Ok(None);
        }
        match self.device.vm_create(size) {
            Ok(handle) => {
                creation.uncounted += size;
                Ok(Some(Chunk { handle, pages, counted_in: None, from: None, wait: None }))
            }
            Err(DeviceError::OutOfMemory) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Keeps unmapped chunks for later (they stay reserved). Chunks never counted yet count
    /// in the large pool.
    pub(crate) fn keep_chunks(&mut self, chunks: Vec<Chunk>) {
        let page = self.paged.paged_page;
        for mut c in chunks {
            if c.counted_in.is_none() {
                self.reserved += c.pages * page;
                let bytes = (c.pages * page) as i64;
                self.count_held(HeldChange { pool: Pool::Large, segments: 0, bytes, oversize_segments: 0 });
                c.counted_in = Some(Pool::Large);
            }
            self.paged.page_pool.push(c);
        }
    }

    /// After a request failed: chunks created for it go back to the device (a failed request
    /// must not hold memory); chunks moved for it go back onto their ghost (where they were
    /// mapped before the move; for a chunk that has several ghosts, the one it left, which
    /// holds the wait for the work that may still use it: on an older one its block would
    /// carry an older stamp), which costs no driver call and leaves them idle and in view;
    /// chunks without a ghost (taken from the kept ones) are kept. A chunk the device refuses
    /// to destroy is kept (and counted) instead, so none is lost.
    fn return_chunks(&mut self, chunks: Vec<Chunk>) -> Result<(), AllocError> {
        let page = self.paged.paged_page;
        let (created, moved): (Vec<Chunk>, Vec<Chunk>) = chunks.into_iter().partition(|c| c.counted_in.is_none());
        for c in moved {
            let size = c.pages * page;
            let ghost = c.from.filter(|a| self.paged.ghosts.get(a) == Some(&(size, c.handle))).or_else(|| {
                // Its ghost was unmapped since (waiting for the work first): any other will do.
                self.paged.ghosts.iter().find(|(_, &g)| g == (size, c.handle)).map(|(&a, _)| a)
            });
            let back = ghost.is_some_and(|at| {
                let id = self.block_containing_near(NIL, at);
                self.map_chunks(id, at, core::slice::from_ref(&c)).is_ok()
            });
            if !back {
                self.keep_chunks(alloc::vec![c]);
            }
        }
        let mut refused = None;
        for c in created {
            if let Err(e) = self.device.vm_destroy(c.handle, c.pages * page) {
                refused.get_or_insert(e);
                self.keep_chunks(alloc::vec![c]);
            }
        }
        refused.map_or(Ok(()), |e| Err(e.into()))
    }

    /// [`Allocator::return_chunks`] for each list, going on after a failure, so that no
    /// list is dropped (a moved chunk dropped would leave its ghost mapped and its memory
    /// counted by no one); the first failure.
    pub(super) fn return_all(&mut self, lists: impl IntoIterator<Item = Vec<Chunk>>) -> Result<(), AllocError> {
        let mut first = Ok(());
        for chunks in lists {
            let returned = self.return_chunks(chunks);
            if first.is_ok() {
                first = returned;
            }
        }
        first
    }

    /// Gathers chunks for one span into `got`, in the order the module comment gives; false
    /// when neither the device nor idle chunks can provide them. On false or an error, `got`
    /// holds what was obtained, for the caller to return.
    fn fill_span(
        &mut self,
        span: &Span,
        creation: &mut Creation,
        lo: u64,
        hi: u64,
        got: &mut Vec<Chunk>,
    ) -> Result<bool, AllocError> {
        let have = |got: &Vec<Chunk>| got.iter().map(|c| c.pages).sum::<u64>();
        let page = self.paged.paged_page;
        // Kept chunks that fit the span's room, largest first.
        self.paged.page_pool.sort_by_key(|c| c.pages);
        while have(got) < span.need {
            let room = span.room - have(got);
            match self.paged.page_pool.iter().rposition(|c| c.pages <= room) {
                Some(i) => got.push(self.paged.page_pool.remove(i)),
                None => break,
            }
        }
        // At a slot's tail, on a device with room: pages up to the slot's next 8-page boundary,
        // in one chunk (`slot_tail.rs`).
        let tail = if got.is_empty() { self.slot_tail_pages(span, creation) } else { None };
        self.create_tail_chunk(tail, creation, got, true)?;
        // New chunks, within the pages ever in use. Their size is decided once a span: on a
        // GPU, asking what is free may be a driver call.
        let mut chunk = None;
        while have(got) < span.need && creation.within_peak > 0 {
            let chunk = *chunk.get_or_insert_with(|| self.chunk_pages_now(span.need));
            let pages = (span.need - have(got)).min(chunk).min(creation.within_peak);
            match self.create_chunk(pages, creation)? {
                Some(c) => {
                    creation.within_peak -= pages;
                    got.push(c);
                }
                None => break,
            }
        }
        // Idle chunks from elsewhere (`take_idle`).
        if have(got) < span.need {
            let idle_all = self.idle_chunks_outside(lo, hi, span.need - have(got));
            // Regions of streams regrowing tensors keep their free slots' pages until the
            // pages in use reach their peak, and a packed region its holes' pages while the
            // device makes new ones (`regrowth.rs`, `region.rs`): their idle chunks come last.
            let (mut idle, mut slots, mut holes) = (Vec::new(), Vec::new(), Vec::new());
            for c in idle_all {
                match self.region_idle(c.addr, c.block) {
                    RegionIdle::Movable => idle.push(c),
                    RegionIdle::FreeSlot => slots.push(c),
                    RegionIdle::Hole => holes.push(c),
                }
            }
            self.remake_single_pages(span, &mut idle, got, creation)?;
            let mut moved = match tail {
                Some(pages) if have(got) < span.need => {
                    self.take_idle_for_tail(span, pages, &mut idle, got, creation.stream)?
                }
                _ => 0,
            };
            moved += self.take_idle(span, &mut idle, got, creation.stream)?;
            if have(got) < span.need && !slots.is_empty() {
                moved += self.take_region_idle(span, slots, &mut idle, got, creation.run, creation.stream)?;
            }
            if have(got) < span.need && !holes.is_empty() {
                self.create_for(span, creation, &mut chunk, got)?;
                moved += self.take_region_idle(span, holes, &mut idle, got, creation.run, creation.stream)?;
            }
            if have(got) < span.need {
                if let Some(&c) = idle.iter().min_by_key(|c| (c.pages, c.addr)) {
                    // Every idle chunk left is too large for the span's room. Creating the
                    // missing pages beside them would hold more than the peak (or, under a
                    // memory fraction, end in emptying the whole cache), so the smallest goes
                    // back to the device first: pages held do not grow.
                    let chunk = self.unmap_chunk(c.addr, c.block)?;
                    self.destroy_chunk(chunk, page)?;
                    let (bytes, step) = (c.pages * page, "an idle chunk too large for the hole goes back");
                    self.explainer.note(|| Decision::Released { segments: 0, bytes, step, virtual_memory: true });
                }
            }
            self.paged.moved_pages += moved;
            creation.moved += moved;
        }
        // Beyond the peak: new chunks for the rest.
        self.create_tail_chunk(tail, creation, got, false)?;
        self.create_for(span, creation, &mut chunk, got)?;
        Ok(have(got) >= span.need)
    }

    /// New chunks of `chunk` pages (decided at the first, on a GPU perhaps a driver call) into `got`
    /// until `span` has what it needs or the device or the memory fraction refuses one.
    fn create_for(
        &mut self,
        span: &Span,
        creation: &mut Creation,
        chunk: &mut Option<u64>,
        got: &mut Vec<Chunk>,
    ) -> Result<(), AllocError> {
        let mut have = got.iter().map(|c| c.pages).sum::<u64>();
        while have < span.need {
            let pages = *chunk.get_or_insert_with(|| self.chunk_pages_now(span.need));
            match self.create_chunk((span.need - have).min(pages), creation)? {
                Some(c) => {
                    have += c.pages;
                    got.push(c);
                }
                None => break,
            }
        }
        Ok(())
    }

    /// Places a request the free index could not serve (see the module comment); returns a
    /// free block of at least `size` bytes taken out of the free index, or `None` when no
    /// memory could be found.
    pub(crate) fn grow_paged(&mut self, pool: Pool, stream: Stream, size: u64) -> Result<Option<u32>, AllocError> {
        let page = self.paged.paged_page;
        self.note_miss(stream);
        self.paged.epochs.advance(&mut self.device)?;
        let place = match self.best_run(pool, stream, size) {
            Some(p) => p,
            None => match self.reserve_range(stream, pool, page)? {
                Some(id) => {
                    let b = &self.heap[id];
                    Placement { start: id, addr: b.addr, run_end: b.end() }
                }
                None => return Ok(None),
            },
        };
        let Some(near) = self.map_under(&place, size)? else { return Ok(None) };
        let start = self.block_containing_near(near, place.addr);
        self.uncache(start);
        if self.heap[start].addr == place.addr {
            return Ok(Some(start));
        }
        // Placed where the run enters its stream's region: the front stays cached.
        let placed = self.split_at(start, place.addr);
        self.cache(start);
        Ok(Some(placed))
    }

    /// Maps memory under every unmapped span of `[place.addr, place.addr + size)`, which
    /// holds only free and unmapped blocks, so that one free block covers it, and returns the
    /// block to look for that one from (the last block a mapping merged into, or
    /// `place.start` when nothing needed mapping; `block_containing_near` checks it): mapping
    /// merges blocks, and a walk from the range's first block is as long as the range holds
    /// blocks. `None` when no memory could be found (nothing obtained for it is kept, see
    /// `return_chunks`).
    pub(crate) fn map_under(&mut self, place: &Placement, size: u64) -> Result<Option<u32>, AllocError> {
        let page = self.paged.paged_page;
        let (spans, idle_used) = self.spans_under(place.start, place.addr, size);
        let need: u64 = spans.iter().map(|s| s.need).sum();
        let in_use_after = self.paged.pages_in_use(self.vm.mapped_pages) + need + idle_used;
        let held = self.paged.pages_held(self.vm.mapped_pages);
        let peak = self.paged.peak_in_use.max(in_use_after);
        let within_peak = (peak + self.page_slack(peak)).saturating_sub(held);
        let first = &self.heap[place.start];
        let stream = self.heap.stream_of_lane(first.stream_index);
        // What may not lend idle chunks to the request: its run; for a stream with a region,
        // only the pages the request covers. A request placed at the front of a hole (see
        // `at_front_of_run`) may then take the pages freed at the hole's back, beside it, when
        // no other hole has idle pages (`fill_span`), rather than failing once the device is
        // full and having every idle page released and made again for it. Other streams keep
        // their runs whole: on mixed_fc_conv, lending within a run reserved 1.0243 times the
        // requested bytes instead of 1.0171.
        let run = (first.addr.min(place.addr), place.run_end);
        let (keep_lo, keep_hi) = match self.region_of(first.pool, stream) {
            Some(_) => (place.addr / page * page, (place.addr + size).div_ceil(page) * page),
            None => run,
        };
        let mut creation = Creation { within_peak, uncounted: 0, moved: 0, stream, run, roomy: None };
        let mut plans: Vec<(u64, Vec<Chunk>)> = Vec::with_capacity(spans.len());
        for span in &spans {
            let mut got = Vec::new();
            let filled = self.fill_span(span, &mut creation, keep_lo, keep_hi, &mut got);
            plans.push((span.from, got));
            if !matches!(filled, Ok(true)) {
                // Nothing obtained for the request is dropped: moved chunks stay kept, new
                // ones go back to the device. The request's own failure is reported first.
                let returned = self.return_all(plans.into_iter().map(|(_, chunks)| chunks));
                return filled.and(returned).map(|_| None);
            }
        }
        if creation.moved > 0 {
            let (pages, bytes) = (creation.moved, creation.moved * page);
            self.explainer.note(|| Decision::MovedPages { pages, bytes });
        }
        // Mapping merges blocks, so each span's block is found by address, from the block
        // the last mapping merged into (it lies before the next span).
        let (mut plans, mut near) = (plans.into_iter(), place.start);
        while let Some((from, chunks)) = plans.next() {
            let id = self.block_containing_near(near, from);
            near = match self.map_chunks(id, from, &chunks) {
                Ok(merged) => merged,
                Err(failure) => {
                    // Chunks mapped before the failure stay mapped (cached, counted); the rest
                    // are returned, and the map's failure is what the caller hears.
                    let unmapped = chunks.into_iter().skip(failure.mapped).collect();
                    let _ = self.return_all(core::iter::once(unmapped).chain(plans.map(|(_, rest)| rest)));
                    return Err(failure.error);
                }
            };
            let mapped = chunks.iter().map(|c| c.pages).sum::<u64>() * page;
            let new_bytes = chunks.iter().filter(|c| c.counted_in.is_none()).map(|c| c.pages).sum::<u64>() * page;
            self.explainer.note(|| Decision::MappedPages { addr: from, size: mapped, new_bytes });
        }
        Ok(Some(near))
    }

    /// Where a request goes inside the cached block `id` it was given (taken out of the free
    /// index; at least `rounded` bytes): the block itself, whose front it will take, unless
    /// the block touches live memory only at its back. Then the request takes the back,
    /// against that live neighbour, whose last page it may share, rather than the front,
    /// which would hold a chunk that is now wholly idle and free to move. Returns the block
    /// to hand out; the front left over goes back to the free index.
    #[inline]
    pub(crate) fn place_against_live(&mut self, id: u32, rounded: u64) -> u32 {
        // PyTorch's policies never get past this test: their malloc reads no more than before.
        if self.vm.mode != crate::engine::vrange::VmMode::Paged {
            return id;
        }
        let b = &self.heap[id];
        if !b.in_vm || b.size - rounded < crate::base::size::MIN_BLOCK {
            return id;
        }
        let live = |n: u32| n != NIL && matches!(self.heap[n].state, BlockState::Allocated | BlockState::PendingFree);
        if live(b.prev) || !live(b.next) {
            return id;
        }
        let block_size = b.size;
        let back = self.split_at(id, b.end() - rounded);
        self.cache(id);
        let addr = self.heap[back].addr;
        self.explainer.note(|| Decision::TookBack { addr, block_size });
        back
    }

    /// Returns idle chunks and kept chunks to the device until reserved memory is at most
    /// `target` bytes (all of them with a target of 0). Returns the bytes released.
    pub(crate) fn release_idle_pages(&mut self, target: u64) -> Result<u64, AllocError> {
        let page = self.paged.paged_page;
        let before = self.reserved;
        while self.reserved > target {
            let Some(c) = self.paged.page_pool.pop() else { break };
            self.destroy_chunk(c, page)?;
        }
        if self.reserved > target {
            let mut idle = self.idle_chunks_outside(0, 0, u64::MAX);
            idle.sort_unstable_by_key(|c| (core::cmp::Reverse(c.pages), c.offset, c.addr));
            for c in idle {
                if self.reserved <= target {
                    break;
                }
                let chunk = self.unmap_chunk(c.addr, c.block)?;
                self.destroy_chunk(chunk, page)?;
            }
        }
        // Also when the kept chunks alone were enough: a range left wholly unmapped holds
        // no memory but still counts as a segment.
        for r in (0..self.vm.ranges.len()).rev() {
            self.release_range_if_empty(r)?;
        }
        Ok(before - self.reserved)
    }
}
