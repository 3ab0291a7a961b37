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
use crate::sharing::registry;
use crate::sharing::SharedAllocator;

/// Reads a config argument: NULL means `CACHALOT_ALLOC_CONF` (the defaults when unset).
///
/// # Safety
/// `config`, when not NULL, must point to a NUL-terminated string.
pub(super) unsafe fn read_config(config: *const c_char) -> Result<Config, Error> {
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
    match unsafe { allocator.as_ref() } {
        Some(a) => Ok(a),
        // Built only here: `ok_or` would build the error and drop it on every call.
        None => Err(Error::NullPointer("the allocator handle")),
    }
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
/// look like device addresses but are not memory: never dereference them. Every simulated
/// allocator hands out the same addresses (so replays are reproducible): a pointer of one
/// may be taken by another as its own, so keep each pointer with its allocator. `capacity` is 1
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

/// Creates a simulated allocator, as `cachalot_allocator_new_simulated` does, whose device
/// places its segments where a recorded run's device placed them: `placements` holds `count`
/// pairs of `uint64_t` (address, size), in the order of the run's segment allocations (a
/// snapshot's `segment_alloc` entries). Replaying the run's history on it then reproduces the
/// run's decisions: best fit breaks ties between equal cached blocks by address, so it
/// depends on where segments lie. Each segment allocation takes the next pair if the size
/// matches, the address is a non-zero multiple of 512, the range ends at or below 2^53 and
/// overlaps no other segment or reserved range; the first pair that does not fit ends the
/// list, and later segments go
/// where the simulated device puts them. Only classic segments follow them: virtual-memory
/// ranges (`policy:cachalot`, expandable segments) lie where the simulated device reserves
/// them, and decide the same wherever they lie. `placements` may be NULL only when `count` is 0;
/// `count` above `PTRDIFF_MAX / 16` is `CACHALOT_STATUS_INVALID_ARGUMENT`. Arguments are checked
/// in this order: `out`, `config`, `placements` and `count`, `capacity`.
///
/// # Safety
/// As for `cachalot_allocator_new_cuda`; `placements`, when not NULL, must point to `2 *
/// count` readable `uint64_t` values.
#[no_mangle]
pub unsafe extern "C" fn cachalot_allocator_new_simulated_placed(
    capacity: u64,
    config: *const c_char,
    placements: *const u64,
    count: usize,
    out: *mut *mut SharedAllocator,
) -> Status {
    boundary::status(|| {
        let pairs = || {
            if count == 0 {
                return Ok(Vec::new());
            }
            if placements.is_null() {
                return Err(Error::NullPointer("placements"));
            }
            if count > isize::MAX as usize / 16 {
                return Err(Error::InvalidArgument(format!(
                    "count {count} is more pairs of 64-bit values than memory can hold (at most PTRDIFF_MAX / 16)"
                )));
            }
            // SAFETY: non-NULL, and the caller promises 2 * count readable, aligned values;
            // the count was bounded so that their bytes fit in isize, as slices require.
            let values = unsafe { std::slice::from_raw_parts(placements, 2 * count) };
            Ok(values.chunks_exact(2).map(|pair| (pair[0], pair[1])).collect())
        };
        // SAFETY: as in cachalot_allocator_new_cuda. Checked in this order: out, config,
        // placements, capacity.
        unsafe { create(out, || SharedAllocator::simulated_placed(capacity, read_config(config)?, pairs()?)) }
    })
}

/// Destroys an allocator. For a CUDA allocator every segment goes back to the driver, so
/// every pointer it handed out becomes invalid, freed or not. NULL is ignored, and so is a
/// borrowed handle of `cachalot_torch_allocator` (it lives until the process ends; the
/// thread's last error says it was refused).
///
/// # Safety
/// `allocator` must be NULL, a handle of `cachalot_torch_allocator` or a handle from a
/// `_new` function that has not been destroyed, and no other thread may be using it.
#[no_mangle]
pub unsafe extern "C" fn cachalot_allocator_free(allocator: *mut SharedAllocator) {
    boundary::value_or((), || {
        if registry::created().any(|a| std::ptr::eq(a, allocator)) {
            return Err(Error::InvalidArgument(
                "the handle is borrowed from cachalot_torch_allocator and lives until the process ends; it cannot be freed".into(),
            ));
        }
        if !allocator.is_null() {
            // SAFETY: a live handle is a pointer from Box::into_raw, given back once (caller's
            // promise), with no other user.
            drop(unsafe { Box::from_raw(allocator) });
        }
        Ok(())
    })
}
