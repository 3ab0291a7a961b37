//! Errors the allocator returns, each with a message that names the problem.
//!
//! An error never leaves the allocator changed: a call that fails has done nothing (an
//! out-of-memory request may have returned cached segments to the device first, as
//! PyTorch does, which changes no live allocation).

use core::fmt;

use crate::base::device::DeviceError;
pub use crate::base::oom_report::{FreeSpot, OomReport, SegmentUse};

/// Everything an allocator call can fail with.
#[derive(Clone, Debug, PartialEq)]
pub enum AllocError {
    /// Nothing fits and the device (or the memory fraction) allows no more.
    OutOfMemory(alloc::boxed::Box<OomReport>),
    /// A request of zero bytes.
    ZeroSize,
    /// A request larger than any device could hold.
    TooLarge {
        /// Bytes asked for.
        requested: u64,
    },
    /// The address is not one this allocator handed out.
    UnknownPointer {
        /// The address given.
        addr: u64,
    },
    /// The address was handed out, but has been freed already.
    DoubleFree {
        /// The address given.
        addr: u64,
    },
    /// The address points inside an allocation, not at its start.
    InteriorPointer {
        /// The address given.
        addr: u64,
        /// Start of the allocation it points into.
        block: u64,
    },
    /// A memory fraction outside [0, 1].
    InvalidFraction(f64),
    /// An allocation was recorded on more streams than one block can track (255).
    TooManyStreams {
        /// The allocation.
        addr: u64,
    },
    /// No cached free block holds the range asked for ([`crate::Allocator::allocate_at`]).
    NotCached {
        /// Start of the range.
        addr: u64,
        /// Bytes of the range.
        size: u64,
    },
    /// No private pool has this id: never created, or dropped after its last release.
    UnknownPool {
        /// The id given.
        pool: u32,
    },
    /// A private pool whose last use was released: it takes no more allocations (it gives its
    /// memory back at the next release of cached memory).
    PoolNotInUse {
        /// The id given.
        pool: u32,
    },
    /// A capture was ended that had not begun ([`crate::Allocator::end_capture`]), or more
    /// captures were begun than can be counted.
    NoCaptureUnderway,
    /// The device refused a call for a reason other than memory.
    Device(DeviceError),
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::OutOfMemory(r) => r.fmt(f),
            AllocError::ZeroSize => f.write_str("cannot allocate 0 bytes"),
            AllocError::TooLarge { requested } => {
                write!(f, "cannot allocate {requested} bytes: larger than any device")
            }
            AllocError::UnknownPointer { addr } => {
                write!(f, "pointer {addr:#x} was not allocated by this allocator")
            }
            AllocError::DoubleFree { addr } => write!(f, "pointer {addr:#x} was already freed"),
            AllocError::InteriorPointer { addr, block } => {
                write!(f, "pointer {addr:#x} points inside the allocation at {block:#x}, not at its start")
            }
            AllocError::InvalidFraction(v) => {
                write!(f, "memory fraction {v} is invalid: it must be in [0.0, 1.0]")
            }
            AllocError::TooManyStreams { addr } => {
                write!(f, "allocation {addr:#x} is already recorded on 255 streams, the most one block tracks")
            }
            AllocError::NotCached { addr, size } => write!(
                f,
                "no cached free block of a classic segment holds the {size} bytes at {addr:#x} \
                 (both must be multiples of 512)"
            ),
            AllocError::UnknownPool { pool } => write!(
                f,
                "private pool {pool} does not exist: it was never created, or was released and has \
                 given its memory back"
            ),
            AllocError::PoolNotInUse { pool } => write!(
                f,
                "private pool {pool} has no use left (its last use was released): it takes no more \
                 allocations, and gives its memory back at the next release of cached memory"
            ),
            AllocError::NoCaptureUnderway => {
                write!(f, "no CUDA graph capture is underway to end (each end needs a begin before it)")
            }
            AllocError::Device(e) => write!(f, "device error: {e}"),
        }
    }
}

impl From<DeviceError> for AllocError {
    fn from(e: DeviceError) -> Self {
        AllocError::Device(e)
    }
}
