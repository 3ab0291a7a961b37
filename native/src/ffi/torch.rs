//! PyTorch's entry points, for `torch.cuda.memory.CUDAPluggableAllocator`:
//!
//! ```python
//! alloc = torch.cuda.memory.CUDAPluggableAllocator(
//!     "libcachalot.so", "cachalot_torch_malloc", "cachalot_torch_free")
//! torch.cuda.memory.change_current_allocator(alloc)
//! ```
//!
//! Each CUDA device gets one process-wide allocator, created on first use with the config in
//! `CACHALOT_ALLOC_CONF` (see `registry.rs`); the `device` argument picks it, and every driver
//! call it makes runs with that device's primary context current, whatever context the
//! calling thread has (PyTorch may free a tensor of device 1 while device 0 is current).
//! These functions cannot return a status, so a failure is kept as the thread's last error
//! (`cachalot_last_error_message`) and also printed on stderr, since PyTorch has no way to
//! report it. Invariant: no panic crosses into
//! PyTorch; a malloc that fails returns NULL.
//!
//! `cachalot_torch_allocator` (and `cachalot_torch_device_allocator`, which creates it) hands
//! out a borrowed handle to a device's process-wide allocator, so the statistics, summary and snapshot functions of the C ABI can read what
//! PyTorch's allocations did (`native/python/cachalot_torch.py` does).

use std::ffi::{c_int, c_void};

use cachalot_core::AllocError;

use super::boundary;
use super::status::Status;
use crate::cuda::CudaDevice;
use crate::error::Error;
use crate::sharing::registry;
use crate::sharing::SharedAllocator;

/// Prints a failure on stderr. A stderr that cannot be written (closed pipe, full disk) is
/// ignored: `eprintln!` would panic there, and a panic here would abort the process.
#[cold]
fn report(call: &str, status: super::Status) {
    use std::io::Write;
    let message = super::last_error::get();
    let _ = writeln!(std::io::stderr(), "cachalot: {call} failed ({}): {message}", status.name().to_string_lossy());
}

/// Allocates `size` bytes on CUDA device `device` for use on `stream` (PyTorch's `ssize_t
/// size, int device, cudaStream_t stream`). Returns NULL for a size of 0 (PyTorch's
/// convention, not an error) and on failure (the message is printed and kept as the last
/// error). The first call for a device creates its allocator with the config in
/// `CACHALOT_ALLOC_CONF`; when that fails (a bad config, no driver), every later call for
/// that device fails with the same message until the process ends, so set the variable
/// before the first allocation.
///
/// # Safety
/// `stream` must be NULL or a live stream of device `device`; PyTorch guarantees both.
#[no_mangle]
pub unsafe extern "C" fn cachalot_torch_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    let result = boundary::run(|| {
        let size = u64::try_from(size).map_err(|_| Error::InvalidArgument(format!("negative size {size}")))?;
        registry::get(device)?.malloc(size, stream as usize as u64)
    });
    match result {
        Ok(addr) => addr as usize as *mut c_void,
        Err(status) => {
            report("cachalot_torch_malloc", status);
            std::ptr::null_mut()
        }
    }
}

/// Allocates as `cachalot_torch_malloc` does (creating the device's allocator on first use),
/// but returns the status and leaves the message to the caller, printing nothing: for
/// PyTorch's allocator interface (`native/torch/`), which turns `CACHALOT_STATUS_OUT_OF_MEMORY`
/// into `torch.OutOfMemoryError`. `*out` is written on success only; a size of 0 is
/// `CACHALOT_STATUS_INVALID_SIZE`.
///
/// # Safety
/// `stream` must be NULL or a live stream of device `device`; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cachalot_torch_malloc_status(
    size: usize,
    device: c_int,
    stream: *mut c_void,
    out: *mut *mut c_void,
) -> super::Status {
    boundary::status(|| {
        if out.is_null() {
            return Err(Error::NullPointer("out"));
        }
        let addr = registry::get(device)?.malloc(size as u64, stream as usize as u64)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { *out = addr as usize as *mut c_void };
        Ok(())
    })
}

/// Frees an allocation of `cachalot_torch_malloc` (`size` and `stream` are PyTorch's and are
/// not needed: the allocator knows both). NULL is ignored.
///
/// # Safety
/// `ptr` must be NULL or an allocation of `cachalot_torch_malloc` on `device`.
#[no_mangle]
pub unsafe extern "C" fn cachalot_torch_free(ptr: *mut c_void, size: isize, device: c_int, stream: *mut c_void) {
    let _ = (size, stream);
    if ptr.is_null() {
        return;
    }
    if let Err(status) = boundary::run(|| registry::get(device)?.free(ptr as usize as u64)) {
        report("cachalot_torch_free", status);
    }
}

/// Returns the unused cached memory of every device's allocator to the driver
/// (`torch.cuda.empty_cache()`).
#[no_mangle]
pub extern "C" fn cachalot_torch_empty_cache() {
    if let Err(status) = boundary::run(|| registry::created().try_for_each(|a| a.empty_cache())) {
        report("cachalot_torch_empty_cache", status);
    }
}

/// Limits device `device`'s allocator to `fraction` of the device's memory
/// (`torch.cuda.set_per_process_memory_fraction`), creating the allocator if needed.
#[no_mangle]
pub extern "C" fn cachalot_torch_set_memory_fraction(fraction: f64, device: c_int) {
    if let Err(status) = boundary::run(|| registry::get(device)?.set_memory_fraction(fraction)) {
        report("cachalot_torch_set_memory_fraction", status);
    }
}

/// Marks the allocation at `ptr` as used on `stream` too (`Tensor.record_stream`). PyTorch
/// does not say which device the allocation is on: with one device's allocator created, it is
/// that one; with several, the driver's pointer attributes name the device (unified
/// addressing: no context needed), and that device's allocator takes the call. An address
/// the driver does not know, or of a device cachalot has no allocator for, is an unknown
/// pointer. A stream of another device is allowed, as in PyTorch: the free then waits for
/// that stream's queued work (an event cannot be recorded across devices).
///
/// # Safety
/// `ptr` must be an allocation of `cachalot_torch_malloc`; `stream` a live stream.
#[no_mangle]
pub unsafe extern "C" fn cachalot_torch_record_stream(ptr: *mut c_void, stream: *mut c_void) {
    let addr = ptr as usize as u64;
    let result = boundary::run(|| {
        if ptr.is_null() {
            return Err(Error::NullPointer("ptr"));
        }
        let mut created = registry::created();
        let allocator = match (created.next(), created.next()) {
            (Some(only), None) => only,
            (None, _) => return Err(AllocError::UnknownPointer { addr }.into()),
            _ => CudaDevice::ordinal_of(addr)
                .ok()
                .and_then(registry::existing)
                .ok_or(AllocError::UnknownPointer { addr })?,
        };
        allocator.record_stream(addr, stream as usize as u64)
    });
    if let Err(status) = result {
        report("cachalot_torch_record_stream", status);
    }
}

/// Stores in `*out` the process-wide allocator that the functions above use for CUDA device
/// `device`, or NULL when that device has none: nothing was allocated on it through
/// `cachalot_torch_malloc` and no memory fraction was set for it, or creating it failed (the
/// failing call's message said why). Never creates one, so it touches neither the driver nor
/// the device.
///
/// The handle is borrowed and lives until the process ends: pass it to the functions that
/// read or act on an allocator (`cachalot_get_stats`, `cachalot_memory_summary`,
/// `cachalot_snapshot_json`, `cachalot_reset_peak_stats`, ...), never to
/// `cachalot_allocator_free`. Fails with `CACHALOT_STATUS_INVALID_ARGUMENT` for a device
/// ordinal outside 0 to 63.
///
/// # Safety
/// `out` must be NULL or point to a writable `cachalot_allocator *`.
#[no_mangle]
pub unsafe extern "C" fn cachalot_torch_allocator(device: c_int, out: *mut *mut SharedAllocator) -> Status {
    boundary::status(|| {
        if out.is_null() {
            return Err(Error::NullPointer("out"));
        }
        if usize::try_from(device).map_or(true, |d| d >= registry::MAX_DEVICES) {
            return Err(Error::InvalidArgument(format!(
                "CUDA device {device} is out of range (0 to {})",
                registry::MAX_DEVICES - 1
            )));
        }
        let handle = registry::existing(device)
            .map_or(std::ptr::null_mut(), |a| a as *const SharedAllocator as *mut SharedAllocator);
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { *out = handle };
        Ok(())
    })
}

/// Stores in `*out` the process-wide allocator of CUDA device `device`, creating it on first
/// use as `cachalot_torch_malloc` does: for PyTorch's allocator interface (`native/torch/`),
/// whose private pools (`cachalot_pool_create`) may be made before the device's first
/// allocation. The handle is borrowed, as `cachalot_torch_allocator`'s. Fails with
/// `CACHALOT_STATUS_NO_DEVICE` for a device ordinal outside 0 to 63 or without a usable driver,
/// and `CACHALOT_STATUS_INVALID_CONFIG` for a bad `CACHALOT_ALLOC_CONF`.
///
/// # Safety
/// `out` must be NULL or point to a writable `cachalot_allocator *`.
#[no_mangle]
pub unsafe extern "C" fn cachalot_torch_device_allocator(device: c_int, out: *mut *mut SharedAllocator) -> Status {
    boundary::status(|| {
        if out.is_null() {
            return Err(Error::NullPointer("out"));
        }
        let a = registry::get(device)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { *out = a as *const SharedAllocator as *mut SharedAllocator };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_lookup_checks_its_arguments_and_creates_nothing() {
        let mut out = std::ptr::dangling_mut::<SharedAllocator>();
        // SAFETY: `out` is a valid, writable local.
        unsafe {
            assert_eq!(cachalot_torch_allocator(0, std::ptr::null_mut()), Status::NullPointer);
            assert_eq!(cachalot_torch_allocator(-1, &mut out), Status::InvalidArgument);
            assert_eq!(cachalot_torch_allocator(registry::MAX_DEVICES as c_int, &mut out), Status::InvalidArgument);
            assert_eq!(out, std::ptr::dangling_mut::<SharedAllocator>(), "a failing call leaves *out alone");
            // No test creates an allocator for the last device: the lookup finds none.
            let last = registry::MAX_DEVICES as c_int - 1;
            assert_eq!(cachalot_torch_allocator(last, &mut out), Status::Ok);
        }
        assert!(out.is_null());
    }
}
