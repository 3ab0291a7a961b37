//! The library's version, for callers that check what they loaded.
//!
//! Invariant: the string is the crate's version (`MAJOR.MINOR.PATCH`), static and
//! NUL-terminated; the C ABI only grows within a major version.

use std::ffi::c_char;

const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The library's version, e.g. `"0.1.0"`. The string is static: never free it.
#[no_mangle]
pub extern "C" fn cachalot_version() -> *const c_char {
    VERSION.as_ptr().cast()
}
