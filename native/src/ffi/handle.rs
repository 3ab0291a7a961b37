//! The opaque allocator handle (`cachalot_allocator` in C) and its `_new`/`_free` pairs.
//!
//! A handle is a boxed [`SharedAllocator`] handed to C as a pointer. Invariants: a handle
//! returned by a `_new` function stays valid until `cachalot_allocator_free`; every other
//! function checks it for NULL first and then only borrows it; destroying a CUDA allocator
//! returns all its device memory (live allocations included) to the driver.

use std::ffi::{c_char, c_int, CStr};

use cachalot_core::Config;

use super::boundary;
use super::status::Status;
use crate::config_env;
use crate::error::Error;
use crate::shared_allocator::SharedAllocator;

/// Reads a config argument: NULL means `CACHALOT_ALLOC_CONF` (the defaults when unset).
///
/// # Safety
/// `config`, when not NULL, must point to a NUL-terminated string.
unsafe fn read_config(config: *const c_char) -> Result<Config, Error> {
    if config.is_null() {
        return config_env::from_env();
    }
    // SAFETY: the caller promises a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(config) };
    config_env::parse(text.to_str().map_err(|_| Error::Config("the config string is not valid UTF-8".into()))?)
}

/// Borrows the allocator behind a handle.
///
/// # Safety
/// `allocator`, when not NULL, must be a live handle from a `_new` function.
#[inline]
pub(crate) unsafe fn borrow<'a>(allocator: *const SharedAllocator) -> Result<&'a SharedAllocator, Error> {
    // SAFETY: a non-NULL handle is a live Box<SharedAllocator> (the caller's promise).
    unsafe { allocator.as_ref() }.ok_or(Error::NullPointer("the allocator handle"))
}

/// Checks `out`, then makes an allocator and stores it in `*out` (on success only).
///
/// # Safety
/// `out`, when not NULL, must point to a writable handle pointer.
unsafe fn create(
    out: *mut *mut SharedAllocator,
    make: impl FnOnce() -> Result<SharedAllocator, Error>,
) -> Result<(), Error> {
    if out.is_null() {
        return Err(Error::NullPointer("out"));
    }
    let allocator = Box::new(make()?);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { *out = Box::into_raw(allocator) };
    Ok(())
}

/// Creates an allocator for CUDA device `device` (its ordinal) and stores its handle in
/// `*out`.
///
/// `config` uses `PYTORCH_CUDA_ALLOC_CONF` syntax (`"policy:pytorch,max_split_size_mb:128"`);
/// NULL reads the `CACHALOT_ALLOC_CONF` environment variable, and `""` gives the defaults.
/// The config is checked before the driver is touched. Returns `CACHALOT_STATUS_NO_DEVICE`
/// when no CUDA driver can be loaded or the device does not exist, and
/// `CACHALOT_STATUS_INVALID_CONFIG` for a bad config; `*out` is written only on success.
///
/// # Safety
/// `config` must be NULL or a NUL-terminated string; `out` must be NULL or point to a
/// writable `cachalot_allocator *`.
#[no_mangle]
pub unsafe extern "C" fn cachalot_allocator_new_cuda(
    device: c_int,
    config: *const c_char,
    out: *mut *mut SharedAllocator,
) -> Status {
    boundary::status(|| {
        // SAFETY: the caller's promises about `config` and `out` are passed on unchanged.
        unsafe { create(out, || SharedAllocator::cuda(device, read_config(config)?)) }
    })
}

/// Creates an allocator over a simulated device of `capacity` bytes (no GPU needed: for
/// tests, examples and trace studies) and stores its handle in `*out`. Addresses it returns
/// look like device addresses but are not memory: never dereference them. `capacity` is 1
/// byte to 1 TiB (the simulated address space); other values are
/// `CACHALOT_STATUS_INVALID_ARGUMENT`. `config` is read as by `cachalot_allocator_new_cuda`.
///
/// # Safety
/// As for `cachalot_allocator_new_cuda`.
#[no_mangle]
pub unsafe extern "C" fn cachalot_allocator_new_simulated(
    capacity: u64,
    config: *const c_char,
    out: *mut *mut SharedAllocator,
) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_allocator_new_cuda.
        unsafe { create(out, || SharedAllocator::simulated(capacity, read_config(config)?)) }
    })
}

/// Destroys an allocator. For a CUDA allocator every segment goes back to the driver, so
/// every pointer it handed out becomes invalid, freed or not. NULL is ignored.
///
/// # Safety
/// `allocator` must be NULL or a handle from a `_new` function that has not been destroyed,
/// and no other thread may be using it.
#[no_mangle]
pub unsafe extern "C" fn cachalot_allocator_free(allocator: *mut SharedAllocator) {
    boundary::value_or((), || {
        if !allocator.is_null() {
            // SAFETY: a live handle is a pointer from Box::into_raw, given back once (caller's
            // promise), with no other user.
            drop(unsafe { Box::from_raw(allocator) });
        }
        Ok(())
    })
}
