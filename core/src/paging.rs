//! cachalot's paged policy: what happens when no cached (mapped) block fits a request.
//!
//! Every stream and pool has a virtual range of the device's size, tiled by allocated, free
//! (mapped) and unmapped blocks. A request the free index cannot serve goes to the smallest
//! run of consecutive free and unmapped blocks that holds it (lowest address on ties), and
//! the unmapped pages under it are mapped. Physical pages come, in order, from pages kept
//! unmapped, from new pages while the pages held stay within the most pages ever in use
//! (counting this request), and otherwise from idle pages — mapped pages lying whole inside
//! free blocks elsewhere — which are unmapped and moved. Only when no page is idle does the
//! allocator hold more memory than it ever needed at once. So peak reserved memory is the
//! peak of pages in use, and a repeating workload stops moving pages once its layout settles.
//!
//! Invariants: pages are taken from idle pages only outside the chosen run; reserved bytes
//! equal mapped pages plus kept pages; on failure, pages obtained stay kept (counted) and no
//! block changes.

use alloc::vec::Vec;

use crate::allocator::Allocator;
use crate::block::{BlockState, NIL};
use crate::device::{Device, DeviceError, PhysHandle, Stream};
use crate::error::AllocError;
use crate::explain::Decision;
use crate::size::Pool;
use crate::vrange::whole_pages;

/// Physical pages with the pool whose reserved bytes they count in (none for new pages).
type Pages = Vec<(PhysHandle, Option<Pool>)>;

/// Where a request will be placed: the run's first block and address, its extent.
struct Placement {
    start: u32,
    addr: u64,
    run_end: u64,
}

impl<D: Device> Allocator<D> {
    /// The smallest run of free and unmapped blocks of `stream`'s `pool` range holding
    /// `size` bytes (lowest address on ties).
    fn best_run(&self, pool: Pool, stream: Stream, size: u64) -> Option<Placement> {
        let mut best: Option<(u64, Placement)> = None;
        for r in self.vm.ranges.iter().filter(|r| r.pool == pool && r.stream == stream) {
            let mut id = r.head;
            while id != NIL {
                let b = &self.blocks[id];
                if !matches!(b.state, BlockState::Free | BlockState::Unmapped) {
                    id = b.next;
                    continue;
                }
                let (start, addr) = (id, b.addr);
                let mut end = b.end();
                id = b.next;
                while id != NIL && matches!(self.blocks[id].state, BlockState::Free | BlockState::Unmapped) {
                    end = self.blocks[id].end();
                    id = self.blocks[id].next;
                }
                let len = end - addr;
                if len >= size && best.as_ref().is_none_or(|(l, p)| (len, addr) < (*l, p.addr)) {
                    best = Some((len, Placement { start, addr, run_end: end }));
                }
            }
        }
        best.map(|(_, p)| p)
    }

    /// Pages to map under `[addr, addr + size)` and idle pages it will put to use.
    fn pages_needed(&self, start: u32, addr: u64, size: u64) -> (u64, u64) {
        let page = self.vm.paged_page;
        let end = addr + size;
        let (mut unmapped, mut idle) = (0, 0);
        let mut id = start;
        while id != NIL && self.blocks[id].addr < end {
            let b = &self.blocks[id];
            let (lo, hi) = (b.addr.max(addr), b.end().min(end));
            match b.state {
                BlockState::Unmapped => unmapped += hi.div_ceil(page) - lo / page,
                BlockState::Free => {
                    let w = whole_pages(b.addr, b.size, page);
                    let used = (lo / page)..hi.div_ceil(page);
                    idle += w.end.min(used.end).saturating_sub(w.start.max(used.start));
                }
                _ => {}
            }
            id = b.next;
        }
        (unmapped, idle)
    }

    /// Takes up to `want` idle pages from free blocks outside `[keep_lo, keep_hi)`, farthest
    /// into their range first (offsets, not addresses, so the choice does not depend on where
    /// the device placed the ranges), unmapping them; returns their handles with the pool
    /// they counted in.
    fn steal_idle_pages(
        &mut self,
        want: u64,
        keep_lo: u64,
        keep_hi: u64,
    ) -> Result<Vec<(PhysHandle, Pool)>, AllocError> {
        let page = self.vm.paged_page;
        let mut victims: Vec<((u64, usize), u32)> = Vec::new();
        for f in &self.free {
            for ((_, size, addr), id) in f.iter() {
                let b = &self.blocks[id];
                if b.in_vm && !whole_pages(addr, size, page).is_empty() && (addr + size <= keep_lo || addr >= keep_hi) {
                    let base = self.vm.range_of(addr).map_or(0, |r| self.vm.ranges[r].base);
                    victims.push(((addr - base, b.pool.index()), id));
                }
            }
        }
        victims.sort_unstable_by_key(|v| core::cmp::Reverse(v.0));
        let mut got = Vec::new();
        for (_, id) in victims {
            if got.len() as u64 >= want {
                break;
            }
            let b = &self.blocks[id];
            let (pool, w) = (b.pool, whole_pages(b.addr, b.size, page));
            let n = (w.end - w.start).min(want - got.len() as u64);
            let handles = self.unmap_pages(id, (w.end - n) * page, n)?;
            got.extend(handles.into_iter().map(|h| (h, pool)));
        }
        Ok(got)
    }

    /// Obtains `need` physical pages for a placement over `[lo, hi)` that puts `idle_used`
    /// idle pages to use: kept pages, then new pages within the peak of pages in use, then
    /// idle pages from elsewhere, then new pages beyond the peak. `None` if the device (or
    /// the memory fraction) refuses and no page is idle; pages obtained are then kept.
    fn obtain_pages(&mut self, need: u64, idle_used: u64, lo: u64, hi: u64) -> Result<Option<Pages>, AllocError> {
        let page = self.vm.paged_page;
        let mut got: Pages = Vec::with_capacity(need as usize);
        while (got.len() as u64) < need {
            match self.vm.page_pool.pop() {
                Some((h, p)) => got.push((h, Some(p))),
                None => break,
            }
        }
        let in_use_after = self.vm.pages_in_use() + need + idle_used;
        let held = self.vm.mapped_pages + self.vm.page_pool.len() as u64 + got.len() as u64;
        let mut free_creates = self.vm.peak_in_use.max(in_use_after).saturating_sub(held);
        let mut stole = false;
        while (got.len() as u64) < need {
            if free_creates > 0 {
                free_creates -= 1;
                if let Some(h) = self.create_page(page)? {
                    got.push((h, None));
                    continue;
                }
            }
            if !stole {
                stole = true;
                let missing = need - got.len() as u64;
                let stolen = self.steal_idle_pages(missing, lo, hi)?;
                if !stolen.is_empty() {
                    let n = stolen.len() as u64;
                    self.explainer.note(|| Decision::Released {
                        segments: n,
                        bytes: n * page,
                        step: "move idle pages",
                    });
                }
                got.extend(stolen.into_iter().map(|(h, p)| (h, Some(p))));
                continue;
            }
            match self.create_page(page)? {
                Some(h) => got.push((h, None)),
                None => {
                    self.keep_pages(got);
                    return Ok(None);
                }
            }
        }
        Ok(Some(got))
    }

    /// A new physical page, unless the memory fraction or the device refuses.
    fn create_page(&mut self, page: u64) -> Result<Option<PhysHandle>, AllocError> {
        if self.allowed.is_some_and(|a| self.reserved + page > a) {
            return Ok(None);
        }
        match self.device.vm_create(page) {
            Ok(h) => Ok(Some(h)),
            Err(DeviceError::OutOfMemory) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Keeps unmapped pages for later (they stay reserved). Pages that were never counted
    /// count in the large pool.
    fn keep_pages(&mut self, pages: Pages) {
        let page = self.vm.paged_page;
        for (h, p) in pages {
            let pool = p.unwrap_or_else(|| {
                self.reserved += page;
                self.stats.reserved_bytes.increase(Pool::Large, page);
                Pool::Large
            });
            self.vm.page_pool.push((h, pool));
        }
    }

    /// Places a request the free index could not serve (see the module comment); returns a
    /// free block of at least `size` bytes taken out of the free index, or `None` when no
    /// memory could be found.
    pub(crate) fn grow_paged(&mut self, pool: Pool, stream: Stream, size: u64) -> Result<Option<u32>, AllocError> {
        let page = self.vm.paged_page;
        let place = match self.best_run(pool, stream, size) {
            Some(p) => p,
            None => match self.reserve_range(stream, pool, page)? {
                Some(id) => {
                    let b = &self.blocks[id];
                    Placement { start: id, addr: b.addr, run_end: b.end() }
                }
                None => return Ok(None),
            },
        };
        let (need, idle_used) = self.pages_needed(place.start, place.addr, size);
        let Some(handles) = self.obtain_pages(need, idle_used, place.addr, place.run_end)? else { return Ok(None) };
        // Map every unmapped span under the request, first to last. Mapping merges blocks,
        // so the walk goes by address.
        let end = place.addr + size;
        let mut handles = handles.into_iter();
        let mut at = place.addr;
        while at < end {
            let id = self.block_containing(at);
            let b = &self.blocks[id];
            if b.state == BlockState::Unmapped {
                let pages = (b.end().min(end).div_ceil(page) * page - b.addr) / page;
                let chunk: Pages = handles.by_ref().take(pages as usize).collect();
                let from = b.addr;
                if let Err(e) = self.map_pages(id, from, &chunk) {
                    self.keep_pages(chunk.into_iter().chain(handles).collect());
                    return Err(e);
                }
                at = from + pages * page;
                self.explainer.note(|| Decision::NewSegment { addr: from, size: pages * page });
            } else {
                at = b.end();
            }
        }
        let start = self.block_containing(place.addr);
        debug_assert_eq!(self.blocks[start].addr, place.addr);
        self.uncache(start);
        Ok(Some(start))
    }

    /// The block of a virtual range that holds `addr`.
    fn block_containing(&self, addr: u64) -> u32 {
        let r = self.vm.range_of(addr).expect("address lies in a range");
        let mut id = self.vm.ranges[r].head;
        while self.blocks[id].end() <= addr {
            id = self.blocks[id].next;
        }
        id
    }

    /// Returns idle pages and kept pages to the device until reserved memory is at most
    /// `target` bytes (all of them with a target of 0). Returns the bytes released.
    pub(crate) fn release_idle_pages(&mut self, target: u64) -> Result<u64, AllocError> {
        let page = self.vm.paged_page;
        let before = self.reserved;
        while self.reserved > target {
            let Some((h, pool)) = self.vm.page_pool.pop() else { break };
            self.destroy_pages(&[h], pool, page)?;
        }
        if self.reserved > target {
            let mut blocks: Vec<(u64, u32)> = Vec::new();
            for f in &self.free {
                for ((_, size, addr), id) in f.iter() {
                    let w = whole_pages(addr, size, page);
                    if self.blocks[id].in_vm && !w.is_empty() {
                        blocks.push((w.end - w.start, id));
                    }
                }
            }
            blocks.sort_unstable_by(|a, b| b.cmp(a));
            for (_, id) in blocks {
                if self.reserved <= target {
                    break;
                }
                self.unmap_free_block(id)?;
            }
        }
        Ok(before - self.reserved)
    }
}
