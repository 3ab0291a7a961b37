//! The memory map the page draws, as one flat array of numbers: the core's snapshot
//! segments (PyTorch's `_snapshot()` schema) without the strings, cheap enough to rebuild
//! on every animation frame.
//!
//! Layout: `[segment_count, seg_0, blocks of seg_0..., seg_1, ...]` where a segment is
//! `SEGMENT_FIELDS` numbers `(address, total_size, stream, is_large, kind, block_count)`
//! (kind: [`KIND_CLASSIC`], [`KIND_EXPANDABLE`] or [`KIND_PAGED`]: under virtual memory a
//! segment is one run of mapped pages) followed by `block_count` blocks of `BLOCK_FIELDS` numbers `(address,
//! size, requested_size, state)`, state being [`STATE_ALLOCATED`], [`STATE_PENDING_FREE`] or
//! [`STATE_INACTIVE`]. Invariant: segments are by address, blocks by address within their
//! segment, and the blocks' sizes sum to their segment's `total_size`.

use cachalot_core::snapshot::SegmentInfo;

use crate::js_number::to_f64;

/// Numbers per segment header.
pub const SEGMENT_FIELDS: usize = 6;
/// Numbers per block.
pub const BLOCK_FIELDS: usize = 4;
/// An allocated block (`active_allocated`).
pub const STATE_ALLOCATED: f64 = 0.0;
/// A freed block waiting for other streams (`active_pending_free`).
pub const STATE_PENDING_FREE: f64 = 1.0;
/// A cached free block (`inactive`).
pub const STATE_INACTIVE: f64 = 2.0;
/// A classic segment (one device allocation).
pub const KIND_CLASSIC: f64 = 0.0;
/// A run of mapped pages of PyTorch's expandable segments.
pub const KIND_EXPANDABLE: f64 = 1.0;
/// A run of mapped pages under cachalot's paged policy.
pub const KIND_PAGED: f64 = 2.0;

/// Encodes snapshot segments in the flat layout; `paged`: the allocator runs cachalot's
/// paged policy (its mapped runs are then [`KIND_PAGED`]).
pub fn encode(segments: &[SegmentInfo], paged: bool) -> Vec<f64> {
    let mapped = if paged { KIND_PAGED } else { KIND_EXPANDABLE };
    let blocks: usize = segments.iter().map(|s| s.blocks.len()).sum();
    let mut out = Vec::with_capacity(1 + segments.len() * SEGMENT_FIELDS + blocks * BLOCK_FIELDS);
    out.push(segments.len() as f64);
    for s in segments {
        out.extend_from_slice(&[
            to_f64(s.address),
            to_f64(s.total_size),
            to_f64(s.stream),
            f64::from(u8::from(s.segment_type == "large")),
            if s.is_expandable { mapped } else { KIND_CLASSIC },
            s.blocks.len() as f64,
        ]);
        for b in &s.blocks {
            let state = match b.state.as_str() {
                "active_allocated" => STATE_ALLOCATED,
                "active_pending_free" => STATE_PENDING_FREE,
                _ => STATE_INACTIVE,
            };
            out.extend_from_slice(&[to_f64(b.address), to_f64(b.size), to_f64(b.requested_size), state]);
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
        let flat = encode(&a.segments(0), false);
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
