//! The memory map the page draws, as one flat array of numbers: the core's layout
//! (`core/src/report/layout.rs`: classic segments, and virtual ranges with their unmapped holes and
//! idle pages) without the strings, cheap enough to rebuild on every animation frame.
//!
//! Layout: `[segment_count, seg_0, blocks of seg_0..., seg_1, ...]` where a segment is
//! `SEGMENT_FIELDS` numbers `(address, total_size, stream, is_large, kind, block_count)`
//! (kind: [`KIND_CLASSIC`], or for a virtual range up to its last memory [`KIND_EXPANDABLE`]
//! or [`KIND_PAGED`]) followed by `block_count` blocks of `BLOCK_FIELDS` numbers `(address,
//! size, requested_size, state)`, state being [`STATE_ALLOCATED`], [`STATE_PENDING_FREE`],
//! [`STATE_INACTIVE`], [`STATE_IDLE`] or [`STATE_UNMAPPED`]. Invariant: segments are by
//! address, blocks by address within their segment, and the blocks' sizes sum to their
//! segment's `total_size`.

use cachalot_core::layout::{LayoutRow, Piece};
use cachalot_core::size::Pool;

use crate::js_number::to_f64;

/// Numbers per segment header.
pub const SEGMENT_FIELDS: usize = 6;
/// Numbers per block.
pub const BLOCK_FIELDS: usize = 4;
/// An allocated block (`active_allocated`).
pub const STATE_ALLOCATED: f64 = 0.0;
/// A freed block waiting for other streams (`active_pending_free`).
pub const STATE_PENDING_FREE: f64 = 1.0;
/// A cached free block (`inactive`); under virtual memory, in pages mapped together with
/// live memory.
pub const STATE_INACTIVE: f64 = 2.0;
/// Cached free pages lying wholly inside their block: movable, or returned by `empty_cache`.
pub const STATE_IDLE: f64 = 3.0;
/// Address space of a virtual range with no memory behind it.
pub const STATE_UNMAPPED: f64 = 4.0;
/// A classic segment (one device allocation).
pub const KIND_CLASSIC: f64 = 0.0;
/// A virtual range of PyTorch's expandable segments.
pub const KIND_EXPANDABLE: f64 = 1.0;
/// A virtual range of cachalot's paged policy.
pub const KIND_PAGED: f64 = 2.0;

/// Encodes layout rows in the flat layout; `paged`: the allocator runs cachalot's paged
/// policy (its ranges are then [`KIND_PAGED`]).
pub fn encode(rows: &[LayoutRow], paged: bool) -> Vec<f64> {
    let range = if paged { KIND_PAGED } else { KIND_EXPANDABLE };
    let blocks: usize = rows.iter().map(|r| r.blocks.len()).sum();
    let mut out = Vec::with_capacity(1 + rows.len() * SEGMENT_FIELDS + blocks * BLOCK_FIELDS);
    out.push(rows.len() as f64);
    for r in rows {
        out.extend_from_slice(&[
            to_f64(r.address),
            to_f64(r.size),
            to_f64(r.stream),
            f64::from(u8::from(r.pool == Pool::Large)),
            if r.virtual_range { range } else { KIND_CLASSIC },
            r.blocks.len() as f64,
        ]);
        for b in &r.blocks {
            let state = match b.piece {
                Piece::Allocated => STATE_ALLOCATED,
                Piece::PendingFree => STATE_PENDING_FREE,
                Piece::Free => STATE_INACTIVE,
                Piece::Idle => STATE_IDLE,
                Piece::Unmapped => STATE_UNMAPPED,
            };
            out.extend_from_slice(&[to_f64(b.address), to_f64(b.size), to_f64(b.requested), state]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::{Allocator, Config, SimDevice};

    #[test]
    fn segments_and_blocks_in_order() {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
        let x = a.malloc(1000, 0).unwrap();
        let _y = a.malloc(5 << 20, 0).unwrap();
        a.free(x).unwrap();
        let flat = encode(&a.layout(), false);
        assert_eq!(flat[0], 2.0);
        // The large 20 MiB segment sits below the small one (the device places top-down).
        let first = &flat[1..1 + SEGMENT_FIELDS];
        assert_eq!((first[1], first[3], first[5]), ((20u64 << 20) as f64, 1.0, 2.0));
        let blocks = &flat[1 + SEGMENT_FIELDS..1 + SEGMENT_FIELDS + 2 * BLOCK_FIELDS];
        assert_eq!(blocks[1..4], [(5u64 << 20) as f64, (5u64 << 20) as f64, STATE_ALLOCATED]);
        assert_eq!(blocks[5..8], [(15u64 << 20) as f64, 0.0, STATE_INACTIVE]);
        let second = &flat[1 + SEGMENT_FIELDS + 2 * BLOCK_FIELDS..][..SEGMENT_FIELDS];
        assert_eq!((second[1], second[3], second[5]), ((2u64 << 20) as f64, 0.0, 1.0));
        assert_eq!(flat.len(), 1 + 2 * SEGMENT_FIELDS + 3 * BLOCK_FIELDS);
    }
}
