//! The `Device` trait: the allocator's only door to memory and to stream ordering.
//!
//! The core never touches memory itself. It asks a device for segments, gives them back,
//! and records and queries events on streams to learn when a block freed on one stream may
//! be reused on another. Every call is fallible: out of memory is a value, never a panic.

use core::fmt;

/// A stream handle, opaque to the core (a `CUstream` cast to an integer natively).
pub type Stream = u64;

/// An event handle issued by a device, opaque to the core.
pub type Event = u64;

/// What a device call can report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// The device has no room for the segment.
    OutOfMemory,
    /// The driver refused a call for another reason.
    Driver {
        /// The call that failed.
        call: &'static str,
        /// The driver's error code.
        code: i32,
    },
    /// The device does not implement this operation.
    Unsupported(&'static str),
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::OutOfMemory => f.write_str("device out of memory"),
            DeviceError::Driver { call, code } => write!(f, "{call} failed with driver error {code}"),
            DeviceError::Unsupported(what) => write!(f, "{what} is not supported by this device"),
        }
    }
}

/// Memory and stream ordering, as the allocator needs them.
pub trait Device {
    /// Total bytes of memory on the device.
    fn total_memory(&self) -> u64;

    /// Bytes the device could still hand out now.
    fn free_memory(&self) -> u64;

    /// Allocates a segment of `size` bytes (a multiple of 512) and returns its address.
    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError>;

    /// Returns a segment obtained from [`Device::allocate`].
    fn free(&mut self, address: u64, size: u64) -> Result<(), DeviceError>;

    /// Records an event on `stream`: it completes when the work queued so far does.
    fn record_event(&mut self, stream: Stream) -> Result<Event, DeviceError>;

    /// True once the event has completed.
    fn query_event(&mut self, event: Event) -> Result<bool, DeviceError>;

    /// Waits for the event to complete.
    fn synchronize_event(&mut self, event: Event) -> Result<(), DeviceError>;

    /// Gives back an event that is no longer needed (the device may pool it).
    fn release_event(&mut self, event: Event);

    /// Microseconds on the device's clock, for history entries; 0 if it keeps none.
    fn now_us(&self) -> u64 {
        0
    }
}

/// A boxed device is a device, so one allocator type can serve several device kinds.
impl<D: Device + ?Sized> Device for alloc::boxed::Box<D> {
    fn total_memory(&self) -> u64 {
        (**self).total_memory()
    }
    fn free_memory(&self) -> u64 {
        (**self).free_memory()
    }
    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        (**self).allocate(size)
    }
    fn free(&mut self, address: u64, size: u64) -> Result<(), DeviceError> {
        (**self).free(address, size)
    }
    fn record_event(&mut self, stream: Stream) -> Result<Event, DeviceError> {
        (**self).record_event(stream)
    }
    fn query_event(&mut self, event: Event) -> Result<bool, DeviceError> {
        (**self).query_event(event)
    }
    fn synchronize_event(&mut self, event: Event) -> Result<(), DeviceError> {
        (**self).synchronize_event(event)
    }
    fn release_event(&mut self, event: Event) {
        (**self).release_event(event)
    }
    fn now_us(&self) -> u64 {
        (**self).now_us()
    }
}
