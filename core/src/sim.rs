//! `SimDevice`: a simulated GPU for tests, replays and the browser.
//!
//! It hands out segments from a simulated address space that looks like a CUDA device's
//! (2 MiB-aligned addresses high in the 47-bit range, placed from the top down: the highest
//! gap that fits, as the CUDA driver tends to place them — best fit breaks ties by address,
//! so placement decides which of two equal cached blocks is reused), enforces a
//! capacity, models stream work with events that stay pending while a stream is held busy,
//! and injects faults on request. Invariants: live segments never overlap; `used` equals
//! the sum of live segment sizes and never exceeds `capacity`.

use alloc::collections::{BTreeMap, BTreeSet};

use crate::device::{Device, DeviceError, Event, Stream};

/// Where the simulated address space starts: a typical CUDA device address.
pub const BASE_ADDRESS: u64 = 0x7f00_0000_0000;
/// One past the end of the simulated address space (1 TiB above the base).
pub const TOP_ADDRESS: u64 = BASE_ADDRESS + (1 << 40);
/// Alignment of every simulated segment, as cudaMalloc gives for large allocations.
pub const SEGMENT_ALIGN: u64 = 2 << 20;

/// Counts of the calls a device received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCalls {
    /// Successful segment allocations.
    pub allocations: u64,
    /// Segment allocations refused (capacity or injected fault).
    pub failed_allocations: u64,
    /// Of those, the ones refused by an injected fault.
    pub injected_failures: u64,
    /// Segment frees.
    pub frees: u64,
    /// Events recorded.
    pub events_recorded: u64,
    /// Event queries.
    pub event_queries: u64,
    /// Event synchronizations.
    pub event_syncs: u64,
}

/// A simulated device.
#[derive(Clone, Debug)]
pub struct SimDevice {
    capacity: u64,
    used: u64,
    segments: BTreeMap<u64, u64>,
    busy_streams: BTreeSet<Stream>,
    pending_events: BTreeMap<Event, Stream>,
    next_event: Event,
    failing_allocations: BTreeSet<u64>,
    calls: DeviceCalls,
    clock_us: u64,
}

impl SimDevice {
    /// A device with `capacity` bytes of memory.
    pub fn new(capacity: u64) -> SimDevice {
        SimDevice {
            capacity,
            used: 0,
            segments: BTreeMap::new(),
            busy_streams: BTreeSet::new(),
            pending_events: BTreeMap::new(),
            next_event: 1,
            failing_allocations: BTreeSet::new(),
            calls: DeviceCalls::default(),
            clock_us: 0,
        }
    }

    /// Bytes of live segments.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Number of live segments.
    pub fn live_segments(&self) -> usize {
        self.segments.len()
    }

    /// The live segments as (address, size), by address.
    pub fn segments(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segments.iter().map(|(&a, &s)| (a, s))
    }

    /// The calls received so far.
    pub fn calls(&self) -> DeviceCalls {
        self.calls
    }

    /// Makes the allocation call with this 0-based number (counting every allocation
    /// attempt) fail as if the device were out of memory.
    pub fn fail_allocation_call(&mut self, call: u64) {
        self.failing_allocations.insert(call);
    }

    /// Marks a stream busy: events recorded on it stay pending until [`SimDevice::finish_stream`].
    pub fn hold_stream(&mut self, stream: Stream) {
        self.busy_streams.insert(stream);
    }

    /// The work queued on `stream` completes: its pending events become ready.
    pub fn finish_stream(&mut self, stream: Stream) {
        self.busy_streams.remove(&stream);
        self.pending_events.retain(|_, s| *s != stream);
    }

    /// Number of events recorded and not yet complete.
    pub fn pending_events(&self) -> usize {
        self.pending_events.len()
    }

    /// Sets the clock that history entries read.
    pub fn set_clock_us(&mut self, us: u64) {
        self.clock_us = us;
    }

    /// Highest 2 MiB-aligned address with a gap of `size` bytes below the top.
    fn find_gap(&self, size: u64) -> u64 {
        let mut candidate = (TOP_ADDRESS - size) & !(SEGMENT_ALIGN - 1);
        for (&addr, &len) in self.segments.iter().rev() {
            if addr + len <= candidate {
                break;
            }
            candidate = (addr - size) & !(SEGMENT_ALIGN - 1);
        }
        candidate
    }
}

impl Device for SimDevice {
    fn total_memory(&self) -> u64 {
        self.capacity
    }

    fn free_memory(&self) -> u64 {
        self.capacity - self.used
    }

    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        let call = self.calls.allocations + self.calls.failed_allocations;
        let injected = self.failing_allocations.remove(&call);
        if injected || size > self.capacity - self.used {
            self.calls.failed_allocations += 1;
            self.calls.injected_failures += injected as u64;
            return Err(DeviceError::OutOfMemory);
        }
        let addr = self.find_gap(size);
        self.segments.insert(addr, size);
        self.used += size;
        self.calls.allocations += 1;
        Ok(addr)
    }

    fn free(&mut self, address: u64, size: u64) -> Result<(), DeviceError> {
        match self.segments.get(&address) {
            Some(&len) if len == size => {
                self.segments.remove(&address);
                self.used -= size;
                self.calls.frees += 1;
                Ok(())
            }
            _ => Err(DeviceError::Driver { call: "free", code: 1 }),
        }
    }

    fn record_event(&mut self, stream: Stream) -> Result<Event, DeviceError> {
        let event = self.next_event;
        self.next_event += 1;
        self.calls.events_recorded += 1;
        if self.busy_streams.contains(&stream) {
            self.pending_events.insert(event, stream);
        }
        Ok(event)
    }

    fn query_event(&mut self, event: Event) -> Result<bool, DeviceError> {
        self.calls.event_queries += 1;
        Ok(!self.pending_events.contains_key(&event))
    }

    fn synchronize_event(&mut self, event: Event) -> Result<(), DeviceError> {
        self.calls.event_syncs += 1;
        if let Some(stream) = self.pending_events.remove(&event) {
            // Waiting on an event waits for the stream's work up to it.
            self.finish_stream(stream);
        }
        Ok(())
    }

    fn release_event(&mut self, event: Event) {
        self.pending_events.remove(&event);
    }

    fn now_us(&self) -> u64 {
        self.clock_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_aligned_and_reuse_gaps() {
        let mut d = SimDevice::new(1 << 30);
        let a = d.allocate(2 << 20).unwrap();
        let b = d.allocate(20 << 20).unwrap();
        assert_eq!(a, TOP_ADDRESS - (2 << 20));
        assert_eq!(b, a - (20 << 20));
        d.free(a, 2 << 20).unwrap();
        assert_eq!(d.allocate(2 << 20).unwrap(), a);
        assert_eq!(d.used(), 22 << 20);
    }

    #[test]
    fn capacity_and_injected_faults_refuse() {
        let mut d = SimDevice::new(4 << 20);
        assert_eq!(d.allocate(8 << 20), Err(DeviceError::OutOfMemory));
        d.fail_allocation_call(1);
        assert!(d.allocate(2 << 20).is_err());
        assert!(d.allocate(2 << 20).is_ok());
        assert_eq!(d.calls().failed_allocations, 2);
        assert!(d.free(TOP_ADDRESS - (2 << 20) + 1, 2 << 20).is_err());
    }

    #[test]
    fn events_wait_for_held_streams() {
        let mut d = SimDevice::new(1 << 30);
        d.hold_stream(7);
        let e = d.record_event(7).unwrap();
        let f = d.record_event(8).unwrap();
        assert!(!d.query_event(e).unwrap());
        assert!(d.query_event(f).unwrap());
        d.finish_stream(7);
        assert!(d.query_event(e).unwrap());
    }
}
