//! `CudaDevice`: the core's `Device` over one GPU, through the CUDA driver API.
//!
//! Segments come from `cuMemAlloc` and go back through `cuMemFree`; stream-ordered reuse uses
//! pooled events (`cuEventRecord`/`cuEventQuery`/`cuEventSynchronize`) on the caller's raw
//! `CUstream` (a stream handle is the `CUstream` value as an integer; 0 is the legacy default
//! stream). Where the device supports it, virtual memory (`virtual_memory.rs`) backs the
//! paged policy and expandable segments. Each driver call runs with the device's primary
//! context current (see `context.rs`). The device keeps the address and size of every live segment, so it can
//! refuse to free anything else and can return everything when it is dropped.
//!
//! Invariants: `segments` holds exactly the segments `cuMemAlloc` gave and `cuMemFree` has
//! not taken back; dropping the device frees them all, destroys every event and releases the
//! context. Only the allocator's slow paths reach this type: a malloc or free served from
//! the cache makes no driver call.

use std::collections::HashMap;
use std::time::Instant;

use cachalot_core::{Device, DeviceError, Event, PhysHandle, Stream};
use cudarc::driver::sys::{self, CUdeviceptr, CUstream};

use super::context::PrimaryContext;
use super::driver::check;
use super::event_pool::EventPool;
use super::foreign_stream;
use super::free_memory_memo::FreeMemoryMemo;
use super::virtual_memory::VirtualMemory;
use crate::error::Error;

/// One CUDA device's memory and streams, as the allocator sees them.
#[derive(Debug)]
pub struct CudaDevice {
    ctx: PrimaryContext,
    total: u64,
    events: EventPool,
    segments: HashMap<u64, u64>,
    /// What `cuMemGetInfo` last said, kept for the policy's slow paths (`free_memory_memo.rs`).
    free: FreeMemoryMemo,
    epoch: Instant,
    vm: Option<VirtualMemory>,
    /// Whether the driver can tell a stream's context (streams of another device).
    knows_stream_contexts: bool,
}

// SAFETY: the driver API is thread-safe and its handles (the retained primary context, the
// events) are valid on every thread of the process; CudaDevice makes its context current on
// whichever thread calls it, and every method, `&self` ones included (`free_memory` updates its
// memo), is called under the allocator's lock (or the device hub's mutex). CudaDevice is not
// `Sync`, so no two threads reach it at once.
unsafe impl Send for CudaDevice {}

impl CudaDevice {
    /// The device with CUDA ordinal `ordinal`; an error (never a panic) when there is no
    /// driver or no such device.
    pub fn new(ordinal: i32) -> Result<CudaDevice, Error> {
        Self::with_virtual_memory(ordinal, true)
    }

    /// The device with CUDA ordinal `ordinal`, using virtual memory only if `use_vm` and the
    /// device supports it.
    pub fn with_virtual_memory(ordinal: i32, use_vm: bool) -> Result<CudaDevice, Error> {
        let ctx = PrimaryContext::retain(ordinal)?;
        let (total, vm) = {
            let _current = ctx.enter()?;
            let (_, total) = mem_get_info()?;
            // SAFETY: `ctx` is retained by this device and current (the guard above); the device
            // calls `release_all` in its Drop, before `ctx` is released.
            (total, if use_vm { unsafe { VirtualMemory::probe(ctx.device(), ordinal, ctx.raw()) } } else { None })
        };
        let knows_stream_contexts = foreign_stream::supported();
        let segments = HashMap::new();
        Ok(CudaDevice {
            ctx,
            total,
            events: EventPool::default(),
            segments,
            free: FreeMemoryMemo::default(),
            epoch: Instant::now(),
            vm,
            knows_stream_contexts,
        })
    }

    /// Runs a virtual-memory call with the context current.
    fn with_vm<T>(&mut self, f: impl FnOnce(&mut VirtualMemory) -> Result<T, DeviceError>) -> Result<T, DeviceError> {
        let _current = self.ctx.enter()?;
        f(self.vm.as_mut().ok_or(DeviceError::Unsupported("virtual memory"))?)
    }

    /// The ordinal of the device that holds device memory at `address` (any CUDA
    /// allocation, not only cachalot's).
    pub fn ordinal_of(address: u64) -> Result<i32, Error> {
        crate::cuda::driver::init()?;
        let mut ordinal: std::ffi::c_int = -1;
        // SAFETY: the driver is initialised; `ordinal` is a valid out-pointer of the type the
        // DEVICE_ORDINAL attribute writes (an int).
        check("cuPointerGetAttribute", unsafe {
            sys::cuPointerGetAttribute(
                std::ptr::addr_of_mut!(ordinal).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                address,
            )
        })?;
        Ok(ordinal)
    }
}

/// (free, total) bytes of the current context's device.
fn mem_get_info() -> Result<(u64, u64), DeviceError> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: a context is current (callers hold a `Current` guard); valid out-pointers.
    check("cuMemGetInfo", unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
    Ok((free as u64, total as u64))
}

#[inline]
fn raw_stream(stream: Stream) -> CUstream {
    stream as usize as CUstream
}

impl Device for CudaDevice {
    fn total_memory(&self) -> u64 {
        self.total
    }

    fn free_memory(&self) -> u64 {
        self.free
            .free(Instant::now(), || self.ctx.enter().and_then(|_current| mem_get_info()).ok().map(|(free, _)| free))
    }

    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        let bytes = usize::try_from(size).map_err(|_| DeviceError::OutOfMemory)?;
        let _current = self.ctx.enter()?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: the context is current; `ptr` is a valid out-pointer.
        let allocated = check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) });
        self.free.asked_for(size, allocated.is_ok());
        allocated?;
        self.segments.insert(ptr, size);
        Ok(ptr)
    }

    fn free(&mut self, address: u64, size: u64) -> Result<(), DeviceError> {
        if self.segments.get(&address) != Some(&size) {
            return Err(DeviceError::Driver { call: "cuMemFree (not a live segment of this device)", code: 1 });
        }
        let _current = self.ctx.enter()?;
        // SAFETY: `address` is a live segment from cuMemAlloc (checked above), freed once.
        check("cuMemFree", unsafe { sys::cuMemFree_v2(address) })?;
        self.free.forget();
        self.segments.remove(&address);
        Ok(())
    }

    fn record_event(&mut self, stream: Stream) -> Result<Event, DeviceError> {
        let _current = self.ctx.enter()?;
        let raw = raw_stream(stream);
        if self.knows_stream_contexts && !raw.is_null() {
            // SAFETY: the symbols resolved (knows_stream_contexts); the stream is the caller's,
            // live (the C ABI documents it).
            let owner = unsafe { foreign_stream::context_of(raw) }?;
            if owner != self.ctx.raw() {
                // SAFETY: as above; `owner` is the stream's own context.
                unsafe { foreign_stream::synchronize(raw, owner) }?;
                // The stream's work is done. A pooled event is one whose last record has
                // completed (or was never made), so it reads as complete: nothing to wait for.
                return self.events.acquire();
            }
        }
        let handle = self.events.acquire()?;
        let event = self.events.get(handle)?;
        // SAFETY: the event is live and owned by this context; the stream handle is the
        // caller's, of this device (a stream of another device was waited for above).
        if let Err(e) = check("cuEventRecord", unsafe { sys::cuEventRecord(event, raw_stream(stream)) }) {
            self.events.release(handle);
            return Err(e);
        }
        Ok(handle)
    }

    fn query_event(&mut self, event: Event) -> Result<bool, DeviceError> {
        let event = self.events.get(event)?;
        let _current = self.ctx.enter()?;
        // SAFETY: the event is live (the pool destroys events only when the device drops).
        match unsafe { sys::cuEventQuery(event) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check("cuEventQuery", r).map(|()| true),
        }
    }

    fn synchronize_event(&mut self, event: Event) -> Result<(), DeviceError> {
        let event = self.events.get(event)?;
        let _current = self.ctx.enter()?;
        // SAFETY: as in query_event.
        check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(event) })
    }

    fn release_event(&mut self, event: Event) {
        self.events.release(event);
    }

    fn synchronize_stream(&mut self, stream: Stream) -> Result<(), DeviceError> {
        if self.vm.is_none() {
            return Ok(()); // only unmapping needs it, and only virtual memory unmaps
        }
        let _current = self.ctx.enter()?;
        // SAFETY: cuStreamSynchronize resolved (virtual memory was probed); the stream handle is
        // one the caller allocated on (the C ABI documents that it must be a valid stream).
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(raw_stream(stream)) })
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn vm_granularity(&self) -> Option<u64> {
        self.vm.as_ref().map(VirtualMemory::granularity)
    }

    fn vm_reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.with_vm(|vm| vm.reserve(size))
    }

    fn vm_release(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.with_vm(|vm| vm.release(addr, size))
    }

    fn vm_create(&mut self, size: u64) -> Result<PhysHandle, DeviceError> {
        let created = self.with_vm(|vm| vm.create(size));
        self.free.asked_for(size, created.is_ok());
        created
    }

    fn vm_destroy(&mut self, handle: PhysHandle, size: u64) -> Result<(), DeviceError> {
        self.with_vm(|vm| vm.destroy(handle, size))?;
        self.free.forget();
        Ok(())
    }

    fn vm_map(&mut self, addr: u64, size: u64, handle: PhysHandle) -> Result<(), DeviceError> {
        self.with_vm(|vm| vm.map(addr, size, handle))
    }

    fn vm_set_access(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.with_vm(|vm| vm.set_access(addr, size))
    }

    fn vm_unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.with_vm(|vm| vm.unmap(addr, size))
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let Ok(_current) = self.ctx.enter() else {
            return; // the driver is gone (process teardown): nothing can be given back
        };
        self.events.destroy_all();
        if let Some(vm) = &mut self.vm {
            vm.release_all();
        }
        for (address, _) in self.segments.drain() {
            // SAFETY: each live segment came from cuMemAlloc and is freed once (drained).
            let _ = unsafe { sys::cuMemFree_v2(address) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a driver (CI), creating a device is an error that says so; with one, device
    /// 0 works and a huge ordinal is refused by name.
    #[test]
    fn creation_never_panics() {
        match CudaDevice::new(0) {
            Err(Error::NoDevice(msg)) => assert!(msg.contains("CUDA"), "{msg}"),
            Err(e) => panic!("unexpected error: {e}"),
            Ok(mut d) => {
                assert!(d.total_memory() > 0);
                let a = d.allocate(2 << 20).unwrap();
                d.free(a, 2 << 20).unwrap();
                assert!(matches!(CudaDevice::new(4096), Err(Error::NoDevice(_))));
            }
        }
    }
}
