//! Idle single pages remade as one chunk (cachalot's policy, under pressure).
//!
//! With less than 16 GiB to be had, new chunks shrink, down to single pages below 4 GiB
//! (`chunk_pages_now` says why: a chunk moves only when wholly idle). But a chunk keeps its
//! size for good, so a workload that keeps moving its pages then moves them one driver call a
//! page for as long as it runs. The serving loop's recorded trace (its decoder regrows K and V
//! as a pair) made 137,825 calls in its first pass on the device where PyTorch's default fits,
//! against 22,029 with the chunks an unbounded device makes, which fit there too; 53,911 with
//! its single pages remade.
//!
//! So once the allocator has moved more pages than it holds (moving is then what the workload
//! makes it do, as with `page_slack`'s rent-or-buy), a span about to take idle single pages has
//! some of them released to the device and made again as one chunk: as large as a span of its
//! need gets (`chunk_pages`: spans of 16 pages or more) and at most a
//! [`HEADROOM_PER_REMADE_CHUNK`]th of the memory still to be had, so nothing is remade with less
//! than 192 pages (384 MiB) to be had. That chunk moves in one call from then on. Releasing
//! first keeps the pages held the same.
//!
//! Invariants: the pages held do not grow (the chunk made holds the pages released), unless the
//! device refuses the chunk after the release (another process, or a device error): then the
//! pages released are simply no longer cached. Only single-page idle chunks outside a followed
//! plan's ranges, whose last use on their stream is known complete, are released, so the release
//! waits for no stream (a remade chunk given back later, as any idle chunk too large for a hole,
//! may). Nothing is remade with 16 GiB or more to be had, nor before the allocator has moved as
//! many pages as it holds.

use alloc::vec::Vec;

use crate::base::device::Device;
use crate::base::error::AllocError;
use crate::engine::allocator::Allocator;
use crate::engine::paged::idle_chunks::IdleChunk;
use crate::engine::paged::paging::{chunk_pages, Creation, Span, FULL_CHUNK_HEADROOM};
use crate::engine::vrange::Chunk;
use crate::report::explain::Decision;

/// A remade chunk holds at most this fraction of the memory still to be had. On the serving
/// trace, where PyTorch's default fits: a 96th, 53,911 calls in the first pass (137,825
/// without), its smallest device unchanged at 1.0031 times its peak requested bytes; a 64th or
/// a 48th, 49,877 or 54,866 calls, but 1.0041 or 1.0083 (chunks remade while there was room
/// hold pages once the device is full); a 128th, 59,480 calls and 1.0034; a 1,024th (the rule
/// for new chunks) remakes none.
const HEADROOM_PER_REMADE_CHUNK: u64 = 96;

impl<D: Device> Allocator<D> {
    /// Releases idle single pages from `idle` and makes each batch again as one chunk for
    /// `span`, into `got`, while the span lacks two pages or more and a chunk of its need holds
    /// two or more (see the module comment).
    pub(super) fn remake_single_pages(
        &mut self,
        span: &Span,
        idle: &mut Vec<IdleChunk>,
        got: &mut Vec<Chunk>,
        creation: &mut Creation,
    ) -> Result<(), AllocError> {
        let page = self.paged.paged_page;
        let held = self.paged.pages_held(self.vm.mapped_pages);
        if self.paged.moved_pages <= held {
            return Ok(());
        }
        let have = |got: &Vec<Chunk>| got.iter().map(|c| c.pages).sum::<u64>();
        while have(got) + 2 <= span.need {
            // On a GPU, asking what is free may be a driver call: once a chunk.
            let headroom = self.headroom() / page;
            if headroom >= FULL_CHUNK_HEADROOM {
                break;
            }
            let want = chunk_pages(span.need).min(span.need - have(got)).min(headroom / HEADROOM_PER_REMADE_CHUNK);
            let mut picked: Vec<IdleChunk> = Vec::new();
            while (picked.len() as u64) < want {
                let releasable = idle.iter().enumerate().filter(|(_, c)| self.releasable_single(c));
                let Some((i, _)) = releasable.min_by_key(|(_, c)| c.order()) else { break };
                picked.push(idle.swap_remove(i));
            }
            if picked.len() < 2 {
                idle.extend(picked);
                break;
            }
            for c in &picked {
                let chunk = self.unmap_chunk(c.addr, c.block)?;
                self.destroy_chunk(chunk, page)?;
            }
            let (pages, bytes) = (picked.len() as u64, picked.len() as u64 * page);
            let step = "idle single pages are released to be made again as one chunk";
            self.explainer.note(|| Decision::Released { segments: 0, bytes, step, virtual_memory: true });
            // The device was just given these pages: another process taking them first, or a
            // device error, refuses; the span then takes what else is idle, or fails as any
            // request does.
            match self.create_chunk(pages, creation)? {
                Some(c) => got.push(c),
                None => break,
            }
        }
        Ok(())
    }

    /// Whether `c` is a single page outside a followed plan's ranges, in a free block whose
    /// last use on its stream is known complete (releasing it waits for nothing).
    fn releasable_single(&self, c: &IdleChunk) -> bool {
        if c.pages != 1 || c.planned {
            return false;
        }
        let Some(r) = self.vm.range_of(c.addr) else { return false };
        let block = self.block_containing_near(c.block, c.addr);
        self.paged.epochs.is_safe(self.vm.ranges[r].stream, self.heap[block].stamp())
    }
}
