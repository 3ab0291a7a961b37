//! The panic boundary every C function body runs inside: a panic is caught and becomes
//! `CACHALOT_STATUS_INTERNAL`, an error becomes its status code, and either way the message
//! is kept as the thread's last error.
//!
//! Invariant: no unwinding crosses an `extern "C"` function of this crate; on success
//! nothing here allocates or touches the last error, so the boundary costs nothing on the
//! hot path.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::last_error;
use super::status::Status;
use crate::error::Error;

/// Runs `f`, returning `Ok` or the status of its error or panic.
#[inline]
pub fn status(f: impl FnOnce() -> Result<(), Error>) -> Status {
    match run(f) {
        Ok(()) => Status::Ok,
        Err(status) => status,
    }
}

/// Runs `f`, returning its value, or `default` after recording its error or panic.
#[inline]
pub fn value_or<T>(default: T, f: impl FnOnce() -> Result<T, Error>) -> T {
    run(f).unwrap_or(default)
}

/// Runs `f`; an error or a panic is recorded as the last error and returned as a status.
#[inline]
pub fn run<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Status> {
    // AssertUnwindSafe: state shared across a panic is the allocator, behind a Mutex whose
    // poisoning turns every later call into `Error::Poisoned`.
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(fail(&e)),
        Err(payload) => Err(fail(&Error::Panic(panic_message(payload.as_ref())))),
    }
}

#[cold]
fn fail(e: &Error) -> Status {
    last_error::set(e);
    Status::of(e)
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panic: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panic: {s}")
    } else {
        "panic".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_internal_errors() {
        let s = status(|| panic!("boom"));
        assert_eq!(s, Status::Internal);
        assert!(last_error::get().contains("boom"), "{}", last_error::get());
        assert_eq!(value_or(7, || Err::<i32, _>(Error::NullPointer("x"))), 7);
        assert_eq!(last_error::get(), "x is NULL");
        assert_eq!(status(|| Ok(())), Status::Ok);
        assert_eq!(last_error::get(), "x is NULL", "success leaves the last error alone");
    }
}
