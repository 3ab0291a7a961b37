//! `SharedAllocator`: the core allocator of one device behind locks, so many threads can
//! call it.
//!
//! By default one lock guards one core allocator, as in PyTorch. With `lock_per_stream:True`
//! each stream gets its own core allocator and lock (`stream_shards.rs`): threads on
//! different streams then never wait for each other, the memory fraction still counts every
//! stream's memory, and a request that finds no room frees the other streams' caches before
//! it fails, as PyTorch's release of every cached block does. Statistics then add up the
//! shards' figures: exact for current values, totals and counters, and for the peaks of
//! segments and reserved bytes (followed as they change, `held_peaks.rs`); the other peaks
//! are an upper bound (each shard's peak, summed).
//!
//! The locks cover the core's bookkeeping and nothing else the native layer does: argument
//! checks happen before they are taken, and text (summaries, snapshots, error messages) is
//! built from what the core returns. A malloc or free served from the cache makes no driver
//! call and no heap allocation of the native layer's; the core itself calls the device
//! (under the lock) only when it must grow, release, or wait for events, as PyTorch's
//! allocator does.
//!
//! Invariants: each core allocator is reached only through its lock; a call that fails
//! leaves it as it was; once a call has panicked while holding a lock, every later call to
//! that allocator is refused with [`Error::Poisoned`] rather than trusting a half-updated
//! state.

use cachalot_core::snapshot::{SegmentInfo, Snapshot};
use cachalot_core::{AllocError, Config, DeviceStats, SimDevice, Stream};

use super::stream_shards::{lock, StreamShards};
use crate::cuda::CudaDevice;
use crate::error::Error;

/// The largest simulated device: its address space for segments (1 TiB). The simulated
/// device does its address arithmetic in `u64` without checks, so a larger capacity would
/// overflow it: a panic (`CACHALOT_STATUS_INTERNAL`, and a poisoned allocator) in debug
/// builds, wrapped addresses in release builds.
pub const MAX_SIMULATED_CAPACITY: u64 = cachalot_core::sim::MAX_CAPACITY;

/// Re-exported from [`super::device_hub`], where it is defined so that no module below this
/// one imports from it; `cachalot::shared_allocator::BoxedDevice` stays the path it had.
pub use super::device_hub::BoxedDevice;

/// What kind of device an allocator runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A CUDA GPU, by ordinal.
    Cuda(i32),
    /// The core's simulated device (no GPU needed).
    Simulated,
}

/// A thread-safe caching allocator for one device.
pub struct SharedAllocator {
    pub(super) shards: StreamShards,
    kind: DeviceKind,
}

impl SharedAllocator {
    /// An allocator over CUDA device `ordinal`.
    pub fn cuda(ordinal: i32, config: Config) -> Result<SharedAllocator, Error> {
        let device = CudaDevice::new(ordinal)?;
        Ok(SharedAllocator::over(Box::new(device), config, DeviceKind::Cuda(ordinal)))
    }

    /// An allocator over a simulated device of `capacity` bytes, 1 byte to
    /// [`MAX_SIMULATED_CAPACITY`].
    pub fn simulated(capacity: u64, config: Config) -> Result<SharedAllocator, Error> {
        SharedAllocator::simulated_placed(capacity, config, Vec::new())
    }

    /// An allocator over a simulated device of `capacity` bytes that places its segments at
    /// `placements` ((address, size) in order, as a recorded run's device placed them; see
    /// [`SimDevice::follow_placements`]), so a replay of the run's history decides as it did.
    pub fn simulated_placed(
        capacity: u64,
        config: Config,
        placements: Vec<(u64, u64)>,
    ) -> Result<SharedAllocator, Error> {
        if capacity == 0 {
            return Err(Error::InvalidArgument("a simulated device needs a capacity above 0 bytes".into()));
        }
        if capacity > MAX_SIMULATED_CAPACITY {
            return Err(Error::InvalidArgument(format!(
                "a simulated device's capacity is at most {MAX_SIMULATED_CAPACITY} bytes (1 TiB, its address space); got {capacity}"
            )));
        }
        let mut device = SimDevice::new(capacity);
        device.follow_placements(placements);
        Ok(SharedAllocator::over(Box::new(device), config, DeviceKind::Simulated))
    }

    /// An allocator over any device.
    pub fn over(device: BoxedDevice, config: Config, kind: DeviceKind) -> SharedAllocator {
        SharedAllocator { shards: StreamShards::new(device, config), kind }
    }

    /// The kind of device.
    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    /// The device ordinal reported in summaries and snapshots (0 for a simulated device).
    pub fn ordinal(&self) -> i32 {
        match self.kind {
            DeviceKind::Cuda(ordinal) => ordinal,
            DeviceKind::Simulated => 0,
        }
    }

    /// Allocates `size` bytes for use on `stream`.
    #[inline]
    pub fn malloc(&self, size: u64, stream: Stream) -> Result<u64, Error> {
        let (index, shard) = self.shards.for_stream(stream)?;
        if !self.shards.per_stream() {
            return Ok(lock(shard)?.malloc(size, stream)?);
        }
        if let Some(addr) = lock(shard)?.malloc_short_of_release(size, stream)? {
            return Ok(addr);
        }
        // PyTorch's last resort releases every stream's cached segments, then retries: the
        // other shards' first (each under its own lock), then this one's.
        self.shards.empty_others(index)?;
        Ok(lock(shard)?.malloc_after_release(size, stream)?)
    }

    /// Frees an address `malloc` returned.
    #[inline]
    pub fn free(&self, addr: u64) -> Result<(), Error> {
        self.shards.on_owner(addr, |a| a.free(addr))
    }

    /// Marks an allocation as used on `stream` too.
    pub fn record_stream(&self, addr: u64, stream: Stream) -> Result<(), Error> {
        self.shards.on_owner(addr, |a| a.record_stream(addr, stream))
    }

    /// Returns every unused cached segment to the device.
    pub fn empty_cache(&self) -> Result<(), Error> {
        self.shards.each(|a| a.empty_cache())
    }

    /// Limits the memory held to `fraction` of the device's.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), Error> {
        self.shards.set_memory_fraction(fraction)
    }

    /// A copy of the statistics (the shards' figures added up).
    pub fn stats(&self) -> Result<DeviceStats, Error> {
        let mut total: Option<DeviceStats> = None;
        self.shards.each(|a| {
            match &mut total {
                Some(t) => t.absorb(&a.stats()),
                None => total = Some(a.stats()),
            }
            Ok(())
        })?;
        let mut total = total.unwrap_or_else(|| self.empty_stats());
        if let Some(hub) = self.shards.hub() {
            hub.peaks().write_into(&mut total);
        }
        Ok(total)
    }

    /// The statistics of an allocator that has done nothing yet (per-stream shards before
    /// the first malloc).
    fn empty_stats(&self) -> DeviceStats {
        DeviceStats { max_split_size: self.shards.config().max_split_size_stat(), ..DeviceStats::default() }
    }

    /// Restarts every peak statistic at its current value.
    pub fn reset_peak_stats(&self) -> Result<(), Error> {
        self.shards.each(|a| {
            a.reset_peak_stats();
            Ok(())
        })?;
        if let Some(hub) = self.shards.hub() {
            hub.peaks().reset();
        }
        Ok(())
    }

    /// Restarts the accumulated statistics (PyTorch's `reset_accumulated_memory_stats`).
    pub fn reset_accumulated_stats(&self) -> Result<(), Error> {
        self.shards.each(|a| {
            a.reset_accumulated_stats();
            Ok(())
        })
    }

    /// The largest cached free block over every shard (PyTorch's `cacheInfo`).
    pub fn largest_cached_block(&self) -> Result<u64, Error> {
        let mut largest = 0;
        self.shards.each(|a| {
            largest = largest.max(a.largest_cached_block());
            Ok(())
        })?;
        Ok(largest)
    }

    /// Allocates exactly the `size` bytes at `addr` out of the cached free block that holds
    /// them, as `requested` bytes (setting a CUDA graph pool back to a checkpoint): the shard
    /// whose cache holds the range serves it.
    pub fn allocate_at(&self, addr: u64, size: u64, requested: u64) -> Result<u64, Error> {
        let mut answer = Err(AllocError::NotCached { addr, size }.into());
        self.shards.each(|a| {
            if answer.is_err() {
                match a.allocate_at(addr, size, requested) {
                    Err(AllocError::NotCached { .. }) => {}
                    other => answer = other.map_err(Error::from),
                }
            }
            Ok(())
        })?;
        answer
    }

    /// Every block of every segment, with its segment (the shards' segments by address).
    pub fn segments(&self) -> Result<Vec<SegmentInfo>, Error> {
        let mut segments = Vec::new();
        self.shards.each(|a| {
            segments.extend(a.segments(self.ordinal()));
            Ok(())
        })?;
        segments.sort_by_key(|s| s.address);
        Ok(segments)
    }

    /// Checks every shard's invariants, and that the hub's sums of what the shards hold
    /// are theirs (tests and fuzzers call it, while no other thread uses the allocator).
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut result = Ok(());
        self.shards
            .each(|a| {
                if result.is_ok() {
                    result = a.check_invariants();
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        result?;
        match self.shards.hub() {
            Some(hub) => hub.peaks().check_sum(&self.stats().map_err(|e| e.to_string())?),
            None => Ok(()),
        }
    }

    /// `torch.cuda.memory_summary()`'s table.
    pub fn memory_summary(&self, abbreviated: bool) -> Result<String, Error> {
        let stats = self.stats()?;
        Ok(cachalot_core::summary::memory_summary(&stats, self.ordinal(), abbreviated))
    }

    /// The snapshot as JSON, in the schema of `torch.cuda.memory._snapshot()`: every shard's
    /// segments by address, and their histories merged in time order.
    pub fn snapshot_json(&self) -> Result<String, Error> {
        let mut snapshot = Snapshot { segments: Vec::new(), device_traces: vec![Vec::new()] };
        self.shards.each(|a| {
            let part = a.snapshot(self.ordinal());
            snapshot.segments.extend(part.segments);
            snapshot.device_traces[0].extend(part.device_traces.into_iter().flatten());
            Ok(())
        })?;
        if self.shards.per_stream() {
            snapshot.segments.sort_by_key(|s| s.address);
            snapshot.device_traces[0].sort_by_key(|e| e.time_us);
        }
        serde_json::to_string(&snapshot).map_err(|e| Error::Panic(format!("snapshot serialisation failed: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::AllocError;

    fn sim() -> SharedAllocator {
        SharedAllocator::simulated(1 << 30, Config::pytorch()).unwrap()
    }

    #[test]
    fn errors_leave_the_allocator_as_it_was() {
        let a = sim();
        let p = a.malloc(1000, 0).unwrap();
        let before = a.snapshot_json().unwrap();
        assert_eq!(a.malloc(0, 0), Err(Error::Alloc(AllocError::ZeroSize)));
        assert!(matches!(a.malloc(u64::MAX, 0), Err(Error::Alloc(AllocError::TooLarge { .. }))));
        assert!(matches!(a.free(p + 512), Err(Error::Alloc(AllocError::InteriorPointer { .. }))));
        assert!(matches!(a.free(12345), Err(Error::Alloc(AllocError::UnknownPointer { .. }))));
        assert!(matches!(a.set_memory_fraction(f64::NAN), Err(Error::Alloc(AllocError::InvalidFraction(_)))));
        assert_eq!(a.snapshot_json().unwrap(), before);
        a.free(p).unwrap();
        assert!(matches!(a.free(p), Err(Error::Alloc(AllocError::DoubleFree { .. }))));
    }

    #[test]
    fn capacities_outside_the_address_space_are_refused() {
        assert!(matches!(SharedAllocator::simulated(0, Config::default()), Err(Error::InvalidArgument(_))));
        for capacity in [MAX_SIMULATED_CAPACITY + 1, 1 << 50, u64::MAX] {
            assert!(matches!(SharedAllocator::simulated(capacity, Config::default()), Err(Error::InvalidArgument(_))));
        }
        // The largest takes the largest request that fits, on both kinds of segment.
        for config in [Config::default(), Config::pytorch()] {
            let a = SharedAllocator::simulated(MAX_SIMULATED_CAPACITY, config).unwrap();
            let p = a.malloc(MAX_SIMULATED_CAPACITY / 2, 1).unwrap();
            a.free(p).unwrap();
            a.empty_cache().unwrap();
        }
    }

    #[test]
    fn many_threads_share_one_allocator() {
        for config in [Config::pytorch(), Config::parse("lock_per_stream:True").unwrap()] {
            threads_on_their_own_streams(SharedAllocator::simulated(1 << 30, config).unwrap());
        }
    }

    fn threads_on_their_own_streams(a: SharedAllocator) {
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let a = &a;
                s.spawn(move || {
                    let mut live = Vec::new();
                    for i in 0..2000u64 {
                        let size = 512 + ((i * 7919 + t * 104729) % (3 << 20));
                        live.push(a.malloc(size, t).unwrap());
                        if live.len() > 16 {
                            a.free(live.swap_remove((i as usize * 31) % live.len())).unwrap();
                        }
                    }
                    for p in live {
                        a.free(p).unwrap();
                    }
                });
            }
        });
        let stats = a.stats().unwrap();
        assert_eq!(stats.allocation.all.current, 0);
        assert_eq!(stats.allocation.all.allocated, 8 * 2000);
        a.check_invariants().unwrap();
    }
}
