//! The message of the last failed call, kept per thread: the boundary sets it, and
//! [`super::last_error_message`] copies it out to C.
//!
//! Invariant: the message is that of the most recent call on this thread that failed (a
//! success leaves it alone); it is empty before any failure. Setting it reuses the thread's
//! buffer, so only failures cost an allocation, and only the first few.

use std::cell::RefCell;
use std::fmt::Write;

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
