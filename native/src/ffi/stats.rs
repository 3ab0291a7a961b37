//! The statistics as a versioned C struct, in the shape of PyTorch's `DeviceStats`.
//!
//! Versioning: the caller sets `struct_size = sizeof(cachalot_stats)` before the call; the
//! library writes the fields it knows that fit in that size, then sets `struct_size` to the
//! bytes it wrote and `version` to the layout it wrote. Fields are only ever appended, so a
//! program built against an older header keeps working with a newer library and the other
//! way round: version 1 ends at `max_split_size`, version 2 adds `num_oom_rejections`.
//! Invariant: the struct has no padding (every field is 8 bytes, after the two 4-byte header
//! fields), so its bytes are fully defined. Its fields after the header are the core's
//! `STAT_FIELDS` in order (`native/tests/stat_fields.rs` checks it through the header).

use std::mem::size_of;
use std::ptr;

use cachalot_core::stats::{Stat as CoreStat, StatArray as CoreStatArray};
use cachalot_core::DeviceStats;

use super::boundary;
use super::handle::borrow;
use super::status::Status;
use crate::error::Error;
use crate::sharing::SharedAllocator;

/// The layout version this library writes.
pub const CACHALOT_STATS_VERSION: u32 = 2;

/// The bytes of version 1's layout, the least a caller may pass.
const VERSION_1_SIZE: usize = std::mem::offset_of!(Stats, num_oom_rejections);

/// One statistic.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Value now.
    pub current: i64,
    /// Highest value since the last peak reset.
    pub peak: i64,
    /// Sum of all increases.
    pub allocated: i64,
    /// Sum of all decreases.
    pub freed: i64,
}

/// A statistic for both pools together and for each pool.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatArray {
    /// Both pools.
    pub all: Stat,
    /// The small pool (blocks of at most 1 MiB).
    pub small_pool: Stat,
    /// The large pool.
    pub large_pool: Stat,
}

/// The statistics of `torch.cuda.memory_stats()` (version 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// In: `sizeof(cachalot_stats)` as the caller knows it. Out: bytes written.
    pub struct_size: u32,
    /// Out: the layout version written (`CACHALOT_STATS_VERSION` of the library).
    pub version: u32,
    /// Allocations handed out.
    pub allocation: StatArray,
    /// Segments obtained from the device.
    pub segment: StatArray,
    /// Blocks allocated or waiting for a pending free.
    pub active: StatArray,
    /// Free blocks that share their segment with others.
    pub inactive_split: StatArray,
    /// Bytes of allocated blocks.
    pub allocated_bytes: StatArray,
    /// Bytes of segments (reserved memory).
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks.
    pub active_bytes: StatArray,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: StatArray,
    /// Bytes callers asked for.
    pub requested_bytes: StatArray,
    /// Device allocations retried after releasing every cached segment.
    pub num_alloc_retries: u64,
    /// Requests that ended out of memory.
    pub num_ooms: u64,
    /// Times every pending event was waited for.
    pub num_sync_all_streams: u64,
    /// Device allocations (cuMemAlloc calls that succeeded).
    pub num_device_alloc: u64,
    /// Device frees.
    pub num_device_free: u64,
    /// Allocations of at least `max_split_size` bytes.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size` bytes.
    pub oversize_segments: Stat,
    /// The configured `max_split_size_mb` in bytes; -1 when unlimited (the bytes cast to a
    /// signed integer, as PyTorch reports them: negative past 2^63).
    pub max_split_size: i64,
    /// Version 2: requests refused before the device was asked (`throw_on_cudamalloc_oom`
    /// with a memory fraction, PyTorch 2.12 on); -1 when the PyTorch release the config
    /// follows (`pytorch_version`) has no such counter (2.11).
    pub num_oom_rejections: i64,
}

impl From<&CoreStat> for Stat {
    fn from(s: &CoreStat) -> Stat {
        Stat { current: s.current, peak: s.peak, allocated: s.allocated, freed: s.freed }
    }
}

impl From<&CoreStatArray> for StatArray {
    fn from(a: &CoreStatArray) -> StatArray {
        StatArray { all: (&a.all).into(), small_pool: (&a.small_pool).into(), large_pool: (&a.large_pool).into() }
    }
}

impl From<&DeviceStats> for Stats {
    fn from(s: &DeviceStats) -> Stats {
        // Taken apart field by field, so that a statistic added to the core does not build
        // until it has a place here (and, appended, in the layout and STAT_FIELDS).
        let DeviceStats {
            allocation,
            segment,
            active,
            inactive_split,
            allocated_bytes,
            reserved_bytes,
            active_bytes,
            inactive_split_bytes,
            requested_bytes,
            num_alloc_retries,
            num_ooms,
            num_sync_all_streams,
            num_device_alloc,
            num_device_free,
            num_oom_rejections,
            oversize_allocations,
            oversize_segments,
            max_split_size,
        } = s;
        Stats {
            struct_size: size_of::<Stats>() as u32,
            version: CACHALOT_STATS_VERSION,
            allocation: allocation.into(),
            segment: segment.into(),
            active: active.into(),
            inactive_split: inactive_split.into(),
            allocated_bytes: allocated_bytes.into(),
            reserved_bytes: reserved_bytes.into(),
            active_bytes: active_bytes.into(),
            inactive_split_bytes: inactive_split_bytes.into(),
            requested_bytes: requested_bytes.into(),
            num_alloc_retries: *num_alloc_retries,
            num_ooms: *num_ooms,
            num_sync_all_streams: *num_sync_all_streams,
            num_device_alloc: *num_device_alloc,
            num_device_free: *num_device_free,
            oversize_allocations: oversize_allocations.into(),
            oversize_segments: oversize_segments.into(),
            max_split_size: *max_split_size,
            num_oom_rejections: num_oom_rejections.map_or(-1, |n| n as i64),
        }
    }
}

/// Fills `*out` with the allocator's statistics. Set `out->struct_size = sizeof *out` first;
/// a smaller size than version 1's fails with `CACHALOT_STATUS_INVALID_ARGUMENT` and writes
/// nothing; a size of version 1 (a program built against that header) gets version 1's
/// fields. On success `struct_size` holds the bytes written and `version` the layout.
///
/// # Safety
/// `allocator` must be NULL or a live handle; `out` must be NULL or point to `struct_size`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn cachalot_get_stats(allocator: *const SharedAllocator, out: *mut Stats) -> Status {
    boundary::status(|| {
        // SAFETY: the caller promises a live handle or NULL (checked).
        let a = unsafe { borrow(allocator) }?;
        if out.is_null() {
            return Err(Error::NullPointer("out"));
        }
        // SAFETY: `out` is non-NULL and points to at least the 4-byte `struct_size` field
        // (caller's promise); read unaligned in case the caller's struct is packed.
        let caller_size = unsafe { ptr::read_unaligned(ptr::addr_of!((*out).struct_size)) } as usize;
        let ours = size_of::<Stats>();
        if caller_size < VERSION_1_SIZE {
            return Err(Error::InvalidArgument(format!(
                "cachalot_stats.struct_size is {caller_size}; set it to sizeof(cachalot_stats) ({ours} for version {CACHALOT_STATS_VERSION}, {VERSION_1_SIZE} for version 1)"
            )));
        }
        let (written, version) = if caller_size >= ours { (ours, CACHALOT_STATS_VERSION) } else { (VERSION_1_SIZE, 1) };
        let mut stats = Stats::from(&a.stats()?);
        (stats.struct_size, stats.version) = (written as u32, version);
        // SAFETY: `out` has `caller_size >= written` writable bytes (caller's promise and the
        // checks above); the source is a local value of at least `written` bytes.
        unsafe { ptr::copy_nonoverlapping(ptr::addr_of!(stats).cast::<u8>(), out.cast::<u8>(), written) };
        Ok(())
    })
}

/// Restarts every peak statistic at its current value
/// (`torch.cuda.reset_peak_memory_stats()`).
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_reset_peak_stats(allocator: *mut SharedAllocator) -> Status {
    boundary::status(|| {
        // SAFETY: the caller promises a live handle or NULL (checked).
        unsafe { borrow(allocator) }?.reset_peak_stats()
    })
}

/// Restarts the accumulated statistics (`allocated` and `freed` of every statistic, and the
/// counts of retries and out-of-memory events), as `torch.cuda.reset_accumulated_memory_stats`.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_reset_accumulated_stats(allocator: *mut SharedAllocator) -> Status {
    boundary::status(|| {
        // SAFETY: the caller promises a live handle or NULL (checked).
        unsafe { borrow(allocator) }?.reset_accumulated_stats()
    })
}

/// Writes to `*out` the size of the largest cached free block, which a request up to that
/// size takes without a device call; 0 when nothing is cached (PyTorch's `cacheInfo`).
///
/// # Safety
/// `allocator` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cachalot_largest_cached_block(allocator: *const SharedAllocator, out: *mut usize) -> Status {
    boundary::status(|| {
        // SAFETY: the caller promises a live handle or NULL (checked).
        let largest = unsafe { borrow(allocator) }?.largest_cached_block()?;
        if out.is_null() {
            return Err(Error::NullPointer("out"));
        }
        // SAFETY: `out` is non-NULL and writable (the caller's promise).
        unsafe { out.write_unaligned(usize::try_from(largest).unwrap_or(usize::MAX)) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_no_padding() {
        assert_eq!(size_of::<Stat>(), 32);
        assert_eq!(size_of::<StatArray>(), 96);
        assert_eq!(size_of::<Stats>(), 8 + 9 * 96 + 5 * 8 + 2 * 32 + 8 + 8);
        assert_eq!(VERSION_1_SIZE, 8 + 9 * 96 + 5 * 8 + 2 * 32 + 8);
    }
}
