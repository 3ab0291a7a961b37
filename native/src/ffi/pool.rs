//! Private pools: memory set apart for CUDA graphs (PyTorch's `beginAllocateToPool` and
//! friends, torch.compile's CUDA graph trees, `torch.cuda.MemPool`), or for any caller that
//! wants a group of allocations whose memory no other allocation reuses.
//!
//! A pool's allocations are freed with `cachalot_free`, as any other; their blocks are cached
//! in the pool and reused only by allocations made into it. A pool's memory counts in the
//! allocator's statistics. Pools need the allocator behind one lock: with `lock_per_stream:True`
//! every call here fails with `CACHALOT_STATUS_INVALID_ARGUMENT`. An id that names no pool (never
//! made, or released and given back) fails the same way. Invariants: those of the C ABI
//! (`ffi/mod.rs`): out-parameters written only on success, and a failing call changes nothing.

use std::ffi::c_void;

use super::boundary;
use super::handle::borrow;
use super::status::Status;
use crate::error::Error;
use crate::sharing::SharedAllocator;

/// Makes a private pool, with one use, and stores its id in `*out_pool`: never 0, and given
/// again only after every other id (about 4 billion pools later), once that first pool is gone.
///
/// # Safety
/// `allocator` must be NULL or a live handle; `out_pool` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cachalot_pool_create(allocator: *mut SharedAllocator, out_pool: *mut u32) -> Status {
    boundary::status(|| {
        // SAFETY: the caller promises a live handle or NULL (checked).
        let a = unsafe { borrow(allocator) }?;
        if out_pool.is_null() {
            return Err(Error::NullPointer("out_pool"));
        }
        let pool = a.create_pool()?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { *out_pool = pool };
        Ok(())
    })
}

/// Adds a use to `pool` (PyTorch's `ensureExistsAndIncrefPool`).
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_pool_retain(allocator: *mut SharedAllocator, pool: u32) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        unsafe { borrow(allocator) }?.retain_pool(pool)
    })
}

/// Ends a use of `pool` (PyTorch's `releasePool`). With no use left the pool takes no
/// allocation; its allocations still live stay valid, and the next `cachalot_empty_cache` (or a
/// request that needs the memory) returns its cached segments to the device.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_pool_release(allocator: *mut SharedAllocator, pool: u32) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        unsafe { borrow(allocator) }?.release_pool(pool)
    })
}

/// Stores the uses of `pool` not yet ended in `*out_count` (PyTorch's `getPoolUseCount`).
///
/// # Safety
/// `allocator` must be NULL or a live handle; `out_count` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cachalot_pool_use_count(
    allocator: *mut SharedAllocator,
    pool: u32,
    out_count: *mut u32,
) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        let a = unsafe { borrow(allocator) }?;
        if out_count.is_null() {
            return Err(Error::NullPointer("out_count"));
        }
        let count = a.pool_use_count(pool)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { *out_count = count };
        Ok(())
    })
}

/// Sends every later `cachalot_malloc` on `stream` to `pool`, until
/// `cachalot_pool_end_allocate` or the pool's last use ends. A pool takes one stream at a time.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_pool_begin_allocate(
    allocator: *mut SharedAllocator,
    pool: u32,
    stream: *mut c_void,
) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        unsafe { borrow(allocator) }?.begin_allocate_to_pool(pool, stream as usize as u64)
    })
}

/// Ends the routing `cachalot_pool_begin_allocate` began.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_pool_end_allocate(allocator: *mut SharedAllocator, pool: u32) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        unsafe { borrow(allocator) }?.end_allocate_to_pool(pool)
    })
}

/// A CUDA graph capture begins on the allocator's device: until the matching
/// `cachalot_capture_end`, no pending free's events are queried, and a block freed while used
/// on other streams (`cachalot_record_stream`) records its events only once no capture is
/// underway, as PyTorch's allocator does (captures nest). Refused with `lock_per_stream:True`,
/// as private pools are.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_capture_begin(allocator: *mut SharedAllocator) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        unsafe { borrow(allocator) }?.begin_capture()
    })
}

/// Ends a capture `cachalot_capture_begin` began; after the last one, the deferred frees record
/// their events on the streams used before the captures (a block used only during them is
/// free at once). `CACHALOT_STATUS_INVALID_ARGUMENT` when no capture is underway.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_capture_end(allocator: *mut SharedAllocator) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        unsafe { borrow(allocator) }?.end_capture()
    })
}

/// Allocates `size` bytes for use on `stream` out of `pool` and stores the address in
/// `*out_ptr`; fails as `cachalot_malloc` does, and for a pool with no use left.
///
/// # Safety
/// `allocator` must be NULL or a live handle; `out_ptr` must be NULL or writable; for a CUDA
/// allocator `stream` must be NULL or a live stream of its device.
#[no_mangle]
pub unsafe extern "C" fn cachalot_pool_malloc(
    allocator: *mut SharedAllocator,
    pool: u32,
    size: usize,
    stream: *mut c_void,
    out_ptr: *mut *mut c_void,
) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        let a = unsafe { borrow(allocator) }?;
        if out_ptr.is_null() {
            return Err(Error::NullPointer("out_ptr"));
        }
        let addr = a.malloc_in_pool(pool, size as u64, stream as usize as u64)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { *out_ptr = addr as usize as *mut c_void };
        Ok(())
    })
}

/// Returns the unsplit cached segments of `pool` to the device, after waiting for pending
/// frees, once the pool has no use left (PyTorch's `emptyCache` of a pool, which
/// `torch.cuda.MemPool`'s destructor calls after releasing it). A pool still in use keeps its
/// cache, as in PyTorch: a CUDA graph replays into it.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_pool_empty_cache(allocator: *mut SharedAllocator, pool: u32) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        unsafe { borrow(allocator) }?.empty_pool_cache(pool)
    })
}

/// `cachalot_allocate_at` within `pool`: the `size` bytes at `ptr` are cut out of a cached block
/// of that pool (setting it back to a checkpoint, as CUDA graph trees do), else it fails with
/// `CACHALOT_STATUS_INVALID_ARGUMENT`, changing nothing.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_pool_allocate_at(
    allocator: *mut SharedAllocator,
    pool: u32,
    ptr: *mut c_void,
    size: usize,
    requested: usize,
) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_pool_create.
        let a = unsafe { borrow(allocator) }?;
        a.allocate_in_pool_at(pool, ptr as usize as u64, size as u64, requested as u64).map(|_| ())
    })
}
