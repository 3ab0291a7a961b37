//! The message of the last failed call, kept per thread, and the C function that copies it
//! into a caller's buffer.
//!
//! Invariant: the message is that of the most recent call on this thread that failed (a
//! success leaves it alone); it is empty before any failure. Setting it reuses the thread's
//! buffer, so only failures cost an allocation, and only the first few.

use std::cell::RefCell;
use std::ffi::c_char;
use std::fmt::Write;

use super::boundary;
use super::buffer;
use crate::error::Error;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records `e` as this thread's last error. While the thread is being torn down (a C
/// destructor or `atexit` handler calling in after Rust's thread-locals are gone) the
/// message is dropped: the status still says what failed, and aborting would be worse.
pub fn set(e: &Error) {
    let _ = LAST_ERROR.try_with(|m| {
        let mut m = m.borrow_mut();
        m.clear();
        let _ = write!(m, "{e}");
    });
}

/// This thread's last error message (for tests and Rust callers); empty during teardown.
pub fn get() -> String {
    LAST_ERROR.try_with(|m| m.borrow().clone()).unwrap_or_default()
}

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
