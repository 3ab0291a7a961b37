//! Text into callers' buffers, in the two ways the C ABI offers.
//!
//! [`write_text`] is all or nothing (summaries, snapshots): the text and a NUL are written
//! only when they fit, and the size needed is reported so the caller can ask first with a
//! NULL buffer. [`copy_truncated`] is `snprintf`'s way (error messages, which must never
//! fail): as much as fits, cut at a character boundary, always NUL-terminated.
//! Invariant: nothing is ever written past `buf_len` bytes, and nothing at all on failure.

use std::ffi::c_char;
use std::ptr;

use crate::error::Error;

/// Writes `text` and a NUL into `buf` when `buf_len` allows, and the bytes that takes (NUL
/// included) into `*out_len`. A NULL `buf` with `buf_len` 0 asks for the size only.
///
/// # Safety
/// `buf`, when not NULL, must point to `buf_len` writable bytes; `out_len`, when not NULL,
/// must point to a writable `size_t`.
pub unsafe fn write_text(text: &str, buf: *mut c_char, buf_len: usize, out_len: *mut usize) -> Result<(), Error> {
    if out_len.is_null() {
        return Err(Error::NullPointer("out_len"));
    }
    let needed = text.len() + 1;
    if buf.is_null() {
        if buf_len != 0 {
            return Err(Error::NullPointer("buf (with buf_len above 0)"));
        }
    } else {
        if buf_len < needed {
            return Err(Error::BufferTooSmall { needed, given: buf_len });
        }
        // SAFETY: `buf` holds `buf_len >= text.len() + 1` writable bytes (caller's promise and
        // the check above); the source is a distinct Rust string.
        unsafe {
            ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
            *buf.add(text.len()) = 0;
        }
    }
    // SAFETY: checked non-NULL above; the caller promises it is writable.
    unsafe { *out_len = needed };
    Ok(())
}

/// Copies as much of `text` as fits into `buf` (NUL-terminated, cut at a character
/// boundary); does nothing when `buf` is NULL or `buf_len` is 0.
///
/// # Safety
/// `buf`, when not NULL, must point to `buf_len` writable bytes.
pub unsafe fn copy_truncated(text: &str, buf: *mut c_char, buf_len: usize) {
    if buf.is_null() || buf_len == 0 {
        return;
    }
    let mut n = text.len().min(buf_len - 1);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: `n + 1 <= buf_len` bytes are written into the caller's buffer.
    unsafe {
        ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_text_is_all_or_nothing() {
        let mut buf = [b'x' as c_char; 8];
        let mut len = 99usize;
        // SAFETY: the buffer and the length live on this stack frame; sizes are honest.
        unsafe {
            assert_eq!(write_text("hello", ptr::null_mut(), 0, &mut len), Ok(()));
            assert_eq!(len, 6);
            len = 99;
            assert_eq!(
                write_text("too long!", buf.as_mut_ptr(), 8, &mut len),
                Err(Error::BufferTooSmall { needed: 10, given: 8 })
            );
            assert_eq!((len, buf[0]), (99, b'x' as c_char), "nothing written on failure");
            assert_eq!(write_text("hello", buf.as_mut_ptr(), 6, &mut len), Ok(()));
            assert_eq!(std::ffi::CStr::from_ptr(buf.as_ptr()).to_str(), Ok("hello"));
            assert!(write_text("hello", buf.as_mut_ptr(), 8, ptr::null_mut()).is_err());
            assert!(write_text("hello", ptr::null_mut(), 8, &mut len).is_err());
        }
    }

    #[test]
    fn copy_truncated_cuts_at_characters() {
        let mut buf = [b'x' as c_char; 4];
        // SAFETY: as above.
        unsafe {
            copy_truncated("aé€", buf.as_mut_ptr(), 4); // 'a' (1 byte) + 'é' (2 bytes) fit in 3
            assert_eq!(std::ffi::CStr::from_ptr(buf.as_ptr()).to_str(), Ok("aé"));
            copy_truncated("€", buf.as_mut_ptr(), 3); // 3 bytes do not fit in 2
            assert_eq!(buf[0], 0);
        }
    }
}
