//! Virtual ranges: reserved address space that the allocator backs with physical pages as
//! needed, and the bookkeeping of those pages.
//!
//! Two policies use them. PyTorch's expandable segments keep one range per stream and pool
//! (2 MiB pages for the small pool, 20 MiB for the large) and map at the end of what is in
//! use. cachalot's paged policy uses 2 MiB pages everywhere and moves idle physical pages to
//! where they are needed ("paging.rs").
//!
//! Physical memory comes in chunks: one handle of one or more pages, mapped whole (CUDA maps
//! and unmaps only whole handles, and each mapping costs the same whatever its size, so the
//! paged policy makes one chunk per span it maps rather than one per page).
//!
//! Under the paged policy a chunk that moves away is not unmapped from where it was: it stays
//! mapped there too, as a *ghost* the allocator no longer counts, until that address is
//! wanted for other memory or the chunk is destroyed. Training loops move the same chunks
//! back and forth, and a chunk moving back onto its ghost costs no driver call at all; an
//! unmap is only ever postponed, never added.
//!
//! Invariants: a range's `mappings` tile exactly the pages under its blocks that are not
//! `Unmapped`; `mapped_pages` equals the pages of all mappings; chunks in the paged policy's
//! `page_pool` (`engine/paged/paged_state.rs`) are counted in reserved memory and mapped
//! nowhere but at ghosts; ghosts lie inside `Unmapped`
//! blocks, each is a whole mapping of a live chunk (kept, or mapped elsewhere), and a chunk is
//! destroyed, or a range released, only once no ghost of it is left.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::base::device::{PhysHandle, Stream};
use crate::base::size::Pool;

/// How the allocator uses virtual memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmMode {
    /// Classic segments only (the policy does not use virtual memory, or the device lacks it).
    Off,
    /// PyTorch's `expandable_segments:True`.
    Expandable,
    /// cachalot's paged policy.
    Paged,
}

/// One reserved address range.
#[derive(Clone, Debug)]
pub struct VirtualRange {
    /// First address (page-aligned).
    pub base: u64,
    /// Bytes reserved.
    pub size: u64,
    /// Page size: the unit of mapping.
    pub page: u64,
    /// The stream the range serves.
    pub stream: Stream,
    /// The pool the range serves.
    pub pool: Pool,
    /// What is mapped: address → (bytes, handle).
    pub mappings: BTreeMap<u64, (u64, PhysHandle)>,
    /// The block at the range's first address.
    pub head: u32,
}

impl VirtualRange {
    /// True when `addr` lies in the range.
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.base + self.size
    }

    /// True when every byte of `[lo, hi)` lies in a mapping.
    pub fn is_mapped(&self, lo: u64, hi: u64) -> bool {
        let mut at = lo;
        while at < hi {
            match self.mappings.range(..=at).next_back() {
                Some((&a, &(len, _))) if a + len > at => at = a + len,
                _ => return false,
            }
        }
        true
    }

    /// True when no mapping meets `[lo, hi)`.
    pub fn is_unmapped(&self, lo: u64, hi: u64) -> bool {
        let before = self.mappings.range(..lo).next_back().is_some_and(|(&a, &(len, _))| a + len > lo);
        !before && self.mappings.range(lo..hi).next().is_none()
    }

    /// The mappings lying wholly inside `[lo, hi)`, as (address, bytes).
    pub fn mappings_within(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        self.mappings.range(lo..hi).filter(|(&a, &(len, _))| a + len <= hi).map(|(&a, &(len, _))| (a, len)).collect()
    }
}

/// Physical memory to map: a handle of `pages` pages, counted in a pool's reserved bytes
/// (`None` for a chunk just created).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The device's handle.
    pub handle: PhysHandle,
    /// Its size in pages of the range it is mapped into.
    pub pages: u64,
    /// The pool whose reserved bytes count it, if any yet.
    pub counted_in: Option<Pool>,
    /// Where a moved chunk was mapped (its ghost lies there): where it goes back to if the
    /// request it was moved for fails, since that ghost holds the wait for the work that may
    /// still use it (`PagedState::ghost_waits`).
    pub from: Option<u64>,
    /// Work that may still use its pages: the stream and the stamp of the free, for a chunk
    /// moved within its stream before that work was known done. The block it is mapped into
    /// takes that stamp at least, so that whatever later moves or unmaps it waits for the work.
    pub wait: Option<(Stream, u32)>,
}

/// Pages inside `[addr, addr + size)` that the range lies over whole, as a page-index range.
#[inline]
pub fn whole_pages(addr: u64, size: u64, page: u64) -> core::ops::Range<u64> {
    let (first, end) = if page.is_power_of_two() {
        let shift = page.trailing_zeros();
        ((addr + page - 1) >> shift, (addr + size) >> shift)
    } else {
        (addr.div_ceil(page), (addr + size) / page)
    };
    first..end.max(first)
}

/// The allocator's virtual-memory state.
#[derive(Clone, Debug)]
pub struct VirtualMemory {
    /// How virtual memory is used.
    pub mode: VmMode,
    /// Every reserved range.
    pub ranges: Vec<VirtualRange>,
    /// Unmapped blocks per pool, by (stream, address).
    pub unmapped: [BTreeMap<(Stream, u64), u32>; 2],
    /// Pages mapped over all ranges.
    pub mapped_pages: u64,
}

impl VirtualMemory {
    /// State for `mode`.
    pub fn new(mode: VmMode) -> VirtualMemory {
        VirtualMemory { mode, ranges: Vec::new(), unmapped: [BTreeMap::new(), BTreeMap::new()], mapped_pages: 0 }
    }

    /// Index of the range holding `addr`.
    #[inline]
    pub fn range_of(&self, addr: u64) -> Option<usize> {
        self.ranges.iter().position(|r| r.contains(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_pages_inside_a_span() {
        let p = 2 << 20;
        assert_eq!(whole_pages(0, 3 * p, p), 0..3);
        assert_eq!(whole_pages(1, 3 * p, p), 1..3);
        assert_eq!(whole_pages(p / 2, p, p), 1..1);
        assert!(whole_pages(p + 512, 1024, p).is_empty());
    }
}
