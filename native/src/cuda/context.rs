//! A device's primary context — the one the CUDA runtime and PyTorch use — retained for as
//! long as a [`PrimaryContext`] lives, and made current around each driver call.
//!
//! Threads that call in may have the context current already (PyTorch's do), none at all (a
//! plain C caller's), or another one (a caller working on another device). [`PrimaryContext::enter`]
//! handles all three: nothing to do; set it, and unset it again when the guard drops; or push
//! it and pop it again when the guard drops. Either way the caller's context stack is as it
//! was after the call: a thread with no context is never left with device N's current (which
//! would make N the CUDA runtime's current device on that thread). Invariants: the context is
//! retained exactly once per value and released exactly once, on drop; every driver call
//! made for device N runs inside a guard of device N's context.

use std::marker::PhantomData;
use std::ptr;

use cachalot_core::DeviceError;
use cudarc::driver::sys::{self, CUcontext, CUdevice};

use super::driver::{self, check};
use crate::error::Error;

/// A retained primary context of one device.
#[derive(Debug)]
pub struct PrimaryContext {
    device: CUdevice,
    ctx: CUcontext,
}

impl PrimaryContext {
    /// Retains the primary context of device `ordinal`, initialising the driver first.
    pub fn retain(ordinal: i32) -> Result<PrimaryContext, Error> {
        driver::init()?;
        let mut count = 0;
        // SAFETY: the driver is initialised (init succeeded) and `count` is a valid out-pointer.
        check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) })?;
        if ordinal < 0 || ordinal >= count {
            return Err(Error::NoDevice(format!(
                "CUDA device {ordinal} does not exist: this machine has {count} CUDA device{}",
                if count == 1 { "" } else { "s" }
            )));
        }
        let mut device: CUdevice = 0;
        // SAFETY: the ordinal is in range and `device` is a valid out-pointer.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal) })?;
        let mut ctx: CUcontext = ptr::null_mut();
        // SAFETY: `device` came from cuDeviceGet; `ctx` is a valid out-pointer. The matching
        // release is in Drop.
        check("cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) })?;
        Ok(PrimaryContext { device, ctx })
    }

    /// The context itself (to compare with a stream's).
    pub fn raw(&self) -> CUcontext {
        self.ctx
    }

    /// The device whose primary context this is.
    pub fn device(&self) -> CUdevice {
        self.device
    }

    /// Makes the context current on this thread until the guard drops (see the module docs).
    #[inline]
    pub fn enter(&self) -> Result<Current<'_>, DeviceError> {
        let mut current: CUcontext = ptr::null_mut();
        // SAFETY: the driver is initialised (a PrimaryContext exists); valid out-pointer.
        check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut current) })?;
        let undo = if current == self.ctx {
            Undo::Nothing
        } else if current.is_null() {
            // SAFETY: `self.ctx` is retained for as long as `self` lives; the guard unsets it.
            check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })?;
            Undo::Unset
        } else {
            // SAFETY: as above; the guard pops it again.
            check("cuCtxPushCurrent", unsafe { sys::cuCtxPushCurrent_v2(self.ctx) })?;
            Undo::Pop
        };
        Ok(Current { undo, _not_send: PhantomData })
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `PrimaryContext::retain`; `device` is valid. A failure
        // (the driver shutting down) leaves nothing to undo.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// What a guard does when it drops, to leave the thread's context stack as it found it.
enum Undo {
    /// The context was current already.
    Nothing,
    /// The thread had no context: unset it again.
    Unset,
    /// The thread had another context: pop this one off it.
    Pop,
}

/// While alive, the primary context is current on this thread (a guard: not `Send`).
pub struct Current<'a> {
    undo: Undo,
    _not_send: PhantomData<&'a *mut ()>,
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        match self.undo {
            Undo::Nothing => {}
            Undo::Unset => {
                // SAFETY: on the thread `enter` ran on (the guard is not Send), whose stack held
                // nothing but the context `enter` set: NULL restores that.
                let _ = unsafe { sys::cuCtxSetCurrent(ptr::null_mut()) };
            }
            Undo::Pop => {
                let mut popped: CUcontext = ptr::null_mut();
                // SAFETY: pops exactly the context `enter` pushed on this same thread (the
                // guard is not Send); valid out-pointer.
                let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
            }
        }
    }
}
