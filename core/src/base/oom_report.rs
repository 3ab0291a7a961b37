//! Out of memory, explained: the report an out-of-memory error carries — the figures
//! PyTorch's message gives, plus where the cached memory sits and why none of it could serve
//! the request (the largest free block and its segment, free bytes by pool, and how much is
//! pinned in segments that still hold allocations). The engine fills it in (`engine/oom.rs`).
//!
//! Invariant: a report describes the allocator right after it gave up, when everything
//! releasable has been released; its figures equal a recount of the blocks at that moment.

use alloc::vec::Vec;
use core::fmt;

use crate::base::device::Stream;
use crate::base::size::{format_size, Pool};

/// A free block and the segment (or virtual range) it sits in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeSpot {
    /// Address of the free block.
    pub addr: u64,
    /// Its size.
    pub size: u64,
    /// Address of its segment.
    pub segment_addr: u64,
    /// Bytes of the segment held (mapped bytes for a virtual range).
    pub segment_size: u64,
    /// The pool.
    pub pool: Pool,
}

/// How one segment's memory is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentUse {
    /// Address of the segment.
    pub addr: u64,
    /// Bytes held.
    pub size: u64,
    /// Bytes in free (cached) blocks.
    pub free: u64,
    /// Bytes in allocated or pending blocks.
    pub active: u64,
    /// Largest free block.
    pub largest_free: u64,
    /// The pool.
    pub pool: Pool,
}

/// Why a request could not be served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OomReport {
    /// Bytes the caller asked for.
    pub requested: u64,
    /// The request after rounding.
    pub rounded: u64,
    /// Size of the segment a new device allocation would have needed.
    pub segment_size: u64,
    /// The stream of the request.
    pub stream: Stream,
    /// Total memory of the device.
    pub capacity: u64,
    /// Memory the device reported free.
    pub device_free: u64,
    /// The memory-fraction limit, if one is set.
    pub allowed: Option<u64>,
    /// Bytes allocated to callers.
    pub allocated: u64,
    /// Bytes of segments held (allocated or cached).
    pub reserved: u64,
    /// Bytes other allocators sharing the device's memory-fraction limit hold (the native
    /// library's other streams, with a lock per stream); 0 when the allocator is alone.
    pub held_elsewhere: u64,
    /// Largest cached block left, and where.
    pub largest_free: Option<FreeSpot>,
    /// Cached bytes in the small and the large pool.
    pub cached_by_pool: [u64; 2],
    /// Cached bytes in segments that still hold allocations: they cannot be released.
    pub pinned_bytes: u64,
    /// Number of such segments.
    pub pinned_segments: u64,
    /// The segments with the most cached bytes (at most five), most first.
    pub segments: Vec<SegmentUse>,
    /// True when the allocator maps pages into address ranges: its segments are ranges
    /// (their mapped bytes), and cached memory it could not return lies in pages mapped
    /// together (one page, or a chunk of several) with live allocations.
    pub virtual_memory: bool,
}

impl OomReport {
    /// Size of the largest cached block (0 if none).
    pub fn largest_free_block(&self) -> u64 {
        self.largest_free.as_ref().map_or(0, |s| s.size)
    }
}

impl fmt::Display for OomReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sz = format_size;
        write!(
            f,
            "out of memory. Tried to allocate {} (requested {} bytes). The device has a total capacity of {} of which {} is free. ",
            sz(self.rounded),
            self.requested,
            sz(self.capacity),
            sz(self.device_free),
        )?;
        if let Some(allowed) = self.allowed {
            write!(f, "{} allowed; ", sz(allowed))?;
        }
        write!(
            f,
            "Of the allocated memory {} is allocated by cachalot, and {} is reserved by cachalot but unallocated.",
            sz(self.allocated),
            sz(self.reserved.saturating_sub(self.allocated)),
        )?;
        if self.held_elsewhere > 0 {
            write!(
                f,
                " Other streams' allocators hold {} more (their caches were released first).",
                sz(self.held_elsewhere)
            )?;
        }
        let cached = self.cached_by_pool[0] + self.cached_by_pool[1];
        if cached == 0 {
            let limit = self.allowed.unwrap_or(self.capacity).saturating_sub(self.held_elsewhere);
            return if self.rounded > limit {
                write!(
                    f,
                    " Nothing is cached, and the request alone is larger than the {} this allocator may hold.",
                    sz(limit)
                )
            } else if self.allocated == 0 {
                write!(
                    f,
                    " Nothing is cached or allocated: the device has too little free memory left for the request."
                )
            } else {
                write!(f, " Nothing is cached: the live allocations and this request do not fit together.")
            };
        }
        let (segment, mapped) = if self.virtual_memory { ("address range", " mapped") } else { ("segment", "") };
        match &self.largest_free {
            Some(s) => write!(
                f,
                " Why nothing fit: the largest cached block is {} at {:#x}, in the {} {segment} at {:#x} ({}{mapped})",
                sz(s.size),
                s.addr,
                s.pool.name(),
                s.segment_addr,
                sz(s.segment_size)
            )?,
            None => write!(f, " Why nothing fit: no cached block")?,
        }
        write!(
            f,
            "; cached memory: {} in the small pool, {} in the large pool; ",
            sz(self.cached_by_pool[0]),
            sz(self.cached_by_pool[1])
        )?;
        if self.virtual_memory {
            write!(
                f,
                "{} of it lies in pages mapped together with live allocations in {} address range(s), so it could not be returned to the device.",
                sz(self.pinned_bytes),
                self.pinned_segments
            )
        } else {
            write!(
                f,
                "{} of it is pinned in {} segment(s) that still hold allocations, so it could not be returned to the device.",
                sz(self.pinned_bytes),
                self.pinned_segments
            )
        }
    }
}
