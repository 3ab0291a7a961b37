//! Reading the layout ([`crate::layout`]) off the allocator's blocks: the rows of the
//! browser's memory map, classic segments and virtual ranges alike.
//!
//! Invariants: those of [`crate::layout`]; reading changes nothing (`&self`).

use alloc::vec::Vec;

use crate::base::device::Device;
use crate::data::block::{BlockState, NIL};
use crate::engine::allocator::Allocator;
use crate::report::layout::{LayoutBlock, LayoutRow, Piece};

impl<D: Device> Allocator<D> {
    /// Every segment and virtual range that holds memory, by address (see the module comment).
    pub fn layout(&self) -> Vec<LayoutRow> {
        let mut rows = Vec::new();
        for (head, first) in self.heap.blocks() {
            if first.prev != NIL {
                continue;
            }
            let range = if first.in_vm { self.vm.range_of(first.addr) } else { None };
            let mut row = LayoutRow {
                address: first.addr,
                size: 0,
                stream: self.heap.stream_of_lane(first.stream_index),
                pool: first.pool,
                virtual_range: first.in_vm,
                blocks: Vec::new(),
            };
            let mut id = head;
            while id != NIL {
                let b = &self.heap[id];
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
