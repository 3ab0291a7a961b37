//! The status every C function returns, with codes fixed forever: a code, once published,
//! keeps its number and meaning; new codes take new numbers.
//!
//! Invariant: [`Status::of`] is the only place a native [`Error`] becomes a code, and
//! `CACHALOT_STATUS_OK` (0) means the call did everything it promised.

use std::ffi::{c_char, c_int};

use cachalot_core::{AllocError, DeviceError};

use crate::error::Error;

/// The result of a cachalot call. The numbers never change.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A pointer argument that must not be NULL was NULL (the allocator handle included).
    NullPointer = 1,
    /// An argument outside what the call accepts (a memory fraction outside [0, 1], a
    /// capacity of 0, a stats struct whose `struct_size` is too small, a 256th stream recorded
    /// on one allocation, ...).
    InvalidArgument = 2,
    /// The config string is invalid: an unknown key or a bad value (the message names it).
    InvalidConfig = 3,
    /// A request of 0 bytes, or of more than 1 TiB (2^40 bytes), larger than any device.
    InvalidSize = 4,
    /// Out of memory: the message gives the figures, as PyTorch's does.
    OutOfMemory = 5,
    /// The pointer is not the start of any block of this allocator: never allocated by it,
    /// or freed already and its memory since given back to the device or merged into the
    /// free block in front of it (a double free cannot always be told from a stranger).
    UnknownPointer = 6,
    /// The pointer is the start of a free block of this allocator: most likely freed
    /// already (nothing remembers what was handed out, so the start of a free remainder
    /// that never was handed out reads the same).
    DoubleFree = 7,
    /// The pointer points inside an allocation, not at its start.
    InteriorPointer = 8,
    /// The caller's buffer is too small for the text; nothing was written.
    BufferTooSmall = 9,
    /// No CUDA driver could be loaded, or there is no CUDA device with that ordinal.
    NoDevice = 10,
    /// A CUDA driver call failed (the message names the call and the driver's error).
    Driver = 11,
    /// The device does not support the operation.
    Unsupported = 12,
    /// A bug in cachalot: a caught panic, or an allocator left unusable by one.
    Internal = 13,
}

impl Status {
    /// The code for a native error.
    pub fn of(e: &Error) -> Status {
        match e {
            Error::Alloc(a) => match a {
                AllocError::OutOfMemory(_) => Status::OutOfMemory,
                AllocError::ZeroSize | AllocError::TooLarge { .. } => Status::InvalidSize,
                AllocError::UnknownPointer { .. } => Status::UnknownPointer,
                AllocError::DoubleFree { .. } => Status::DoubleFree,
                AllocError::InteriorPointer { .. } => Status::InteriorPointer,
                AllocError::InvalidFraction(_)
                | AllocError::TooManyStreams { .. }
                | AllocError::NotCached { .. }
                | AllocError::UnknownPool { .. }
                | AllocError::PoolNotInUse { .. }
                | AllocError::NoCaptureUnderway => Status::InvalidArgument,
                AllocError::Device(DeviceError::OutOfMemory) => Status::OutOfMemory,
                AllocError::Device(DeviceError::Driver { .. }) => Status::Driver,
                AllocError::Device(DeviceError::Unsupported(_)) => Status::Unsupported,
            },
            Error::Config(_) => Status::InvalidConfig,
            Error::NoDevice(_) => Status::NoDevice,
            Error::NullPointer(_) => Status::NullPointer,
            Error::InvalidArgument(_) => Status::InvalidArgument,
            Error::BufferTooSmall { .. } | Error::ArrayTooSmall { .. } => Status::BufferTooSmall,
            Error::Poisoned | Error::Panic(_) => Status::Internal,
        }
    }
}

impl Status {
    /// The name the header gives this status, e.g. `CACHALOT_STATUS_DOUBLE_FREE`.
    pub fn name(self) -> &'static std::ffi::CStr {
        NAMES[self as usize].1
    }
}

/// Every status with its name, in code order.
const NAMES: [(Status, &std::ffi::CStr); 14] = [
    (Status::Ok, c"CACHALOT_STATUS_OK"),
    (Status::NullPointer, c"CACHALOT_STATUS_NULL_POINTER"),
    (Status::InvalidArgument, c"CACHALOT_STATUS_INVALID_ARGUMENT"),
    (Status::InvalidConfig, c"CACHALOT_STATUS_INVALID_CONFIG"),
    (Status::InvalidSize, c"CACHALOT_STATUS_INVALID_SIZE"),
    (Status::OutOfMemory, c"CACHALOT_STATUS_OUT_OF_MEMORY"),
    (Status::UnknownPointer, c"CACHALOT_STATUS_UNKNOWN_POINTER"),
    (Status::DoubleFree, c"CACHALOT_STATUS_DOUBLE_FREE"),
    (Status::InteriorPointer, c"CACHALOT_STATUS_INTERIOR_POINTER"),
    (Status::BufferTooSmall, c"CACHALOT_STATUS_BUFFER_TOO_SMALL"),
    (Status::NoDevice, c"CACHALOT_STATUS_NO_DEVICE"),
    (Status::Driver, c"CACHALOT_STATUS_DRIVER"),
    (Status::Unsupported, c"CACHALOT_STATUS_UNSUPPORTED"),
    (Status::Internal, c"CACHALOT_STATUS_INTERNAL"),
];

/// The name of a status code, e.g. `"CACHALOT_STATUS_DOUBLE_FREE"`; `"CACHALOT_STATUS_UNKNOWN"`
/// for a number that is no status. The string is static: never free it.
#[no_mangle]
pub extern "C" fn cachalot_status_name(status: c_int) -> *const c_char {
    NAMES.iter().find(|(s, _)| *s as c_int == status).map_or(c"CACHALOT_STATUS_UNKNOWN", |(_, n)| n).as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes are part of the ABI: this list may grow, never change.
    #[test]
    fn codes_are_fixed() {
        let fixed = [
            (Status::Ok, 0),
            (Status::NullPointer, 1),
            (Status::InvalidArgument, 2),
            (Status::InvalidConfig, 3),
            (Status::InvalidSize, 4),
            (Status::OutOfMemory, 5),
            (Status::UnknownPointer, 6),
            (Status::DoubleFree, 7),
            (Status::InteriorPointer, 8),
            (Status::BufferTooSmall, 9),
            (Status::NoDevice, 10),
            (Status::Driver, 11),
            (Status::Unsupported, 12),
            (Status::Internal, 13),
        ];
        for (i, (status, code)) in fixed.into_iter().enumerate() {
            assert_eq!(status as i32, code);
            assert_eq!(NAMES[i].0, status);
        }
    }

    #[test]
    fn names_are_the_header_names() {
        // SAFETY: cachalot_status_name returns a static NUL-terminated string.
        let name = |c| unsafe { std::ffi::CStr::from_ptr(cachalot_status_name(c)) }.to_str().unwrap();
        assert_eq!(name(7), "CACHALOT_STATUS_DOUBLE_FREE");
        assert_eq!(name(0), "CACHALOT_STATUS_OK");
        assert_eq!(name(99), "CACHALOT_STATUS_UNKNOWN");
        assert_eq!(name(-1), "CACHALOT_STATUS_UNKNOWN");
    }
}
