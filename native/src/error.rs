//! Everything a native call can fail with: the core's errors plus what only the native layer
//! knows (no CUDA driver, a NULL argument, a buffer too small, a poisoned lock, a caught
//! panic). The C ABI maps each variant to a fixed status code (`ffi::status`). It also names
//! the CUDA driver's result codes for messages ([`known_result`]), from cudarc's table alone:
//! `cuda` returns these errors, so this module must not depend on `cuda`.
//!
//! Invariant: every message names the problem and, where there is one, the value at fault;
//! a failing call has left the allocator as it was.

use std::fmt;

use cachalot_core::{AllocError, DeviceError};
use cudarc::driver::sys::CUresult;

/// A native call's failure.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// The allocator refused the call (out of memory, bad size, bad pointer, bad fraction,
    /// or a device error).
    Alloc(AllocError),
    /// The config string is invalid; the message names the key and what it allows.
    Config(String),
    /// No usable CUDA driver, or no such device: the message says which.
    NoDevice(String),
    /// A pointer argument that must not be NULL was NULL; names the argument.
    NullPointer(&'static str),
    /// An argument outside what the call accepts.
    InvalidArgument(String),
    /// A caller's buffer is too small for the text; `needed` counts the terminating NUL.
    BufferTooSmall {
        /// Bytes the text needs, NUL included.
        needed: usize,
        /// Bytes the caller offered.
        given: usize,
    },
    /// A caller's array has fewer rows than the answer (`cachalot_blocks`).
    ArrayTooSmall {
        /// Rows the answer has.
        needed: usize,
        /// Rows the caller offered.
        given: usize,
    },
    /// An earlier call panicked while holding the allocator's lock; its state cannot be
    /// trusted, so every later call is refused.
    Poisoned,
    /// A call panicked (a bug in cachalot); the panic was caught at the ABI boundary.
    Panic(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Alloc(AllocError::Device(DeviceError::Driver { call, code })) if call.starts_with("cu") => {
                write!(f, "device error: {call} failed with CUDA driver error {code}")?;
                match known_result(*code) {
                    Some(result) => write!(f, " ({result:?})"),
                    None => Ok(()),
                }
            }
            Error::Alloc(e) => e.fmt(f),
            Error::Config(m) => f.write_str(m),
            Error::NoDevice(m) => f.write_str(m),
            Error::NullPointer(what) => write!(f, "{what} is NULL"),
            Error::InvalidArgument(m) => f.write_str(m),
            Error::BufferTooSmall { needed, given } => {
                write!(f, "the buffer holds {given} bytes; the text needs {needed} (terminating NUL included)")
            }
            Error::ArrayTooSmall { needed, given } => {
                write!(f, "the array holds {given} rows; the answer has {needed}")
            }
            Error::Poisoned => f.write_str(
                "the allocator is unusable: an earlier call panicked while holding its lock (a bug in cachalot)",
            ),
            Error::Panic(m) => write!(f, "internal error (a bug in cachalot): {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<AllocError> for Error {
    fn from(e: AllocError) -> Self {
        Error::Alloc(e)
    }
}

impl From<DeviceError> for Error {
    fn from(e: DeviceError) -> Self {
        Error::Alloc(AllocError::Device(e))
    }
}

/// The driver's result for a code that cachalot's calls can return (its `Debug` form is the
/// driver's name for it), for messages; `None` for other codes.
pub fn known_result(code: i32) -> Option<CUresult> {
    use CUresult::*;
    const KNOWN: [CUresult; 16] = [
        CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_NOT_INITIALIZED,
        CUDA_ERROR_DEINITIALIZED,
        CUDA_ERROR_NO_DEVICE,
        CUDA_ERROR_INVALID_DEVICE,
        CUDA_ERROR_INVALID_CONTEXT,
        CUDA_ERROR_CONTEXT_IS_DESTROYED,
        CUDA_ERROR_INVALID_HANDLE,
        CUDA_ERROR_NOT_READY,
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_NOT_PERMITTED,
        CUDA_ERROR_NOT_SUPPORTED,
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        CUDA_ERROR_UNKNOWN,
    ];
    KNOWN.into_iter().find(|&r| r as i32 == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_codes() {
        assert_eq!(format!("{:?}", known_result(2).unwrap()), "CUDA_ERROR_OUT_OF_MEMORY");
        assert_eq!(known_result(600), Some(CUresult::CUDA_ERROR_NOT_READY));
        assert_eq!(known_result(-5), None);
    }
}
