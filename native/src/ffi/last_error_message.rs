//! `cachalot_last_error_message`: the C function that copies this thread's last error (kept
//! by [`super::last_error`]) into a caller's buffer.
//!
//! Invariant: it never changes the message it copies, so a caller may ask for the length
//! first and then for the text.

use std::ffi::c_char;

use super::boundary;
use super::buffer;
use super::last_error::get;

/// Copies the message of this thread's most recent failed cachalot call into `buf`, as
/// `snprintf` does: at most `buf_len - 1` bytes and a terminating NUL, cut at a character
/// boundary when it does not fit. Returns the message's full length in bytes (without the
/// NUL), so a return value `>= buf_len` means it was cut; 0 when no call has failed on this
/// thread, or when the thread is exiting and its messages are gone. With `buf` NULL or `buf_len` 0 nothing is written and only the length returned.
///
/// # Safety
/// `buf`, when not NULL, must point to `buf_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn cachalot_last_error_message(buf: *mut c_char, buf_len: usize) -> usize {
    boundary::value_or(0, || {
        let m = get();
        // SAFETY: the caller promises `buf_len` writable bytes at `buf` when it is not NULL.
        unsafe { buffer::copy_truncated(&m, buf, buf_len) };
        Ok(m.len())
    })
}
