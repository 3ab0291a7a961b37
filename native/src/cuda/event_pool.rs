//! The events behind stream-ordered reuse, created once (timing disabled: the cheapest kind)
//! and recycled, so a `record_stream` free costs one `cuEventRecord`, not a create and a
//! destroy.
//!
//! An event is named to the core by its index in `all` plus one (0 is never a handle), so a
//! handle is checked by a bounds test and never turned back into a pointer. Invariants:
//! every event ever created is in `all` until [`EventPool::destroy_all`]; an event is in
//! `idle` iff it is not lent out; the pool's methods are called with the event's context
//! current.

use std::ptr;

use cachalot_core::{DeviceError, Event};
use cudarc::driver::sys::{self, CUevent, CUevent_flags};

use super::driver::check;

/// Events of one context, created on demand and reused.
#[derive(Debug, Default)]
pub struct EventPool {
    all: Vec<CUevent>,
    idle: Vec<Event>,
}

impl EventPool {
    /// Lends an event: an idle one, or a new one when none is idle.
    pub fn acquire(&mut self) -> Result<Event, DeviceError> {
        if let Some(handle) = self.idle.pop() {
            return Ok(handle);
        }
        let mut event: CUevent = ptr::null_mut();
        // SAFETY: the caller has the context current; `event` is a valid out-pointer.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut event, CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        })?;
        self.all.push(event);
        Ok(self.all.len() as Event)
    }

    /// The driver's event for a handle lent by [`EventPool::acquire`].
    #[inline]
    pub fn get(&self, handle: Event) -> Result<CUevent, DeviceError> {
        let index = (handle as usize).wrapping_sub(1);
        self.all.get(index).copied().ok_or(DeviceError::Driver { call: "cuEvent (unknown event handle)", code: 400 })
    }

    /// Takes a lent event back for reuse.
    pub fn release(&mut self, handle: Event) {
        debug_assert!(self.get(handle).is_ok() && !self.idle.contains(&handle), "event {handle} returned twice");
        self.idle.push(handle);
    }

    /// Destroys every event, lent or idle (the pool's owner is going away).
    pub fn destroy_all(&mut self) {
        for event in self.all.drain(..) {
            // SAFETY: each event was created by this pool and is destroyed once (drained).
            let _ = unsafe { sys::cuEventDestroy_v2(event) };
        }
        self.idle.clear();
    }
}
