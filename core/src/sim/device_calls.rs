//! [`DeviceCalls`]: the count of every call a simulated device received, the figures the
//! replays, the fit search and the browser report as driver calls.
//!
//! Invariant: counts only grow; [`DeviceCalls::since`] is the difference of two readings of
//! one device, the later first.

/// Counts of the calls a device received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceCalls {
    /// Successful segment allocations.
    pub allocations: u64,
    /// Segment allocations refused (capacity or injected fault).
    pub failed_allocations: u64,
    /// Calls of any kind refused by an injected fault (see [`FaultSite`]).
    pub injected_failures: u64,
    /// Segment frees.
    pub frees: u64,
    /// Events recorded.
    pub events_recorded: u64,
    /// Event queries.
    pub event_queries: u64,
    /// Event synchronizations.
    pub event_syncs: u64,
    /// Stream synchronizations (before unmapping memory a stream's work may still use).
    pub stream_syncs: u64,
    /// Address ranges reserved.
    pub vm_reserves: u64,
    /// Address ranges released.
    pub vm_releases: u64,
    /// Physical handles created.
    pub vm_creates: u64,
    /// Physical handle creations refused (capacity or injected fault).
    pub vm_failed_creates: u64,
    /// Physical handles destroyed.
    pub vm_destroys: u64,
    /// Handles mapped.
    pub vm_maps: u64,
    /// Access grants (one per freshly mapped range).
    pub vm_set_access: u64,
    /// Unmap calls.
    pub vm_unmaps: u64,
    /// Questions of what memory is free (cuMemGetInfo on a GPU, where the native library keeps
    /// the answer for a millisecond: native/src/cuda/free_memory_memo.rs).
    pub free_memory_queries: u64,
}

impl DeviceCalls {
    /// The driver calls that obtain, map or give back memory: cuMemAlloc and cuMemFree, and
    /// under virtual memory cuMemCreate, cuMemMap, cuMemUnmap and cuMemRelease (address-range
    /// reservations, access grants and event calls are left out). `cachalot replay`,
    /// `compare`, `advise` and `fit`, and the browser's fit table, all count "driver calls"
    /// this way.
    pub fn driver_calls(&self) -> u64 {
        self.allocations + self.frees + self.vm_creates + self.vm_maps + self.vm_unmaps + self.vm_destroys
    }

    /// The calls made since `earlier` was taken.
    pub fn since(&self, earlier: &DeviceCalls) -> DeviceCalls {
        DeviceCalls {
            allocations: self.allocations - earlier.allocations,
            failed_allocations: self.failed_allocations - earlier.failed_allocations,
            injected_failures: self.injected_failures - earlier.injected_failures,
            frees: self.frees - earlier.frees,
            events_recorded: self.events_recorded - earlier.events_recorded,
            event_queries: self.event_queries - earlier.event_queries,
            event_syncs: self.event_syncs - earlier.event_syncs,
            stream_syncs: self.stream_syncs - earlier.stream_syncs,
            vm_reserves: self.vm_reserves - earlier.vm_reserves,
            vm_releases: self.vm_releases - earlier.vm_releases,
            vm_creates: self.vm_creates - earlier.vm_creates,
            vm_failed_creates: self.vm_failed_creates - earlier.vm_failed_creates,
            vm_destroys: self.vm_destroys - earlier.vm_destroys,
            vm_maps: self.vm_maps - earlier.vm_maps,
            vm_set_access: self.vm_set_access - earlier.vm_set_access,
            vm_unmaps: self.vm_unmaps - earlier.vm_unmaps,
            free_memory_queries: self.free_memory_queries - earlier.free_memory_queries,
        }
    }
}
