//! Text reports into callers' buffers: `memory_summary` (the table of
//! `torch.cuda.memory_summary()`) and the snapshot JSON (the schema of
//! `torch.cuda.memory._snapshot()`, which PyTorch's memory_viz opens).
//!
//! Both follow `buffer::write_text`: call once with `buf` NULL and `buf_len` 0 to learn the
//! size, then with a buffer that large. Invariant: the text is built from one consistent
//! state of the allocator (taken under its lock) and written only when it fits whole.

use std::ffi::c_char;

use super::boundary;
use super::buffer::write_text;
use super::handle::borrow;
use super::status::Status;
use crate::sharing::SharedAllocator;

/// Writes the memory summary table (NUL-terminated) into `buf` and the bytes it takes, NUL
/// included, into `*out_len`. With `buf` NULL and `buf_len` 0 only `*out_len` is written.
/// A buffer too small fails with `CACHALOT_STATUS_BUFFER_TOO_SMALL` and writes nothing.
/// `abbreviated` leaves out the per-pool rows.
///
/// # Safety
/// `allocator` must be NULL or a live handle; `buf` must be NULL or point to `buf_len`
/// writable bytes; `out_len` must be NULL or point to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn cachalot_memory_summary(
    allocator: *const SharedAllocator,
    abbreviated: bool,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> Status {
    boundary::status(|| {
        // SAFETY: the caller's promises about each pointer are passed on unchanged.
        unsafe {
            let text = borrow(allocator)?.memory_summary(abbreviated)?;
            write_text(&text, buf, buf_len, out_len)
        }
    })
}

/// Writes the snapshot as JSON (NUL-terminated) into `buf`, as
/// `cachalot_memory_summary` writes the summary. Segments and blocks are always there;
/// `device_traces` holds history only when the config set `record_history:N`.
///
/// # Safety
/// As for `cachalot_memory_summary`.
#[no_mangle]
pub unsafe extern "C" fn cachalot_snapshot_json(
    allocator: *const SharedAllocator,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> Status {
    boundary::status(|| {
        // SAFETY: as in cachalot_memory_summary.
        unsafe {
            let text = borrow(allocator)?.snapshot_json()?;
            write_text(&text, buf, buf_len, out_len)
        }
    })
}
