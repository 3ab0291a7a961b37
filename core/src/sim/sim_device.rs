//! `SimDevice`: a simulated GPU for tests, replays and the browser.
//!
//! It hands out segments from a simulated address space that looks like a CUDA device's
//! (2 MiB-aligned addresses high in the 47-bit range, placed from the top down: the highest
//! gap that fits, as the CUDA driver tends to place them — best fit breaks ties by address,
//! so placement decides which of two equal cached blocks is reused), enforces a
//! capacity, models stream work with events that stay pending while a stream is held busy,
//! and injects faults on request. It also models virtual memory (2 MiB granularity):
//! address ranges reserved far from the classic segments, physical handles that count
//! against the capacity, and mappings, with a count of every call.
//!
//! Faults are injected at chosen calls: every call of a [`FaultSite`] kind is numbered from
//! 0 (failed attempts included) and [`SimDevice::fail_call`] makes the call with a given
//! number fail once. A refused segment allocation or physical-handle creation reports
//! `OutOfMemory`; a refused map, unmap or event record reports a driver error with code
//! [`INJECTED_FAULT_CODE`] (CUDA's `CUDA_ERROR_UNKNOWN`) and changes nothing. Events that
//! stay not ready are [`SimDevice::hold_stream`]: events recorded on a held stream stay
//! pending until [`SimDevice::finish_stream`], a synchronization of the stream or one on one
//! of them. [`SimDevice::memory_behind`] tells which memory work on given addresses touches,
//! so that tests can check no memory is handed to another stream while work may still use it.
//! [`DeviceCalls::injected_failures`] counts every injected fault that fired.
//!
//! Invariants: live segments never overlap; mappings lie inside reservations and never
//! overlap; `used` equals the sum of live segment sizes plus live physical handles and never
//! exceeds `capacity`; a call refused by an injected fault leaves the device as it was.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use core::sync::atomic::{AtomicU64, Ordering};

use crate::base::device::{Device, DeviceError, Event, PhysHandle, Stream};

use super::device_calls::DeviceCalls;
use super::faults::{FaultSite, Faults, INJECTED_FAULT_CODE};
use super::placement_abandoned::{AbandonReason, PlacementAbandoned};

/// Where the simulated address space starts: a typical CUDA device address.
pub const BASE_ADDRESS: u64 = 0x7f00_0000_0000;
/// One past the end of the simulated address space (1 TiB above the base).
pub const TOP_ADDRESS: u64 = BASE_ADDRESS + (1 << 40);
/// The most memory a simulated device can hold: its address window for segments. A larger
/// capacity makes its addresses wrap (address 0, the same address twice).
pub const MAX_CAPACITY: u64 = TOP_ADDRESS - BASE_ADDRESS;
/// No simulated address reaches this: 2^53, the largest integer a JavaScript number holds
/// exactly, so every address crosses to the browser demo exactly. Addresses CUDA drivers hand
/// out lie far below it. Recorded placements ending above it are not followed, and reserved
/// ranges stay below it.
pub const ADDRESS_LIMIT: u64 = 1 << 53;
/// Alignment of every simulated segment, as cudaMalloc gives for large allocations.
pub const SEGMENT_ALIGN: u64 = 2 << 20;
/// Where reserved virtual address ranges start (below the classic segments).
pub const VM_BASE: u64 = 0x6000_0000_0000;
/// Page size of simulated virtual memory, as CUDA's allocation granularity on an H200.
pub const VM_GRANULARITY: u64 = 2 << 20;

/// A piece of device memory as device work sees it (see [`SimDevice::memory_behind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Memory {
    /// A classic segment, by its number among all segments allocated (from 0).
    Segment(u64),
    /// A physical handle of virtual memory.
    Handle(PhysHandle),
}

/// A count a `&self` method adds to: atomic, so that the device stays `Sync`.
#[derive(Debug, Default)]
struct QueryCount(AtomicU64);

impl Clone for QueryCount {
    fn clone(&self) -> QueryCount {
        QueryCount(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

/// A simulated device.
#[derive(Clone, Debug)]
pub struct SimDevice {
    capacity: u64,
    used: u64,
    segments: BTreeMap<u64, u64>,
    /// Each live segment's number among all segments allocated (from 0), so that a segment
    /// later allocated at a freed one's address is not taken for it.
    segment_serials: BTreeMap<u64, u64>,
    busy_streams: BTreeSet<Stream>,
    pending_events: BTreeMap<Event, Stream>,
    next_event: Event,
    faults: Faults,
    calls: DeviceCalls,
    /// [`DeviceCalls::free_memory_queries`], kept apart as `free_memory` reads the device.
    free_memory_queries: QueryCount,
    clock_us: u64,
    vm: bool,
    reservations: BTreeMap<u64, u64>,
    /// Where the next reservation search starts (next fit).
    next_reservation: u64,
    handles: BTreeMap<PhysHandle, u64>,
    next_handle: PhysHandle,
    mappings: BTreeMap<u64, (u64, PhysHandle)>,
    /// How many mappings each mapped handle has: the driver lets one handle be mapped at
    /// several addresses, and refuses to destroy it while any is left (so does this device).
    mapped_handles: BTreeMap<PhysHandle, u32>,
    /// Where the next segments go, as a recorded run placed them: (address, size) in order.
    placements: VecDeque<(u64, u64)>,
    /// Segments placed as recorded so far.
    placements_followed: usize,
    /// Why the list of placements was given up, if it was.
    placements_abandoned: Option<PlacementAbandoned>,
}

impl SimDevice {
    /// A device with `capacity` bytes of memory.
    pub fn new(capacity: u64) -> SimDevice {
        SimDevice {
            capacity,
            used: 0,
            segments: BTreeMap::new(),
            segment_serials: BTreeMap::new(),
            busy_streams: BTreeSet::new(),
            pending_events: BTreeMap::new(),
            next_event: 1,
            faults: Faults::default(),
            calls: DeviceCalls::default(),
            free_memory_queries: QueryCount::default(),
            clock_us: 0,
            vm: true,
            reservations: BTreeMap::new(),
            next_reservation: VM_BASE,
            handles: BTreeMap::new(),
            next_handle: 1,
            mappings: BTreeMap::new(),
            mapped_handles: BTreeMap::new(),
            placements: VecDeque::new(),
            placements_followed: 0,
            placements_abandoned: None,
        }
    }

    /// A device with `capacity` bytes and no virtual memory (like a GPU whose driver lacks
    /// it): allocators fall back to classic segments.
    pub fn without_virtual_memory(capacity: u64) -> SimDevice {
        SimDevice { vm: false, ..SimDevice::new(capacity) }
    }

    /// Makes the call of kind `site` with this 0-based number (counting every call of that
    /// kind, failed ones included) fail once; see [`FaultSite`] for how each kind fails.
    pub fn fail_call(&mut self, site: FaultSite, call: u64) {
        self.faults.fail(site, call);
    }

    /// The number the next call of kind `site` will get: `fail_call(site, next_call(site))`
    /// makes the very next such call fail.
    pub fn next_call(&self, site: FaultSite) -> u64 {
        self.faults.next_call(site)
    }

    /// Injected faults that have not fired yet, of every kind.
    pub fn pending_faults(&self) -> usize {
        self.faults.pending()
    }

    /// Forgets every injected fault that has not fired yet.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Makes the physical-handle creation with this 0-based number fail as out of memory.
    pub fn fail_create_call(&mut self, call: u64) {
        self.fail_call(FaultSite::Create, call);
    }

    /// Makes the map call with this 0-based number (counting every `vm_map` attempt) fail
    /// with a driver error.
    pub fn fail_map_call(&mut self, call: u64) {
        self.fail_call(FaultSite::Map, call);
    }

    /// Makes the unmap call with this 0-based number (counting every `vm_unmap` attempt)
    /// fail with a driver error.
    pub fn fail_unmap_call(&mut self, call: u64) {
        self.fail_call(FaultSite::Unmap, call);
    }

    /// Makes the event record with this 0-based number fail with a driver error.
    pub fn fail_record_event_call(&mut self, call: u64) {
        self.fail_call(FaultSite::RecordEvent, call);
    }

    /// True when `[addr, addr + size)` lies inside one classic segment or inside mapped
    /// virtual memory.
    pub fn is_backed(&self, addr: u64, size: u64) -> bool {
        if let Some((&s, &len)) = self.segments.range(..=addr).next_back() {
            if addr + size <= s + len {
                return true;
            }
        }
        let mut at = addr;
        let end = addr + size;
        while at < end {
            match self.mappings.range(..=at).next_back() {
                Some((&m, &(len, _))) if m + len > at => at = m + len,
                _ => return false,
            }
        }
        true
    }

    /// The memory behind `[addr, addr + size)`, in address order, as (memory, offset in it,
    /// bytes): what device work on those addresses touches. A classic segment is its own
    /// memory; a mapped address is its handle's, which other addresses may map too. Addresses
    /// backed by nothing are left out.
    pub fn memory_behind(&self, addr: u64, size: u64) -> alloc::vec::Vec<(Memory, u64, u64)> {
        let end = addr + size;
        let mut pieces = alloc::vec::Vec::new();
        if let Some((&s, &len)) = self.segments.range(..end).next_back() {
            if s + len > addr {
                let from = addr.max(s);
                pieces.push((Memory::Segment(self.segment_serials[&s]), from - s, end.min(s + len) - from));
            }
        }
        let first = self.mappings.range(..=addr).next_back().map_or(addr, |(&m, _)| m);
        for (&m, &(len, handle)) in self.mappings.range(first..end) {
            if m + len > addr {
                let from = addr.max(m);
                pieces.push((Memory::Handle(handle), from - m, end.min(m + len) - from));
            }
        }
        pieces
    }

    /// True while `memory` exists: a live segment, or a physical handle not yet destroyed.
    pub fn holds(&self, memory: Memory) -> bool {
        match memory {
            Memory::Segment(n) => self.segment_serials.values().any(|&m| m == n),
            Memory::Handle(h) => self.handles.contains_key(&h),
        }
    }

    /// Bytes of physical memory in virtual-memory handles.
    pub fn physical_bytes(&self) -> u64 {
        self.handles.values().sum()
    }

    /// Bytes mapped into reserved ranges.
    pub fn mapped_bytes(&self) -> u64 {
        self.mappings.values().map(|(len, _)| len).sum()
    }

    fn vm_ok(&self) -> Result<(), DeviceError> {
        if self.vm {
            Ok(())
        } else {
            Err(DeviceError::Unsupported("virtual memory"))
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

    /// A device of `capacity` bytes for replaying `trace`: it places segments where the run
    /// the trace recorded placed them, when the trace says (a snapshot's `segment_alloc`
    /// entries), so every replay of a snapshot decides as the run did.
    pub fn for_replay(capacity: u64, trace: &crate::trace::operations::Trace) -> SimDevice {
        let mut device = SimDevice::new(capacity);
        device.follow_placements(trace.segment_placements.iter().copied());
        device
    }

    /// Places the next segments where a recorded run's device placed them (a snapshot's
    /// `segment_alloc` entries, in order), so a replay breaks best-fit ties between equal
    /// cached blocks as the run did. Each allocation takes the next placement if it has the
    /// same size and the range is free (see `free_at`); the first one that does not fit ends
    /// the list (the replay has diverged from the run), and from then on segments go where
    /// the device's own top-down rule puts them. Only classic segments follow placements:
    /// virtual-memory ranges are reserved as usual.
    pub fn follow_placements(&mut self, placements: impl IntoIterator<Item = (u64, u64)>) {
        self.placements = placements.into_iter().collect();
        self.placements_abandoned = None;
    }

    /// Placements not used yet (0 once the list is used up or abandoned).
    pub fn placements_left(&self) -> usize {
        self.placements.len()
    }

    /// Segments placed where the recorded run placed them.
    pub fn placements_followed(&self) -> usize {
        self.placements_followed
    }

    /// Why the placements were given up (`None` while they are followed, or when all were).
    pub fn placements_abandoned(&self) -> Option<PlacementAbandoned> {
        self.placements_abandoned
    }

    /// Why `[addr, addr + size)` cannot hold a segment, or `None` when it is aligned, not at 0,
    /// ends at or below [`ADDRESS_LIMIT`] and is free of segments and reserved ranges. A
    /// recorded address may lie outside the window the device's own rule uses
    /// ([`BASE_ADDRESS`], [`TOP_ADDRESS`]): a real driver's addresses differ from process to
    /// process.
    fn refusal_at(&self, addr: u64, size: u64) -> Option<AbandonReason> {
        let end = match addr.checked_add(size) {
            Some(end) if addr != 0 && addr % crate::base::size::MIN_BLOCK == 0 && end <= ADDRESS_LIMIT => end,
            _ => return Some(AbandonReason::AddressRefused),
        };
        let clear = |m: &BTreeMap<u64, u64>| {
            m.range(..addr).next_back().is_none_or(|(&a, &len)| a.saturating_add(len) <= addr)
                && m.range(addr..).next().is_none_or(|(&a, _)| a >= end)
        };
        (!(clear(&self.segments) && clear(&self.reservations))).then_some(AbandonReason::AddressTaken)
    }

    /// Where the next segment of `size` bytes goes: the recorded placement, or the device's
    /// own choice.
    fn place(&mut self, size: u64) -> u64 {
        let Some(&(addr, len)) = self.placements.front() else { return self.find_gap(size) };
        let refusal = if len != size { Some(AbandonReason::SizeDiffers) } else { self.refusal_at(addr, size) };
        match refusal {
            None => {
                self.placements.pop_front();
                self.placements_followed += 1;
                addr
            }
            Some(reason) => {
                self.placements_abandoned = Some(PlacementAbandoned {
                    segment: self.calls.allocations,
                    followed: self.placements_followed,
                    placement: (addr, len),
                    size,
                    reason,
                });
                self.placements.clear();
                self.find_gap(size)
            }
        }
    }

    /// The calls received so far.
    pub fn calls(&self) -> DeviceCalls {
        DeviceCalls { free_memory_queries: self.free_memory_queries.0.load(Ordering::Relaxed), ..self.calls }
    }

    /// Makes the allocation call with this 0-based number (counting every allocation
    /// attempt) fail as if the device were out of memory.
    pub fn fail_allocation_call(&mut self, call: u64) {
        self.fail_call(FaultSite::Allocate, call);
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

    /// True while `stream` is held busy: work queued on it has not finished.
    pub fn is_busy(&self, stream: Stream) -> bool {
        self.busy_streams.contains(&stream)
    }

    /// Number of events recorded and not yet complete.
    pub fn pending_events(&self) -> usize {
        self.pending_events.len()
    }

    /// Sets the clock that history entries read.
    pub fn set_clock_us(&mut self, us: u64) {
        self.clock_us = us;
    }

    /// Lowest address in `[from, to)` where `len` bytes of address space are unreserved.
    fn first_free_range(&self, from: u64, to: u64, len: u64) -> Option<u64> {
        let mut addr = from;
        for (&at, &taken) in self.reservations.range(..to) {
            let end = at + taken.next_multiple_of(VM_GRANULARITY);
            if end <= addr {
                continue;
            }
            if at >= addr && at - addr >= len {
                break;
            }
            addr = end;
        }
        addr.checked_add(len).filter(|&end| end <= to).map(|_| addr)
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
        self.free_memory_queries.0.fetch_add(1, Ordering::Relaxed);
        self.capacity - self.used
    }

    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        let injected = self.faults.refuses(FaultSite::Allocate);
        if injected || size > self.capacity - self.used {
            self.calls.failed_allocations += 1;
            self.calls.injected_failures += injected as u64;
            return Err(DeviceError::OutOfMemory);
        }
        let addr = self.place(size);
        self.segments.insert(addr, size);
        self.segment_serials.insert(addr, self.calls.allocations);
        self.used += size;
        self.calls.allocations += 1;
        Ok(addr)
    }

    fn free(&mut self, address: u64, size: u64) -> Result<(), DeviceError> {
        if self.segments.get(&address) == Some(&size) && self.faults.refuses(FaultSite::Free) {
            self.calls.injected_failures += 1;
            return Err(DeviceError::Driver { call: "free", code: INJECTED_FAULT_CODE });
        }
        match self.segments.get(&address) {
            Some(&len) if len == size => {
                self.segments.remove(&address);
                self.segment_serials.remove(&address);
                self.used -= size;
                self.calls.frees += 1;
                Ok(())
            }
            _ => Err(DeviceError::Driver { call: "free", code: 1 }),
        }
    }

    fn record_event(&mut self, stream: Stream) -> Result<Event, DeviceError> {
        if self.faults.refuses(FaultSite::RecordEvent) {
            self.calls.injected_failures += 1;
            return Err(DeviceError::Driver { call: "record_event", code: INJECTED_FAULT_CODE });
        }
        let event = self.next_event;
        self.next_event += 1;
        self.calls.events_recorded += 1;
        if self.busy_streams.contains(&stream) {
            self.pending_events.insert(event, stream);
        }
        Ok(event)
    }

    fn query_event(&mut self, event: Event) -> Result<bool, DeviceError> {
        if self.faults.refuses(FaultSite::QueryEvent) {
            self.calls.injected_failures += 1;
            return Err(DeviceError::Driver { call: "query_event", code: INJECTED_FAULT_CODE });
        }
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

    fn synchronize_stream(&mut self, stream: Stream) -> Result<(), DeviceError> {
        self.calls.stream_syncs += 1;
        self.finish_stream(stream);
        Ok(())
    }

    fn now_us(&self) -> u64 {
        self.clock_us
    }

    fn hold_replayed_stream(&mut self, stream: Stream) -> bool {
        self.hold_stream(stream);
        true
    }

    fn finish_replayed_stream(&mut self, stream: Stream) {
        self.finish_stream(stream);
    }

    fn vm_granularity(&self) -> Option<u64> {
        self.vm.then_some(VM_GRANULARITY)
    }

    fn vm_reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.vm_ok()?;
        // Next fit: fresh addresses after the last reservation while there are any (a freed
        // range's addresses are not handed out again at once, so a stale pointer stays
        // foreign), then released ranges are reused, so addresses never run out however many
        // ranges come and go. Never inside the classic segments' window.
        let len = size.checked_next_multiple_of(VM_GRANULARITY).ok_or(DeviceError::OutOfMemory)?;
        let cursor = self.next_reservation;
        let (below, above) = ((VM_BASE, BASE_ADDRESS), (TOP_ADDRESS, ADDRESS_LIMIT));
        let windows = if cursor >= TOP_ADDRESS {
            [(cursor, ADDRESS_LIMIT), below, above]
        } else {
            [(cursor, BASE_ADDRESS), above, below]
        };
        let addr = windows
            .iter()
            .find_map(|&(from, to)| self.first_free_range(from, to, len))
            .ok_or(DeviceError::OutOfMemory)?;
        self.next_reservation = addr + len;
        self.reservations.insert(addr, size);
        self.calls.vm_reserves += 1;
        Ok(addr)
    }

    fn vm_release(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.vm_ok()?;
        let mapped_inside = self.mappings.range(addr..addr + size).next().is_some();
        if self.reservations.get(&addr) != Some(&size) || mapped_inside {
            return Err(DeviceError::Driver { call: "vm_release", code: 1 });
        }
        if self.faults.refuses(FaultSite::Release) {
            self.calls.injected_failures += 1;
            return Err(DeviceError::Driver { call: "vm_release", code: INJECTED_FAULT_CODE });
        }
        self.reservations.remove(&addr);
        self.calls.vm_releases += 1;
        Ok(())
    }

    fn vm_create(&mut self, size: u64) -> Result<PhysHandle, DeviceError> {
        self.vm_ok()?;
        let injected = self.faults.refuses(FaultSite::Create);
        if injected || size > self.capacity - self.used || size % VM_GRANULARITY != 0 {
            self.calls.vm_failed_creates += 1;
            self.calls.injected_failures += injected as u64;
            return Err(DeviceError::OutOfMemory);
        }
        let h = self.next_handle;
        self.next_handle += 1;
        self.handles.insert(h, size);
        self.used += size;
        self.calls.vm_creates += 1;
        Ok(h)
    }

    fn vm_destroy(&mut self, handle: PhysHandle, size: u64) -> Result<(), DeviceError> {
        self.vm_ok()?;
        if self.handles.get(&handle) != Some(&size) || self.mapped_handles.contains_key(&handle) {
            return Err(DeviceError::Driver { call: "vm_destroy", code: 1 });
        }
        if self.faults.refuses(FaultSite::Destroy) {
            self.calls.injected_failures += 1;
            return Err(DeviceError::Driver { call: "vm_destroy", code: INJECTED_FAULT_CODE });
        }
        self.handles.remove(&handle);
        self.used -= size;
        self.calls.vm_destroys += 1;
        Ok(())
    }

    fn vm_map(&mut self, addr: u64, size: u64, handle: PhysHandle) -> Result<(), DeviceError> {
        self.vm_ok()?;
        if self.faults.refuses(FaultSite::Map) {
            self.calls.injected_failures += 1;
            return Err(DeviceError::Driver { call: "vm_map", code: INJECTED_FAULT_CODE });
        }
        let in_reservation =
            self.reservations.range(..=addr).next_back().is_some_and(|(&r, &len)| addr + size <= r + len);
        let overlaps = self.mappings.range(..addr + size).next_back().is_some_and(|(&m, &(len, _))| m + len > addr);
        if !in_reservation || overlaps || self.handles.get(&handle) != Some(&size) || addr % VM_GRANULARITY != 0 {
            return Err(DeviceError::Driver { call: "vm_map", code: 1 });
        }
        *self.mapped_handles.entry(handle).or_insert(0) += 1;
        self.mappings.insert(addr, (size, handle));
        self.calls.vm_maps += 1;
        Ok(())
    }

    fn vm_set_access(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.vm_ok()?;
        if !self.is_backed(addr, size) {
            return Err(DeviceError::Driver { call: "vm_set_access", code: 1 });
        }
        if self.faults.refuses(FaultSite::SetAccess) {
            self.calls.injected_failures += 1;
            return Err(DeviceError::Driver { call: "vm_set_access", code: INJECTED_FAULT_CODE });
        }
        self.calls.vm_set_access += 1;
        Ok(())
    }

    fn vm_unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.vm_ok()?;
        if self.faults.refuses(FaultSite::Unmap) {
            self.calls.injected_failures += 1;
            return Err(DeviceError::Driver { call: "vm_unmap", code: INJECTED_FAULT_CODE });
        }
        let end = addr + size;
        let mut at = addr;
        let mut covered = alloc::vec::Vec::new();
        for (&m, &(len, _)) in self.mappings.range(addr..end) {
            if m != at || m + len > end {
                return Err(DeviceError::Driver { call: "vm_unmap", code: 1 });
            }
            covered.push(m);
            at = m + len;
        }
        if at != end {
            return Err(DeviceError::Driver { call: "vm_unmap", code: 1 });
        }
        for m in covered {
            if let Some((_, h)) = self.mappings.remove(&m) {
                if let Some(n) = self.mapped_handles.get_mut(&h) {
                    *n -= 1;
                    if *n == 0 {
                        self.mapped_handles.remove(&h);
                    }
                }
            }
        }
        self.calls.vm_unmaps += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_memory_questions_are_counted_and_the_device_stays_shareable() {
        fn shareable<T: Send + Sync>() {}
        shareable::<SimDevice>();
        let d = SimDevice::new(1 << 30);
        assert_eq!(d.free_memory(), 1 << 30);
        d.free_memory();
        assert_eq!(d.calls().free_memory_queries, 2);
        assert_eq!(d.clone().calls().free_memory_queries, 2, "a clone keeps the count");
        assert_eq!(d.calls().since(&d.calls()), DeviceCalls::default());
    }

    #[test]
    fn address_ranges_are_reused_and_never_run_out() {
        const TIB: u64 = 1 << 40;
        let mut d = SimDevice::new(TIB);
        let first = d.vm_reserve(TIB + TIB / 8).unwrap();
        d.vm_release(first, TIB + TIB / 8).unwrap();
        let second = d.vm_reserve(TIB + TIB / 8).unwrap();
        assert!(second > first, "fresh addresses first, so a stale pointer stays foreign");
        d.vm_release(second, TIB + TIB / 8).unwrap();
        // Ranges of 2^50 bytes exhaust the fresh addresses below 2^53 within 8 rounds: then
        // the released ones come back, and reserving never fails.
        let mut seen = alloc::collections::BTreeSet::new();
        for _ in 0..100 {
            let again = d.vm_reserve(1 << 50).unwrap();
            assert!(again + (1 << 50) <= ADDRESS_LIMIT, "{again:#x} is past what JavaScript holds exactly");
            seen.insert(again);
            d.vm_release(again, 1 << 50).unwrap();
        }
        assert!(seen.len() < 20, "released addresses are reused: {} distinct", seen.len());
        // Many live at once: below the classic segments' window, then above it, never in it.
        let ranges: alloc::vec::Vec<u64> = (0..64).map(|_| d.vm_reserve(TIB + TIB / 8).unwrap()).collect();
        for &r in &ranges {
            assert!(r + TIB + TIB / 8 <= BASE_ADDRESS || r >= TOP_ADDRESS, "{r:#x} overlaps the segments");
        }
        assert!(d.vm_reserve(u64::MAX).is_err());
        assert!(d.vm_reserve(ADDRESS_LIMIT).is_err());
    }

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
    fn recorded_placements_are_followed_until_one_does_not_fit() {
        let mut d = SimDevice::new(1 << 30);
        let low = BASE_ADDRESS + (64 << 20);
        d.follow_placements([(low, 2 << 20), (low + (4 << 20), 4 << 20), (low, 2 << 20), (low + (32 << 20), 2 << 20)]);
        assert_eq!(d.allocate(2 << 20).unwrap(), low);
        assert_eq!(d.allocate(4 << 20).unwrap(), low + (4 << 20));
        assert_eq!(d.placements_followed(), 2);
        assert_eq!(d.placements_abandoned(), None);
        // The third overlaps the first, still live: the replay has diverged from the run.
        let own = d.allocate(2 << 20).unwrap();
        assert_eq!(own, (TOP_ADDRESS - (2 << 20)) & !(SEGMENT_ALIGN - 1), "the device's own top-down choice");
        assert_eq!(d.placements_left(), 0, "the rest of the list is dropped");
        let gave_up = d.placements_abandoned().expect("the device says why it gave up");
        assert_eq!((gave_up.segment, gave_up.followed, gave_up.reason), (2, 2, AbandonReason::AddressTaken));
        assert_eq!((gave_up.placement, gave_up.size), ((low, 2 << 20), 2 << 20));
        let mut d = SimDevice::new(1 << 30);
        d.follow_placements([(low, 2 << 20)]);
        assert_ne!(d.allocate(4 << 20).unwrap(), low, "a size that differs ends the list too");
        assert_eq!(d.placements_left(), 0);
        let gave_up = d.placements_abandoned().unwrap();
        assert_eq!((gave_up.segment, gave_up.size, gave_up.reason), (0, 4 << 20, AbandonReason::SizeDiffers));
        assert!(
            alloc::format!("{gave_up}").contains("segment 0 asked for 4194304 bytes where the run made 2097152"),
            "{gave_up}"
        );
        d.follow_placements([]);
        assert_eq!(d.placements_abandoned(), None, "a new list starts afresh");
        for refused in [0, u64::MAX - (1 << 20), low + 100, ADDRESS_LIMIT - (1 << 20), 0xffff_ffff_ffc0_0000] {
            let mut d = SimDevice::new(1 << 30);
            d.follow_placements([(refused, 2 << 20)]);
            assert_ne!(d.allocate(2 << 20).unwrap(), refused, "{refused:#x} is null, past the end or unaligned");
            assert_eq!(d.placements_abandoned().map(|a| a.reason), Some(AbandonReason::AddressRefused));
        }
        // A real driver's addresses may lie below the window the device's own rule uses,
        // though never over a reserved range.
        let mut d = SimDevice::new(1 << 30);
        let reserved = d.vm_reserve(4 << 20).unwrap();
        let below = BASE_ADDRESS - (1 << 40);
        d.follow_placements([(below, 2 << 20), (reserved, 2 << 20)]);
        assert_eq!(d.allocate(2 << 20).unwrap(), below);
        assert_ne!(d.allocate(2 << 20).unwrap(), reserved);
        // Up to the limit JavaScript numbers hold exactly, a recorded address is followed.
        let mut d = SimDevice::new(1 << 30);
        d.follow_placements([(ADDRESS_LIMIT - (2 << 20), 2 << 20)]);
        assert_eq!(d.allocate(2 << 20).unwrap(), ADDRESS_LIMIT - (2 << 20));
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
    fn memory_behind_addresses_follows_segments_and_handles() {
        let g = VM_GRANULARITY;
        let mut d = SimDevice::new(16 * g);
        let seg = d.allocate(2 * g).unwrap();
        assert_eq!(d.memory_behind(seg + 100, 50), [(Memory::Segment(0), 100, 50)]);
        d.free(seg, 2 * g).unwrap();
        assert!(!d.holds(Memory::Segment(0)));
        let again = d.allocate(2 * g).unwrap();
        assert_eq!(again, seg, "the freed segment's address comes back...");
        assert_eq!(d.memory_behind(seg, 1), [(Memory::Segment(1), 0, 1)], "...as other memory");
        let base = d.vm_reserve(8 * g).unwrap();
        let (h1, h2) = (d.vm_create(g).unwrap(), d.vm_create(g).unwrap());
        d.vm_map(base, g, h1).unwrap();
        d.vm_map(base + g, g, h2).unwrap();
        d.vm_map(base + 4 * g, g, h1).unwrap(); // one handle at two addresses
        assert_eq!(d.memory_behind(base + g - 10, 20), [(Memory::Handle(h1), g - 10, 10), (Memory::Handle(h2), 0, 10)]);
        assert_eq!(d.memory_behind(base + 4 * g, 8), [(Memory::Handle(h1), 0, 8)]);
        assert!(d.memory_behind(base + 2 * g, g).is_empty(), "nothing mapped there");
    }

    #[test]
    fn synchronizing_a_stream_finishes_its_work() {
        let mut d = SimDevice::new(1 << 30);
        d.hold_stream(4);
        let e = d.record_event(4).unwrap();
        assert!(d.is_busy(4) && !d.query_event(e).unwrap());
        d.synchronize_stream(4).unwrap();
        assert!(!d.is_busy(4) && d.query_event(e).unwrap());
        assert_eq!(d.calls().stream_syncs, 1);
    }

    #[test]
    fn virtual_memory_maps_whole_handles_inside_reservations() {
        let g = VM_GRANULARITY;
        let mut d = SimDevice::new(8 * g);
        let base = d.vm_reserve(64 * g).unwrap();
        let h1 = d.vm_create(g).unwrap();
        let h2 = d.vm_create(2 * g).unwrap();
        d.vm_map(base, g, h1).unwrap();
        d.vm_map(base + g, 2 * g, h2).unwrap();
        assert!(d.vm_map(base, g, h1).is_err(), "overlapping map");
        d.vm_set_access(base, 3 * g).unwrap();
        assert!(d.is_backed(base + 100, 2 * g));
        assert!(!d.is_backed(base + 2 * g, 2 * g));
        assert!(d.vm_unmap(base, 2 * g).is_err(), "partial mapping");
        d.vm_unmap(base, 3 * g).unwrap();
        assert_eq!(d.used(), 3 * g);
        assert!(d.vm_create(6 * g).is_err(), "over capacity");
        d.vm_destroy(h1, g).unwrap();
        d.vm_destroy(h2, 2 * g).unwrap();
        d.vm_release(base, 64 * g).unwrap();
        assert_eq!((d.used(), d.calls().vm_maps, d.calls().vm_unmaps), (0, 2, 1));
        assert!(SimDevice::without_virtual_memory(g).vm_reserve(g).is_err());
    }

    #[test]
    fn injected_vm_and_event_faults_fire_once_and_change_nothing() {
        let g = VM_GRANULARITY;
        let mut d = SimDevice::new(8 * g);
        let base = d.vm_reserve(8 * g).unwrap();
        let h = d.vm_create(g).unwrap();
        d.fail_map_call(d.next_call(FaultSite::Map));
        let injected = DeviceError::Driver { call: "vm_map", code: INJECTED_FAULT_CODE };
        assert_eq!(d.vm_map(base, g, h), Err(injected));
        assert!(!d.is_backed(base, g), "a refused map maps nothing");
        d.vm_map(base, g, h).unwrap();
        d.fail_unmap_call(1);
        d.fail_unmap_call(5);
        assert_eq!(d.pending_faults(), 2);
        assert!(d.vm_unmap(base, 2 * g).is_err(), "call 0: not whole mappings");
        assert!(d.vm_unmap(base, g).is_err(), "call 1: injected");
        assert!(d.is_backed(base, g), "a refused unmap unmaps nothing");
        d.vm_unmap(base, g).unwrap();
        d.fail_record_event_call(0);
        assert!(d.record_event(3).is_err());
        assert!(d.record_event(3).is_ok());
        assert_eq!(d.calls().injected_failures, 3);
        d.clear_faults();
        assert_eq!(d.pending_faults(), 0);
        assert_eq!(d.next_call(FaultSite::Unmap), 3);
        d.vm_destroy(h, g).unwrap();
        assert_eq!(d.used(), 0);
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
