//! The `Device` trait: the allocator's only door to memory and to stream ordering.
//!
//! The core never touches memory itself. It asks a device for segments, gives them back,
//! and records and queries events on streams to learn when a block freed on one stream may
//! be reused on another. Devices that support virtual memory also reserve address ranges
//! and map physical pages into them (the `vm_` methods; the defaults say "unsupported", and
//! the allocator then falls back to classic segments). Every call is fallible: out of
//! memory is a value, never a panic.

use core::fmt;

use crate::base::size::Pool;

/// A stream handle, opaque to the core (a `CUstream` cast to an integer natively).
pub type Stream = u64;

/// An event handle issued by a device, opaque to the core.
pub type Event = u64;

/// A physical memory handle issued by a device's `vm_create`, opaque to the core.
pub type PhysHandle = u64;

/// A change in what an allocator holds from its device, in the terms of its statistics: its
/// segments and reserved bytes in one pool, and its segments of at least `max_split_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldChange {
    /// The pool whose figures changed.
    pub pool: Pool,
    /// Segments gained (negative: given back).
    pub segments: i64,
    /// Reserved bytes gained (negative: given back).
    pub bytes: i64,
    /// Oversize segments gained (negative: given back).
    pub oversize_segments: i64,
}

const NO_VM: DeviceError = DeviceError::Unsupported("virtual memory");

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

    /// Bytes the device could still hand out now. A device may answer from a recent reading:
    /// the native library's CUDA device asks the driver at most once a millisecond, and its
    /// answer follows its own allocations at once, other processes' within that millisecond.
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

    /// Waits until the work queued so far on `stream` has finished. The allocator calls it
    /// before unmapping pages that blocks of `stream` used: unmapping, unlike freeing a
    /// segment, does not wait for the device on its own.
    fn synchronize_stream(&mut self, stream: Stream) -> Result<(), DeviceError> {
        let _ = stream;
        Ok(())
    }

    /// Microseconds on the device's clock, for history entries; 0 if it keeps none.
    fn now_us(&self) -> u64 {
        0
    }

    /// Bytes of device memory that other allocators sharing this device's memory-fraction
    /// limit hold now (the native library's per-stream shards); 0 when the allocator is alone.
    fn reserved_elsewhere(&self) -> u64 {
        0
    }

    /// What the allocator holds from this device changed, as its statistics count it, after
    /// they were updated. Allocators sharing one device (the native library's per-stream
    /// shards) add the changes up, so the peak of their sum is exact rather than a sum of
    /// peaks; a device used by one allocator ignores them.
    fn held_changed(&mut self, _change: HeldChange) {}

    /// Keeps `stream` busy, so that events recorded on it stay pending until
    /// [`Device::finish_replayed_stream`]: how a trace replay keeps a freed block from reuse
    /// while the recorded run's other stream still used it. A device whose streams are real
    /// cannot, and returns false (the default): the replay then frees at once.
    fn hold_replayed_stream(&mut self, _stream: Stream) -> bool {
        false
    }

    /// Completes the work held on `stream` by [`Device::hold_replayed_stream`].
    fn finish_replayed_stream(&mut self, _stream: Stream) {}

    /// The page size of virtual-memory mappings, or `None` when the device has no virtual
    /// memory (then every other `vm_` call fails).
    fn vm_granularity(&self) -> Option<u64> {
        None
    }

    /// Reserves `size` bytes of address space (no memory behind it) and returns its start.
    fn vm_reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        let _ = size;
        Err(NO_VM)
    }

    /// Returns an address range obtained from [`Device::vm_reserve`] (it must be unmapped).
    fn vm_release(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        let _ = (addr, size);
        Err(NO_VM)
    }

    /// Creates `size` bytes (a multiple of the granularity) of physical memory.
    fn vm_create(&mut self, size: u64) -> Result<PhysHandle, DeviceError> {
        let _ = size;
        Err(NO_VM)
    }

    /// Frees physical memory from [`Device::vm_create`] (it must be unmapped).
    fn vm_destroy(&mut self, handle: PhysHandle, size: u64) -> Result<(), DeviceError> {
        let _ = (handle, size);
        Err(NO_VM)
    }

    /// Maps the whole of `handle` (`size` bytes) at `addr` inside a reserved range.
    fn vm_map(&mut self, addr: u64, size: u64, handle: PhysHandle) -> Result<(), DeviceError> {
        let _ = (addr, size, handle);
        Err(NO_VM)
    }

    /// Makes a freshly mapped range readable and writable by the device.
    fn vm_set_access(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        let _ = (addr, size);
        Err(NO_VM)
    }

    /// Unmaps a range made of whole mappings.
    fn vm_unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        let _ = (addr, size);
        Err(NO_VM)
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
    fn synchronize_stream(&mut self, stream: Stream) -> Result<(), DeviceError> {
        (**self).synchronize_stream(stream)
    }
    fn now_us(&self) -> u64 {
        (**self).now_us()
    }
    fn reserved_elsewhere(&self) -> u64 {
        (**self).reserved_elsewhere()
    }
    fn held_changed(&mut self, change: HeldChange) {
        (**self).held_changed(change)
    }
    fn hold_replayed_stream(&mut self, stream: Stream) -> bool {
        (**self).hold_replayed_stream(stream)
    }
    fn finish_replayed_stream(&mut self, stream: Stream) {
        (**self).finish_replayed_stream(stream)
    }
    fn vm_granularity(&self) -> Option<u64> {
        (**self).vm_granularity()
    }
    fn vm_reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        (**self).vm_reserve(size)
    }
    fn vm_release(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        (**self).vm_release(addr, size)
    }
    fn vm_create(&mut self, size: u64) -> Result<PhysHandle, DeviceError> {
        (**self).vm_create(size)
    }
    fn vm_destroy(&mut self, handle: PhysHandle, size: u64) -> Result<(), DeviceError> {
        (**self).vm_destroy(handle, size)
    }
    fn vm_map(&mut self, addr: u64, size: u64, handle: PhysHandle) -> Result<(), DeviceError> {
        (**self).vm_map(addr, size, handle)
    }
    fn vm_set_access(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        (**self).vm_set_access(addr, size)
    }
    fn vm_unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        (**self).vm_unmap(addr, size)
    }
}
