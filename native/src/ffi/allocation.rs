//! malloc, free and the calls that shape reuse: `record_stream`, `empty_cache`,
//! `set_memory_fraction`.
//!
//! A stream is the caller's `CUstream` (`cudaStream_t`) passed as `void *`; NULL is the
//! legacy default stream. Invariants: the hot path (a malloc or free the cache serves) does
//! a NULL check, takes the allocator's lock and runs the core — no driver call, no heap
//! allocation; a failing call changes nothing and writes no out-parameter.

use std::ffi::c_void;

use super::boundary;
use super::handle::borrow;
use super::status::Status;
use crate::error::Error;
use crate::sharing::SharedAllocator;

#[inline]
fn stream_id(stream: *mut c_void) -> u64 {
    stream as usize as u64
}

/// Allocates `size` bytes for use on `stream` and stores the address in `*out_ptr`.
///
/// Fails with `CACHALOT_STATUS_INVALID_SIZE` for 0 or an impossible size (`SIZE_MAX`), and
/// `CACHALOT_STATUS_OUT_OF_MEMORY` (with PyTorch's figures in the message) when nothing fits
/// even after releasing the cache.
///
/// # Safety
/// `allocator` must be NULL or a live handle; `out_ptr` must be NULL or writable; for a CUDA
/// allocator `stream` must be NULL or a live stream of its device.
#[no_mangle]
pub unsafe extern "C" fn cachalot_malloc(
    allocator: *mut SharedAllocator,
    size: usize,
    stream: *mut c_void,
    out_ptr: *mut *mut c_void,
) -> Status {
    boundary::status(|| {
        // SAFETY: the caller promises a live handle or NULL (checked).
        let a = unsafe { borrow(allocator) }?;
        if out_ptr.is_null() {
            return Err(Error::NullPointer("out_ptr"));
        }
        let addr = a.malloc(size as u64, stream_id(stream))?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { *out_ptr = addr as usize as *mut c_void };
        Ok(())
    })
}

/// Frees an allocation. Its memory is reused at once on its own stream, and on other streams
/// it was recorded on (`cachalot_record_stream`) once their work queued by now is done.
/// NULL is ignored, as `free(NULL)` is. Fails with `CACHALOT_STATUS_DOUBLE_FREE`,
/// `CACHALOT_STATUS_UNKNOWN_POINTER` or `CACHALOT_STATUS_INTERIOR_POINTER`, changing nothing.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_free(allocator: *mut SharedAllocator, ptr: *mut c_void) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_malloc.
        let a = unsafe { borrow(allocator) }?;
        if ptr.is_null() {
            return Ok(());
        }
        a.free(ptr as usize as u64)
    })
}

/// Marks the allocation at `ptr` as used on `stream` as well as its own: once freed, it is
/// not reused until the work queued on `stream` at the time of the free has completed. A
/// stream of another device is allowed (as PyTorch allows it); an event cannot be recorded
/// across devices, so the free then waits for that stream's queued work before it returns.
///
/// # Safety
/// `allocator` must be NULL or a live handle; for a CUDA allocator `stream` must be NULL or a
/// live stream (of any device) that is still alive when the allocation is freed.
#[no_mangle]
pub unsafe extern "C" fn cachalot_record_stream(
    allocator: *mut SharedAllocator,
    ptr: *mut c_void,
    stream: *mut c_void,
) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_malloc.
        let a = unsafe { borrow(allocator) }?;
        if ptr.is_null() {
            return Err(Error::NullPointer("ptr"));
        }
        a.record_stream(ptr as usize as u64, stream_id(stream))
    })
}

/// Returns every cached segment that holds no allocation to the device, after waiting for
/// pending frees (`torch.cuda.empty_cache()`).
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_empty_cache(allocator: *mut SharedAllocator) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_malloc.
        unsafe { borrow(allocator) }?.empty_cache()
    })
}

/// Limits the memory the allocator may hold to `fraction` (0.0 to 1.0) of the device's
/// total; a request beyond it fails with `CACHALOT_STATUS_OUT_OF_MEMORY`
/// (`torch.cuda.set_per_process_memory_fraction`). 1.0 lifts the limit, as in PyTorch:
/// `garbage_collection_threshold` then does nothing. Other values (NaN included) fail with
/// `CACHALOT_STATUS_INVALID_ARGUMENT`.
///
/// # Safety
/// `allocator` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cachalot_set_memory_fraction(allocator: *mut SharedAllocator, fraction: f64) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_malloc.
        unsafe { borrow(allocator) }?.set_memory_fraction(fraction)
    })
}
