//! Which GPUs may reach a device's virtual memory, process-wide.
//!
//! Memory mapped with `cuMemMap` can be reached only by the devices `cuMemSetAccess` names,
//! unlike `cuMemAlloc`'s, which peer access (`cuCtxEnablePeerAccess`, as PyTorch enables it
//! for copies between GPUs) opens up. Without more, a copy between two GPUs fails on pages
//! cachalot mapped. Naming every GPU of the machine would cost each mapping one page-table
//! update per GPU (a second GPU doubles what mapping and unmapping cost: docs/benchmarks.md),
//! and most processes use one GPU. So a device's mappings are opened to the devices that hold
//! a cachalot CUDA device with virtual memory in this process and can reach it as peers: when
//! a device joins, every mapping the others hold is opened to it, and from then on each new
//! mapping names it too — as PyTorch's expandable segments add a peer when peer access is
//! enabled.
//!
//! Invariants: every mapping in an [`Access`]'s `mapped` grants access to its own device and
//! to every device in its `peers`; the registry lists each live [`Access`] once; lock order:
//! the registry, then an [`Access`] (a device's own calls take only its own `Access`).

use std::collections::BTreeMap;
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use cachalot_core::DeviceError;
use cudarc::driver::sys::{self, CUcontext, CUmemAccessDesc, CUmemLocation};

use super::driver::check;

/// One device's mappings and the devices they are open to.
#[derive(Debug)]
pub struct Access {
    ordinal: i32,
    /// The device's primary context (retained by its `CudaDevice` while `open` is true).
    ctx: CUcontext,
    /// False once the device has unmapped everything and is going away.
    open: bool,
    peers: Vec<i32>,
    /// Address and size of every live mapping.
    mapped: BTreeMap<u64, u64>,
}

// SAFETY: the context handle is only passed to the driver, whose handles are valid on every
// thread; every other field is plain data behind the Mutex.
unsafe impl Send for Access {}

/// The access of one device, shared with the registry.
pub type SharedAccess = Arc<Mutex<Access>>;

struct Registry(Vec<(i32, Weak<Mutex<Access>>)>);

static REGISTRY: Mutex<Registry> = Mutex::new(Registry(Vec::new()));

/// Locks a mutex whether or not a panic poisoned it: the data is driver state and counts that a
/// panic elsewhere cannot leave half-written (each update is one insert or remove).
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn location(ordinal: i32) -> CUmemLocation {
    CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal }
}

fn read_write(ordinal: i32) -> CUmemAccessDesc {
    CUmemAccessDesc { location: location(ordinal), flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE }
}

/// Whether device `from` can reach memory of device `to` (false when the driver cannot say).
fn can_reach(from: i32, to: i32) -> bool {
    let (mut a, mut b, mut can) = (0, 0, 0);
    // SAFETY: the driver is initialised (a device exists); valid out-pointers; the ordinals
    // are of live devices.
    let asked = unsafe {
        sys::cuDeviceGet(&mut a, from) == sys::CUresult::CUDA_SUCCESS
            && sys::cuDeviceGet(&mut b, to) == sys::CUresult::CUDA_SUCCESS
            && sys::cuDeviceCanAccessPeer(&mut can, a, b) == sys::CUresult::CUDA_SUCCESS
    };
    asked && can != 0
}

/// Registers device `ordinal` (whose primary context is `ctx`, current on this thread): opens
/// the mappings of every other registered device that it can reach to it, and returns its
/// access, open to every registered device that can reach it.
///
/// # Safety
/// `ctx` is the retained primary context of `ordinal`, and stays retained until
/// [`Access::close`] is called.
pub unsafe fn join(ordinal: i32, ctx: CUcontext) -> SharedAccess {
    let mut registry = locked(&REGISTRY);
    registry.0.retain(|(_, w)| w.strong_count() > 0);
    let mut peers = Vec::new();
    for (other, weak) in &registry.0 {
        if *other == ordinal {
            continue;
        }
        if let Some(theirs) = weak.upgrade() {
            if can_reach(ordinal, *other) {
                locked(&theirs).add_peer(ordinal);
            }
            if can_reach(*other, ordinal) && !peers.contains(other) {
                peers.push(*other);
            }
        }
    }
    let access = Arc::new(Mutex::new(Access { ordinal, ctx, open: true, peers, mapped: BTreeMap::new() }));
    registry.0.push((ordinal, Arc::downgrade(&access)));
    access
}

impl Access {
    /// Opens every live mapping to `peer` (its own context made current around the calls),
    /// and names `peer` in every later grant.
    fn add_peer(&mut self, peer: i32) {
        if !self.open || self.peers.contains(&peer) {
            return;
        }
        self.peers.push(peer);
        if self.mapped.is_empty() {
            return;
        }
        // SAFETY: `ctx` is retained while `open` (join's contract).
        if check("cuCtxPushCurrent", unsafe { sys::cuCtxPushCurrent_v2(self.ctx) }).is_err() {
            return;
        }
        let desc = read_write(peer);
        for (&addr, &size) in &self.mapped {
            // SAFETY: a live mapping of this device (kept in step with map and unmap under the
            // same lock); one descriptor. A failure leaves that mapping closed to the peer, as
            // it was: nothing to undo.
            let _ = unsafe { sys::cuMemSetAccess(addr, size as usize, &desc, 1) };
        }
        let mut popped: CUcontext = ptr::null_mut();
        // SAFETY: pops the context pushed above, on the same thread.
        let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    }

    /// Records a new mapping (before access is granted to it).
    pub fn mapped(&mut self, addr: u64, size: u64) {
        self.mapped.insert(addr, size);
    }

    /// Records that a mapping is gone.
    pub fn unmapped(&mut self, addr: u64) {
        self.mapped.remove(&addr);
    }

    /// Grants read and write access to `[addr, addr + size)`, mapped, to the device and its
    /// peers, in one call.
    pub fn grant(&self, addr: u64, size: u64) -> Result<(), DeviceError> {
        let descs: Vec<CUmemAccessDesc> =
            std::iter::once(self.ordinal).chain(self.peers.iter().copied()).map(read_write).collect();
        // SAFETY: the range is mapped (callers map before granting); `descs` holds
        // `descs.len()` initialised descriptors.
        check("cuMemSetAccess", unsafe { sys::cuMemSetAccess(addr, size as usize, descs.as_ptr(), descs.len()) })
    }

    /// The devices other than its own that the device's mappings are open to.
    pub fn peers(&self) -> &[i32] {
        &self.peers
    }

    /// The device has unmapped everything and is going away: nothing is opened any more.
    pub fn close(&mut self) {
        self.open = false;
        self.mapped.clear();
    }
}

/// Locks a device's access.
pub fn lock(access: &SharedAccess) -> MutexGuard<'_, Access> {
    locked(access)
}
