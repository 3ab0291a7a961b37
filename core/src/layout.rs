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

use crate::allocator::Allocator;
use crate::block::{BlockState, NIL};
use crate::device::{Device, Stream};
use crate::size::Pool;

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

impl<D: Device> Allocator<D> {
    /// Every segment and virtual range that holds memory, by address (see the module comment).
    pub fn layout(&self) -> Vec<LayoutRow> {
        let mut rows = Vec::new();
        for (head, first) in self.blocks.iter() {
            if first.prev != NIL {
                continue;
            }
            let range = if first.in_vm { self.vm.range_of(first.addr) } else { None };
            let mut row = LayoutRow {
                address: first.addr,
                size: 0,
                stream: self.streams.handle(first.stream_index),
                pool: first.pool,
                virtual_range: first.in_vm,
                blocks: Vec::new(),
            };
            let mut id = head;
            while id != NIL {
                let b = &self.blocks[id];
                let (address, size, requested) = (b.addr, b.size, b.requested());
                let mut push = |piece, address, size, requested| {
                    row.blocks.push(LayoutBlock { address, size, requested, piece });
                };
                match b.state {
                    BlockState::Allocated => push(Piece::Allocated, address, size, requested),
                    BlockState::PendingFree => push(Piece::PendingFree, address, size, requested),
                    BlockState::Unmapped => push(Piece::Unmapped, address, size, 0),
                    BlockState::Free => {
                        let end = address + size;
                        let mut at = address;
                        if let Some(r) = range {
                            let chunks = self.vm.ranges[r].mappings.range(address..end);
                            for (&from, &(len, _)) in chunks.filter(|(&from, &(len, _))| from + len <= end) {
                                if from > at {
                                    push(Piece::Free, at, from - at, 0);
                                }
                                push(Piece::Idle, from, len, 0);
                                at = from + len;
                            }
                        }
                        if at < end {
                            push(Piece::Free, at, end - at, 0);
                        }
                    }
                }
                id = b.next;
            }
            while row.blocks.last().is_some_and(|b| b.piece == Piece::Unmapped) {
                row.blocks.pop();
            }
            if row.blocks.is_empty() {
                continue;
            }
            row.size = row.blocks.iter().map(|b| b.size).sum();
            rows.push(row);
        }
        rows.sort_by_key(|r| r.address);
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, SimDevice};

    const MIB: u64 = 1 << 20;

    fn pieces(row: &LayoutRow) -> Vec<(Piece, u64)> {
        row.blocks.iter().map(|b| (b.piece, b.size / MIB)).collect()
    }

    #[test]
    fn classic_segments_are_drawn_as_the_snapshot_reports_them() {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
        let x = a.malloc(5 * MIB, 0).unwrap();
        let rows = a.layout();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].size, rows[0].virtual_range), (20 * MIB, false));
        assert_eq!(pieces(&rows[0]), [(Piece::Allocated, 5), (Piece::Free, 15)]);
        a.free(x).unwrap();
        assert_eq!(pieces(&a.layout()[0]), [(Piece::Free, 20)], "a classic segment has no idle pages");
    }

    #[test]
    fn holes_left_by_moved_pages_and_idle_pages_are_shown() {
        // Twenty 5 MiB tensors fill a 100 MiB device; every other one is freed.
        let mut a = Allocator::new(SimDevice::new(100 * MIB), Config::parse("policy:cachalot").unwrap());
        let live: Vec<u64> = (0..20).map(|_| a.malloc(5 * MIB, 0).unwrap()).collect();
        for addr in live.iter().step_by(2) {
            a.free(*addr).unwrap();
        }
        let rows = a.layout();
        assert_eq!(rows.len(), 1);
        // Each 5 MiB hole holds two whole 2 MiB pages; its last 1 MiB shares a page with the
        // live tensor after it.
        let hole_then_tensor = [(Piece::Idle, 2), (Piece::Idle, 2), (Piece::Free, 1), (Piece::Allocated, 5)];
        assert_eq!(pieces(&rows[0]), hole_then_tensor.repeat(10));
        // 8 MiB moves idle pages out of the holes: they are now unmapped address space.
        a.malloc(8 * MIB, 0).unwrap();
        let rows = a.layout();
        let unmapped: u64 = rows[0].blocks.iter().filter(|b| b.piece == Piece::Unmapped).map(|b| b.size).sum();
        assert_eq!(unmapped, 8 * MIB, "{:?}", pieces(&rows[0]));
        for row in &rows {
            assert_eq!(row.size, row.blocks.iter().map(|b| b.size).sum::<u64>());
            assert!(row.blocks.windows(2).all(|w| w[0].address + w[0].size == w[1].address));
            assert_ne!(row.blocks.last().unwrap().piece, Piece::Unmapped);
        }
        // What holds memory in the layout is what the allocator reserves (no page is kept aside).
        let held: u64 =
            rows.iter().flat_map(|r| &r.blocks).filter(|b| b.piece != Piece::Unmapped).map(|b| b.size).sum();
        assert_eq!(held, a.reserved_bytes());
    }
}
