//! The layout a picture of the allocator draws: every classic segment, and every virtual
//! address range up to its last memory, its blocks in address order, with the unmapped
//! address space between mapped runs and the idle pages of cached blocks shown as such.
//!
//! The snapshot (PyTorch's schema) reports only runs of mapped memory, so under virtual
//! memory the holes a move leaves, and which cached memory could move, cannot be seen in it.
//! Here a cached block's bytes covered by physical pages (chunks) that lie wholly inside it
//! are [`Piece::Idle`]: cachalot's policy may move them under another request, and
//! `empty_cache` returns them; the rest of a cached block shares a chunk with live memory.
//!
//! Invariants: rows are by address; each row's blocks are in address order, contiguous, and
//! their sizes sum to the row's size; a row ends with a block that holds memory, and a range
//! with nothing mapped has no row.

use alloc::vec::Vec;

use crate::base::device::Stream;
use crate::base::size::Pool;

/// What a stretch of a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Handed out.
    Allocated,
    /// Freed, waiting for work on other streams.
    PendingFree,
    /// Cached, free; under virtual memory, in pages mapped together (one page, or a chunk
    /// of several) with live memory.
    Free,
    /// Cached, free, in pages that lie wholly inside the cached block: movable, or returned
    /// by `empty_cache`.
    Idle,
    /// Address space with no memory behind it (virtual memory only).
    Unmapped,
}

/// A stretch of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutBlock {
    /// First address.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// Bytes the caller asked for (0 unless allocated or pending).
    pub requested: u64,
    /// What it is.
    pub piece: Piece,
}

/// A classic segment, or a virtual range up to its last memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutRow {
    /// First address.
    pub address: u64,
    /// Bytes drawn: the segment, or the range from its base to the end of its last memory.
    pub size: u64,
    /// The stream it serves.
    pub stream: Stream,
    /// The pool it serves.
    pub pool: Pool,
    /// True for a virtual address range.
    pub virtual_range: bool,
    /// Its stretches, by address.
    pub blocks: Vec<LayoutBlock>,
}
