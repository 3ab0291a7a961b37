//! Streams of another device. PyTorch's `record_stream` may name a stream of another GPU
//! (its own allocator then records the event on that stream's device), but an event of this
//! device cannot be recorded there: `cuEventRecord` needs the event and the stream in one
//! context. So a free that must wait for such a stream waits at once: the stream is
//! synchronised under its own context, and the freed block needs no event.
//!
//! Invariant: each function leaves the calling thread's context stack as it found it.

use std::ptr;

use cachalot_core::DeviceError;
use cudarc::driver::sys::{self, CUcontext, CUstream};

use super::driver::{check, has_symbols};

/// The driver entry points this needs (in every driver since CUDA 9.2; checked anyway, so
/// a driver without them keeps the old behaviour instead of panicking).
const SYMBOLS: [&str; 2] = ["cuStreamGetCtx", "cuStreamSynchronize"];

/// Whether the driver can tell a stream's context.
pub fn supported() -> bool {
    has_symbols(&SYMBOLS)
}

/// The context `stream` belongs to.
///
/// # Safety
/// [`supported`] returned true, and `stream` is a live stream handle (or a special one).
pub unsafe fn context_of(stream: CUstream) -> Result<CUcontext, DeviceError> {
    let mut ctx: CUcontext = ptr::null_mut();
    // SAFETY: the symbol resolved (caller's promise); the stream is live; valid out-pointer.
    check("cuStreamGetCtx", unsafe { sys::cuStreamGetCtx(stream, &mut ctx) })?;
    Ok(ctx)
}

/// Waits until the work queued on `stream` is done, with its context `ctx` current.
///
/// # Safety
/// As for [`context_of`]; `ctx` is the context [`context_of`] gave for `stream`.
pub unsafe fn synchronize(stream: CUstream, ctx: CUcontext) -> Result<(), DeviceError> {
    // SAFETY: `ctx` is a live context (it owns a live stream); pushed and popped below.
    check("cuCtxPushCurrent", unsafe { sys::cuCtxPushCurrent_v2(ctx) })?;
    // SAFETY: the stream is live and its context is current.
    let synced = check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream) });
    let mut popped: CUcontext = ptr::null_mut();
    // SAFETY: pops exactly the context pushed above, on the same thread.
    let popped = check("cuCtxPopCurrent", unsafe { sys::cuCtxPopCurrent_v2(&mut popped) });
    synced.and(popped)
}
