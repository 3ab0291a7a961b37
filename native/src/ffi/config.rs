//! What a config string means beyond its syntax: `cachalot_config_notes` names the keys it
//! sets that change nothing under the policy it selects (PyTorch's split and
//! expandable-segment settings under cachalot's policy, which maps pages), so a program or
//! PyTorch's plug-in can warn before they silently do nothing.
//!
//! Invariant: the text is built from the parsed config alone, never from an allocator, and
//! written only when it fits whole.

use std::ffi::c_char;

use super::boundary;
use super::buffer::write_text;
use super::handle::read_config;
use super::status::Status;

/// Writes the notes on `config` (NULL: `CACHALOT_ALLOC_CONF`), one line each, as
/// `cachalot_memory_summary` writes its table: NUL-terminated into `buf`, the bytes it takes,
/// NUL included, into `*out_len`; an empty string when every key takes effect. A config
/// that does not parse fails with `CACHALOT_STATUS_INVALID_CONFIG`.
///
/// # Safety
/// `config` must be NULL or a NUL-terminated string; `buf` must be NULL or point to
/// `buf_len` writable bytes; `out_len` must be NULL or point to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn cachalot_config_notes(
    config: *const c_char,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> Status {
    boundary::status(|| {
        // SAFETY: the caller's promises about each pointer are passed on unchanged.
        unsafe {
            let notes = read_config(config)?.moot_key_notes().join("\n");
            write_text(&notes, buf, buf_len, out_len)
        }
    })
}
