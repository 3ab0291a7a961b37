//! `DeviceHub`: one device shared by the per-stream shards of an allocator
//! (`lock_per_stream:True`), and `ShardDevice`, each shard's view of it.
//!
//! Shards call the device only when they grow, release, map pages or wait for events, so a
//! lock around the device costs nothing on the hot path. The hub also counts the bytes every
//! shard holds, so each shard's memory-fraction check sees the others' memory
//! ([`Device::reserved_elsewhere`]), and adds up the shards' segments and reserved bytes as
//! their statistics count them, for exact peaks ([`HeldPeaks`]).
//!
//! Invariants: `held` is the sum of every shard's `mine`; a shard's `mine` is the bytes of
//! segments and physical pages it obtained through the hub and has not given back. Lock
//! order: a shard's lock, then the hub's (never the reverse).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cachalot_core::{Device, DeviceError, Event, HeldChange, PhysHandle, Stream};

use super::held_peaks::HeldPeaks;

/// The device an allocator runs on: CUDA or simulated, behind one type. It is defined here,
/// the lowest module that holds one, so that the modules above (`stream_shards`,
/// `shared_allocator`) import it downwards only.
pub type BoxedDevice = Box<dyn Device + Send>;

/// A device shared by several allocators.
pub struct DeviceHub {
    device: Mutex<BoxedDevice>,
    held: AtomicU64,
    peaks: HeldPeaks,
}

impl DeviceHub {
    /// A hub over `device`.
    pub fn new(device: BoxedDevice) -> Arc<DeviceHub> {
        Arc::new(DeviceHub { device: Mutex::new(device), held: AtomicU64::new(0), peaks: HeldPeaks::default() })
    }

    /// Every shard's segments and reserved bytes, added up, with their peaks.
    pub fn peaks(&self) -> &HeldPeaks {
        &self.peaks
    }

    /// A new shard's view of the device.
    pub fn shard(self: &Arc<DeviceHub>) -> ShardDevice {
        ShardDevice { hub: Arc::clone(self), mine: 0 }
    }

    fn device(&self) -> MutexGuard<'_, BoxedDevice> {
        // A panic inside a device call poisons the calling shard's lock too, and that shard
        // refuses every later call; the device's own state is a driver's, which a panic in
        // our bookkeeping cannot leave half-updated, so the other shards go on using it.
        self.device.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One shard's handle on a [`DeviceHub`].
pub struct ShardDevice {
    hub: Arc<DeviceHub>,
    mine: u64,
}

impl ShardDevice {
    fn obtained(&mut self, size: u64) {
        self.mine += size;
        self.hub.held.fetch_add(size, Ordering::Relaxed);
    }

    fn returned(&mut self, size: u64) {
        self.mine -= size;
        self.hub.held.fetch_sub(size, Ordering::Relaxed);
    }
}

impl Device for ShardDevice {
    fn total_memory(&self) -> u64 {
        self.hub.device().total_memory()
    }
    fn free_memory(&self) -> u64 {
        self.hub.device().free_memory()
    }
    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        let addr = self.hub.device().allocate(size)?;
        self.obtained(size);
        Ok(addr)
    }
    fn free(&mut self, address: u64, size: u64) -> Result<(), DeviceError> {
        self.hub.device().free(address, size)?;
        self.returned(size);
        Ok(())
    }
    fn record_event(&mut self, stream: Stream) -> Result<Event, DeviceError> {
        self.hub.device().record_event(stream)
    }
    fn query_event(&mut self, event: Event) -> Result<bool, DeviceError> {
        self.hub.device().query_event(event)
    }
    fn synchronize_event(&mut self, event: Event) -> Result<(), DeviceError> {
        self.hub.device().synchronize_event(event)
    }
    fn release_event(&mut self, event: Event) {
        self.hub.device().release_event(event)
    }
    fn synchronize_stream(&mut self, stream: Stream) -> Result<(), DeviceError> {
        self.hub.device().synchronize_stream(stream)
    }
    fn now_us(&self) -> u64 {
        self.hub.device().now_us()
    }
    fn reserved_elsewhere(&self) -> u64 {
        self.hub.held.load(Ordering::Relaxed).saturating_sub(self.mine)
    }
    fn held_changed(&mut self, change: HeldChange) {
        self.hub.peaks.add(change);
    }
    fn vm_granularity(&self) -> Option<u64> {
        self.hub.device().vm_granularity()
    }
    fn vm_reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.hub.device().vm_reserve(size)
    }
    fn vm_release(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.hub.device().vm_release(addr, size)
    }
    fn vm_create(&mut self, size: u64) -> Result<PhysHandle, DeviceError> {
        let handle = self.hub.device().vm_create(size)?;
        self.obtained(size);
        Ok(handle)
    }
    fn vm_destroy(&mut self, handle: PhysHandle, size: u64) -> Result<(), DeviceError> {
        self.hub.device().vm_destroy(handle, size)?;
        self.returned(size);
        Ok(())
    }
    fn vm_map(&mut self, addr: u64, size: u64, handle: PhysHandle) -> Result<(), DeviceError> {
        self.hub.device().vm_map(addr, size, handle)
    }
    fn vm_set_access(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.hub.device().vm_set_access(addr, size)
    }
    fn vm_unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.hub.device().vm_unmap(addr, size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::SimDevice;

    #[test]
    fn each_shard_sees_what_the_others_hold() {
        let hub = DeviceHub::new(Box::new(SimDevice::new(1 << 30)));
        let (mut a, mut b) = (hub.shard(), hub.shard());
        let x = a.allocate(4 << 20).unwrap();
        let y = b.allocate(2 << 20).unwrap();
        assert_ne!(x, y, "one address space");
        assert_eq!((a.reserved_elsewhere(), b.reserved_elsewhere()), (2 << 20, 4 << 20));
        a.free(x, 4 << 20).unwrap();
        assert_eq!(b.reserved_elsewhere(), 0);
        assert!(a.free(x, 4 << 20).is_err(), "a refused call changes no count");
        assert_eq!(a.reserved_elsewhere(), 2 << 20);
    }
}
