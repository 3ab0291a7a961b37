//! The blocks of every segment as an array of C structs: what a caller builds PyTorch's
//! `snapshot()` from (segments and their blocks), and what setting a CUDA graph pool back to a
//! checkpoint reads (its live allocations).
//!
//! The array follows the size-first protocol of the text reports: call with `out` NULL and
//! `capacity` 0 to learn the count, then with an array that large. Invariant: the rows come
//! from one consistent state of the allocator and are written only when all of them fit;
//! rows are by address, and the blocks of one segment are consecutive.

use std::ffi::c_void;

use super::boundary;
use super::handle::borrow;
use super::status::Status;
use crate::error::Error;
use crate::sharing::SharedAllocator;

/// A block is allocated (handed out and not freed).
pub const CACHALOT_BLOCK_ALLOCATED: u32 = 0;
/// A block was freed but waits for work queued on another stream (`cachalot_record_stream`).
pub const CACHALOT_BLOCK_PENDING_FREE: u32 = 1;
/// A block is free and cached.
pub const CACHALOT_BLOCK_CACHED: u32 = 2;

/// One block, with the segment it lies in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockInfo {
    /// Address of the segment (for expandable segments and cachalot's policy: of one run of
    /// mapped memory in a virtual range).
    pub segment_address: u64,
    /// Bytes of the segment.
    pub segment_size: u64,
    /// Address of the block.
    pub address: u64,
    /// Bytes of the block.
    pub size: u64,
    /// Bytes the caller asked for (0 for a cached block).
    pub requested_size: u64,
    /// The stream the segment serves, as the `void *` it was given as.
    pub stream: u64,
    /// `CACHALOT_BLOCK_ALLOCATED`, `CACHALOT_BLOCK_PENDING_FREE` or `CACHALOT_BLOCK_CACHED`.
    pub state: u32,
    /// 1 when the segment is in the large pool, 0 in the small pool.
    pub is_large: u32,
    /// 1 when the segment is part of a virtual range (expandable segments, cachalot's policy).
    pub is_expandable: u32,
    /// The private pool the segment belongs to (`cachalot_pool_create`); 0 for the
    /// allocator's own memory.
    pub pool: u32,
}

/// Writes every block into `out` (`capacity` rows) and their count into `*out_count`. With
/// `out` NULL and `capacity` 0 only `*out_count` is written; a `capacity` too small fails with
/// `CACHALOT_STATUS_BUFFER_TOO_SMALL` and writes no row.
///
/// # Safety
/// `allocator` must be NULL or a live handle; `out` must be NULL or point to `capacity`
/// writable `cachalot_block_info`; `out_count` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cachalot_blocks(
    allocator: *const SharedAllocator,
    out: *mut BlockInfo,
    capacity: usize,
    out_count: *mut usize,
) -> Status {
    boundary::status(|| {
        // SAFETY: the caller promises a live handle or NULL (checked).
        let a = unsafe { borrow(allocator) }?;
        if out_count.is_null() {
            return Err(Error::NullPointer("out_count"));
        }
        if out.is_null() && capacity != 0 {
            return Err(Error::NullPointer("out (with capacity above 0)"));
        }
        let rows = rows(&a.segments()?);
        if !out.is_null() {
            if capacity < rows.len() {
                return Err(Error::ArrayTooSmall { needed: rows.len(), given: capacity });
            }
            // SAFETY: `out` holds `capacity >= rows.len()` writable rows (caller's promise and
            // the check above); the source is a distinct Rust vector.
            unsafe { std::ptr::copy_nonoverlapping(rows.as_ptr(), out, rows.len()) };
        }
        // SAFETY: checked non-NULL above; the caller promises it is writable.
        unsafe { *out_count = rows.len() };
        Ok(())
    })
}

/// The rows of `segments`, one per block.
fn rows(segments: &[cachalot_core::snapshot::SegmentInfo]) -> Vec<BlockInfo> {
    let mut rows = Vec::new();
    for s in segments {
        for b in &s.blocks {
            rows.push(BlockInfo {
                segment_address: s.address,
                segment_size: s.total_size,
                address: b.address,
                size: b.size,
                requested_size: b.requested_size,
                stream: s.stream,
                state: match b.state.as_str() {
                    "active_allocated" => CACHALOT_BLOCK_ALLOCATED,
                    "active_pending_free" => CACHALOT_BLOCK_PENDING_FREE,
                    _ => CACHALOT_BLOCK_CACHED,
                },
                is_large: (s.segment_type == "large") as u32,
                is_expandable: s.is_expandable as u32,
                pool: s.private_pool,
            });
        }
    }
    rows
}

/// Allocates exactly the `size` bytes at `ptr`, asked for as `requested` bytes, out of the
/// cached free block that holds them, waiting for pending frees first if none does; the block
/// keeps its segment's stream. This sets a pool back to a checkpoint, as PyTorch's CUDA graph
/// trees do (torch.compile's `mode="reduce-overhead"`): `ptr` and `size` are a block's address
/// and size from `cachalot_blocks`. Classic segments only (`policy:pytorch` without expandable
/// segments). Fails with `CACHALOT_STATUS_INVALID_ARGUMENT` when no cached block holds the
/// range (or either is not a multiple of 512), `CACHALOT_STATUS_INVALID_SIZE` for 0 bytes,
/// changing nothing.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_allocate_at(
    allocator: *mut SharedAllocator,
    ptr: *mut c_void,
    size: usize,
    requested: usize,
) -> Status {
    boundary::status(|| {
        // SAFETY: the caller promises a live handle or NULL (checked).
        let a = unsafe { borrow(allocator) }?;
        a.allocate_at(ptr as usize as u64, size as u64, requested as u64).map(|_| ())
    })
}
