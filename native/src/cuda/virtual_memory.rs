//! Virtual memory on one GPU: address ranges reserved with `cuMemAddressReserve`, physical
//! pages made with `cuMemCreate` and mapped with `cuMemMap` + `cuMemSetAccess`, undone with
//! `cuMemUnmap`, `cuMemRelease` and `cuMemAddressFree` — what cachalot's paged policy and
//! PyTorch's expandable segments need.
//!
//! Probed once per device: a driver that lacks a symbol, or a device that does not support
//! virtual memory management, gets no `VirtualMemory`, and the allocator falls back to
//! classic segments. Invariants: `mappings` holds exactly what is mapped, `handles` exactly
//! the physical pages not yet released, `reservations` exactly the live ranges; every call
//! runs with the device's context current (the caller holds the guard); `release_all`
//! undoes everything.

use std::collections::{BTreeMap, HashMap};

use cachalot_core::{DeviceError, PhysHandle};
use cudarc::driver::sys::{self, CUcontext, CUdevice, CUmemAllocationProp, CUmemLocation};

use super::driver::{check, has_symbols};
use super::peer_access::{self, SharedAccess};

/// The driver entry points virtual memory needs; all must resolve for it to be used.
const SYMBOLS: [&str; 11] = [
    "cuDeviceGetAttribute",
    "cuDeviceCanAccessPeer",
    "cuStreamSynchronize",
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemSetAccess",
    "cuMemUnmap",
];

/// One device's reserved ranges, physical pages and mappings.
#[derive(Debug)]
pub struct VirtualMemory {
    ordinal: i32,
    granularity: u64,
    reservations: HashMap<u64, u64>,
    handles: HashMap<PhysHandle, u64>,
    mappings: BTreeMap<u64, (u64, PhysHandle)>,
    /// False once the driver refused to unmap several mappings in one call.
    unmap_ranges: bool,
    /// The mappings again, with the other GPUs of this process they are open to.
    access: SharedAccess,
}

fn location(ordinal: i32) -> CUmemLocation {
    CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal }
}

fn allocation_prop(ordinal: i32) -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: location(ordinal),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

impl VirtualMemory {
    /// Virtual memory of device `device` (ordinal `ordinal`, primary context `ctx`), if the
    /// driver and the device support it.
    ///
    /// # Safety
    /// `ctx` is the device's retained primary context, current on this thread, and stays
    /// retained until [`VirtualMemory::release_all`].
    pub unsafe fn probe(device: CUdevice, ordinal: i32, ctx: CUcontext) -> Option<VirtualMemory> {
        if !has_symbols(&SYMBOLS) {
            return None;
        }
        let mut supported: std::ffi::c_int = 0;
        let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
        // SAFETY: the symbol resolved (checked above); valid out-pointer and device handle.
        check("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut supported, attribute, device) }).ok()?;
        if supported == 0 {
            return None;
        }
        let mut granularity = 0usize;
        let prop = allocation_prop(ordinal);
        let option = sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
        // SAFETY: valid out-pointer and a fully initialised property struct.
        check("cuMemGetAllocationGranularity", unsafe {
            sys::cuMemGetAllocationGranularity(&mut granularity, &prop, option)
        })
        .ok()?;
        if granularity == 0 {
            return None;
        }
        Some(VirtualMemory {
            ordinal,
            granularity: granularity as u64,
            reservations: HashMap::new(),
            handles: HashMap::new(),
            mappings: BTreeMap::new(),
            unmap_ranges: true,
            // SAFETY: `ctx` is this device's primary context, retained until release_all
            // closes the access (this function's contract).
            access: unsafe { peer_access::join(ordinal, ctx) },
        })
    }

    /// The page size of mappings.
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Reserves `size` bytes of address space.
    pub fn reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        let mut ptr = 0;
        // SAFETY: valid out-pointer; size is a multiple of the granularity (the core rounds).
        check("cuMemAddressReserve", unsafe { sys::cuMemAddressReserve(&mut ptr, size as usize, 0, 0, 0) })?;
        self.reservations.insert(ptr, size);
        Ok(ptr)
    }

    /// Frees a range from [`VirtualMemory::reserve`] (nothing may be mapped in it).
    pub fn release(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        if self.reservations.get(&addr) != Some(&size) {
            return Err(DeviceError::Driver { call: "cuMemAddressFree (not a live range)", code: 1 });
        }
        // SAFETY: a live range of this device, released once.
        check("cuMemAddressFree", unsafe { sys::cuMemAddressFree(addr, size as usize) })?;
        self.reservations.remove(&addr);
        Ok(())
    }

    /// Creates `size` bytes of physical memory on the device.
    pub fn create(&mut self, size: u64) -> Result<PhysHandle, DeviceError> {
        let mut handle = 0;
        let prop = allocation_prop(self.ordinal);
        // SAFETY: valid out-pointer and property struct.
        check("cuMemCreate", unsafe { sys::cuMemCreate(&mut handle, size as usize, &prop, 0) })?;
        self.handles.insert(handle, size);
        Ok(handle)
    }

    /// Releases physical memory from [`VirtualMemory::create`] (it must be unmapped).
    pub fn destroy(&mut self, handle: PhysHandle, size: u64) -> Result<(), DeviceError> {
        if self.handles.get(&handle) != Some(&size) {
            return Err(DeviceError::Driver { call: "cuMemRelease (not a live handle)", code: 1 });
        }
        // SAFETY: a live handle, released once (the core unmaps it first).
        check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })?;
        self.handles.remove(&handle);
        Ok(())
    }

    /// Maps the whole of `handle` at `addr`.
    pub fn map(&mut self, addr: u64, size: u64, handle: PhysHandle) -> Result<(), DeviceError> {
        // SAFETY: `addr` lies in a live reservation and `handle` is live (the core checks
        // both through its own bookkeeping); the driver refuses overlaps.
        check("cuMemMap", unsafe { sys::cuMemMap(addr, size as usize, 0, handle, 0) })?;
        self.mappings.insert(addr, (size, handle));
        peer_access::lock(&self.access).mapped(addr, size);
        Ok(())
    }

    /// Grants read and write access to a mapped range to the device and to the other GPUs
    /// this process allocates on that can reach it (`peer_access.rs`).
    pub fn set_access(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        peer_access::lock(&self.access).grant(addr, size)
    }

    /// The other GPUs this device's mappings are open to.
    pub fn peers(&self) -> Vec<i32> {
        peer_access::lock(&self.access).peers().to_vec()
    }

    /// Unmaps `[addr, addr + size)`, made of whole mappings: in one call where the driver
    /// allows it (tried once), else mapping by mapping.
    pub fn unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        let inside: Vec<(u64, u64)> = self.mappings.range(addr..addr + size).map(|(&a, &(s, _))| (a, s)).collect();
        if inside.first().map(|m| m.0) != Some(addr) || inside.iter().map(|m| m.1).sum::<u64>() != size {
            return Err(DeviceError::Driver { call: "cuMemUnmap (not whole mappings)", code: 1 });
        }
        // Held across the calls, so no peer is granted access to a mapping going away.
        let mut access = peer_access::lock(&self.access);
        if inside.len() > 1 && self.unmap_ranges {
            // SAFETY: the range is exactly a run of live mappings (checked above).
            if unsafe { sys::cuMemUnmap(addr, size as usize) } == sys::CUresult::CUDA_SUCCESS {
                for (a, _) in inside {
                    self.mappings.remove(&a);
                    access.unmapped(a);
                }
                return Ok(());
            }
            self.unmap_ranges = false;
        }
        for (a, s) in inside {
            // SAFETY: a live mapping, unmapped once.
            check("cuMemUnmap", unsafe { sys::cuMemUnmap(a, s as usize) })?;
            self.mappings.remove(&a);
            access.unmapped(a);
        }
        Ok(())
    }

    /// Unmaps everything, releases every page and range (the device is going away).
    pub fn release_all(&mut self) {
        peer_access::lock(&self.access).close();
        for (&addr, &(size, _)) in &self.mappings {
            // SAFETY: each live mapping is unmapped once (the map is cleared below).
            let _ = unsafe { sys::cuMemUnmap(addr, size as usize) };
        }
        self.mappings.clear();
        for &handle in self.handles.keys() {
            // SAFETY: each live handle is released once.
            let _ = unsafe { sys::cuMemRelease(handle) };
        }
        self.handles.clear();
        for (&addr, &size) in &self.reservations {
            // SAFETY: each live range is freed once.
            let _ = unsafe { sys::cuMemAddressFree(addr, size as usize) };
        }
        self.reservations.clear();
    }
}
