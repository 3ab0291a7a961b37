//! A slot's tail mapped a chunk at a time (cachalot's policy, on a device with room).
//!
//! A tensor regrown a token longer in a slotted region (`region.rs`) lacks a page at its
//! slot's end every few steps (a K or V of 256 KiB a token, every eight). Mapped as the span
//! needs it, that is a single page, and it stays a single-page chunk for good: at each
//! generation's start the prompt's temporaries take those pages from the slots' tails, and the
//! keys and values take them back as they grow, three driver calls a page (an unmap, a map and
//! an access grant), every generation. So a span at a slot's tail, with 16 GiB or more to be
//! had, is given pages up to the slot's next [`MAX_CHUNK_PAGES`]-page boundary in one chunk: the
//! largest idle chunk that covers the need without going past that boundary, else a new chunk
//! of the pages up to it (within the peak as any new chunk; beyond it, as a span's last
//! resort). A growing tensor then maps once every eight pages, and the chunks passing between
//! the tails and the temporaries move eight pages a call.
//!
//! Figures (`cachalot replay --passes 8`, an unbounded device; docs/design.md, "Slots"): the
//! serving loop's trace, K and V regrown as a pair, 5,108 → 3,538 calls a warm pass, the peak
//! over every pass 1.0251 → 1.0196 times the peak requested bytes, the first pass's 1.0141 →
//! 1.0161; its DynamicCache-style trace 4,787 → 3,376 calls, 1.0207 → 1.0190 (first pass
//! 1.0107 → 1.0147); b64_p256_n256_l16_h2048 1,933 → 1,506, 1.0169 → 1.0238.
//!
//! With less than 16 GiB to be had nothing is given ahead: chunks shrink there
//! (`chunk_pages_now`), and a page held past a tensor's end is one another request lacks when
//! whether a run fits is decided; a device that small replays as before.
//!
//! Invariants: the pages a span is given end at an eight-page boundary of its slot, at the
//! slot's end or at the end of its unmapped block, whichever comes first, so they lie in the
//! span's slot and its unmapped block; no more is given than one chunk holds.

use alloc::vec::Vec;

use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::engine::allocator::Allocator;
use crate::engine::paged::idle_chunks::IdleChunk;
use crate::engine::paged::paging::{Span, HEADROOM_PER_CHUNK, MAX_CHUNK_PAGES};
use crate::engine::vrange::Chunk;

impl<D: Device> Allocator<D> {
    /// The pages a span of `stream`'s large pool is given when it lies in a slot of the
    /// stream's region, on a device with room: from its start up to the slot's next
    /// [`MAX_CHUNK_PAGES`]-page boundary (or the slot's or the unmapped block's end), when that
    /// is more than the span needs; `None` otherwise.
    pub(super) fn slot_tail_pages(&self, span: &Span, stream: Stream) -> Option<u64> {
        let page = self.paged.paged_page;
        let region = self.paged.regrowth.region(stream).filter(|r| r.slot > 0 && r.holds(span.from))?;
        let slot_start = region.slot_start(span.from);
        let into_slot = (span.from - slot_start) / page;
        let to_slot_end = (slot_start + region.slot - span.from) / page;
        let boundary = (into_slot + span.need).next_multiple_of(MAX_CHUNK_PAGES);
        let pages = (boundary - into_slot).min(to_slot_end).min(span.room);
        // On a GPU, asking what is free may be a driver call: only for a span it would widen.
        (pages > span.need && self.headroom() / page >= HEADROOM_PER_CHUNK * MAX_CHUNK_PAGES).then_some(pages)
    }

    /// Moves into `got` the largest chunk of `idle` that covers what `span` still lacks within
    /// `tail` pages in all (the first in the usual order among equals); returns the pages
    /// moved.
    pub(super) fn take_idle_for_tail(
        &mut self,
        span: &Span,
        tail: u64,
        idle: &mut Vec<IdleChunk>,
        got: &mut Vec<Chunk>,
        stream: Stream,
    ) -> Result<u64, AllocError> {
        let have: u64 = got.iter().map(|c| c.pages).sum();
        let (missing, most) = (span.need.saturating_sub(have), tail.saturating_sub(have));
        let covering = idle.iter().enumerate().filter(|(_, c)| !c.planned && missing <= c.pages && c.pages <= most);
        let Some((i, _)) = covering.max_by_key(|(_, c)| (c.pages, core::cmp::Reverse(c.order()))) else {
            return Ok(0);
        };
        let c = idle.swap_remove(i);
        got.push(self.move_chunk_out(c.addr, c.block, stream)?);
        Ok(c.pages)
    }
}
