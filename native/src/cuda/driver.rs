//! The CUDA driver, found and initialised once per process, and the mapping from driver
//! results to the core's `DeviceError`.
//!
//! cudarc loads libcuda at run time and panics when a library or symbol is missing, so
//! [`init`] checks first: the library must load, every symbol cachalot calls must resolve,
//! and `cuInit` must succeed. The outcome is kept, so later calls cost one atomic load.
//! Invariant: code that calls a driver function has had `init()` return `Ok` in this
//! process.

use std::sync::OnceLock;

use cachalot_core::DeviceError;
use cudarc::driver::sys::{self, CUresult};

use crate::error::Error;

/// Every driver entry point cachalot calls; [`init`] checks that each resolves, so that
/// cudarc's lazy loader can never panic on a missing symbol later.
const SYMBOLS: [&str; 18] = [
    "cuInit",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuPointerGetAttribute",
];

static INIT: OnceLock<Result<(), String>> = OnceLock::new();

/// Loads and initialises the driver (once per process); an error says what is missing.
pub fn init() -> Result<(), Error> {
    INIT.get_or_init(load).clone().map_err(Error::NoDevice)
}

fn load() -> Result<(), String> {
    // SAFETY: only tries to dlopen the driver library under its usual names (running the
    // library's initialisers, which a CUDA driver library is built to allow).
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver: libcuda could not be loaded (is an NVIDIA driver installed, \
                    and is its folder on the loader's path?)"
            .into());
    }
    // SAFETY: is_culib_present just loaded a library under the same names, in the same order,
    // so culib() finds it rather than panicking.
    let lib = unsafe { sys::culib() };
    for symbol in SYMBOLS {
        // SAFETY: the symbol is only looked up, not called; the pointer type is irrelevant.
        if unsafe { lib.get::<*const ()>(symbol.as_bytes()) }.is_err() {
            return Err(format!("the CUDA driver is too old: it lacks {symbol}"));
        }
    }
    // SAFETY: cuInit may be called any number of times, from any thread.
    let r = unsafe { sys::cuInit(0) };
    check("cuInit", r).map_err(|e| format!("the CUDA driver did not initialise: {}", Error::from(e)))
}

/// True when every one of `symbols` resolves in the loaded driver (after a successful
/// [`init`]); optional features check their entry points this way before using them.
pub fn has_symbols(symbols: &[&str]) -> bool {
    if init().is_err() {
        return false;
    }
    // SAFETY: init succeeded, so the library is loaded under the names culib() uses.
    let lib = unsafe { sys::culib() };
    // SAFETY: symbols are only looked up, not called.
    symbols.iter().all(|s| unsafe { lib.get::<*const ()>(s.as_bytes()) }.is_ok())
}

/// `Ok` for `CUDA_SUCCESS`; out of memory as the core's `OutOfMemory`; else the call's name
/// and the driver's code.
#[inline]
pub fn check(call: &'static str, r: CUresult) -> Result<(), DeviceError> {
    match r {
        CUresult::CUDA_SUCCESS => Ok(()),
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(DeviceError::OutOfMemory),
        other => Err(DeviceError::Driver { call, code: other as i32 }),
    }
}

/// Re-exported where it first lived: [`crate::error`] names driver results in its messages,
/// and holds the table itself so that it need not depend on this module (which returns its
/// errors).
pub use crate::error::known_result;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_maps_out_of_memory_and_keeps_codes() {
        assert_eq!(check("cuMemAlloc", CUresult::CUDA_SUCCESS), Ok(()));
        assert_eq!(check("cuMemAlloc", CUresult::CUDA_ERROR_OUT_OF_MEMORY), Err(DeviceError::OutOfMemory));
        assert_eq!(
            check("cuEventQuery", CUresult::CUDA_ERROR_INVALID_HANDLE),
            Err(DeviceError::Driver { call: "cuEventQuery", code: 400 })
        );
    }
}
