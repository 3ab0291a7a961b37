//! A slot's tail mapped a chunk at a time (cachalot's policy, on a device with room).
//!
//! A tensor regrown a token longer in a slotted region (`region.rs`) lacks a page at its
//! slot's end every few steps (a K or V of 256 KiB a token, every eight). Mapped as the span
//! needs it, that is a single page, and it stays a single-page chunk for good: at each
//! generation's start the prompt's temporaries take those pages from the slots' tails, and the
//! keys and values take them back as they grow, three driver calls a page (an unmap, a map and
//! an access grant), every generation. So a span at a slot's tail that lacks less than a chunk
//! ([`MAX_CHUNK_PAGES`] pages), with 16 GiB or more to be had, is given the pages from its
//! start to the slot's 8-page boundary at or after its end, in one chunk where it can be: a
//! new chunk of those pages if the pages ever in use allow all of them; else the largest idle
//! chunk that covers the span within them; else, where a span would make new chunks beyond
//! the peak anyway, a new chunk of those pages. A growing tensor then maps about once every
//! eight pages, and the chunks passing between the tails and the temporaries move up to eight
//! pages a call.
//!
//! Figures (`cachalot replay --passes 8`, nine runs on an unbounded device; docs/design.md,
//! "Slots"): the serving loop's trace, K and V regrown as a pair, 5,108 → 3,596 calls a warm
//! run (the mean of the 3rd to 9th), the peak over the runs 1.0251 → 1.0190 times the peak
//! requested bytes, the first run's 1.0141 → 1.0190; its DynamicCache-style trace 4,787 →
//! 3,542, 1.0207 → 1.0177 (first run 1.0107 → 1.0157); b64_p256_n256_l16_h2048 1,933 → 1,506,
//! 1.0169 → 1.0238 (first run 1.0006, the same). A server's memory is the peak over its runs;
//! b64's is the one that grows. Also tried: widening spans of more than a chunk too, in chunks
//! of eight (fewer calls, 3,232 and 3,081, but first runs of 1.0206 and 1.0180); taking idle
//! chunks only outside regions (no fewer calls than before).
//!
//! With less than 16 GiB to be had nothing is given ahead: chunks shrink there
//! (`chunk_pages_now`), and a page held past a tensor's end is one another request lacks when
//! whether a run fits is decided; such a device makes the same driver calls as before, and
//! where its size or the memory fraction leaves less than that, asks what is free no more
//! often.
//!
//! Invariants: what a span is given under this rule ends at or before the slot's 8-page
//! boundary at or after the span's end, and within the span's unmapped block and its slot; a
//! chunk made for it holds at most [`MAX_CHUNK_PAGES`] pages.

use alloc::vec::Vec;

use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::engine::allocator::Allocator;
use crate::engine::paged::idle_chunks::IdleChunk;
use crate::engine::paged::paging::{Creation, Span, FULL_CHUNK_HEADROOM, MAX_CHUNK_PAGES};
use crate::engine::vrange::Chunk;

impl<D: Device> Allocator<D> {
    /// The pages a span of the request `creation` places is given when it lies in a slot of
    /// its stream's region and the device has room: from its start to the slot's 8-page
    /// boundary at or after its end (or the slot's or the unmapped block's end), when that is
    /// more than the span needs and no more than a chunk holds; `None` otherwise.
    pub(super) fn slot_tail_pages(&self, span: &Span, creation: &mut Creation) -> Option<u64> {
        let page = self.paged.paged_page;
        let region = self.paged.regrowth.region(creation.stream).filter(|r| r.slot > 0 && r.holds(span.from))?;
        let slot_start = region.slot_start(span.from);
        let into_slot = (span.from - slot_start) / page;
        let to_slot_end = (slot_start + region.slot - span.from) / page;
        let boundary = (into_slot + span.need).next_multiple_of(MAX_CHUNK_PAGES);
        let pages = (boundary - into_slot).min(to_slot_end).min(span.room);
        if pages <= span.need || pages > MAX_CHUNK_PAGES {
            return None;
        }
        // On a GPU, asking what is free may be a driver call: not where the device's size or
        // the memory fraction already says there is too little, and once a request.
        let enough = FULL_CHUNK_HEADROOM * page;
        let roomy = *creation.roomy.get_or_insert_with(|| {
            let most = self.allowed_here().unwrap_or_else(|| self.device.total_memory());
            most.saturating_sub(self.reserved) >= enough && self.headroom() >= enough
        });
        roomy.then_some(pages)
    }

    /// A new chunk of the `tail` pages a span at a slot's tail is given, into an empty `got`:
    /// `within_peak`, only if the pages ever in use allow all of them.
    pub(super) fn create_tail_chunk(
        &mut self,
        tail: Option<u64>,
        creation: &mut Creation,
        got: &mut Vec<Chunk>,
        within_peak: bool,
    ) -> Result<(), AllocError> {
        let Some(pages) = tail.filter(|&p| got.is_empty() && (!within_peak || creation.within_peak >= p)) else {
            return Ok(());
        };
        if let Some(c) = self.create_chunk(pages, creation)? {
            if within_peak {
                creation.within_peak -= pages;
            }
            got.push(c);
        }
        Ok(())
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
