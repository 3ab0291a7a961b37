//! Where the pickle machine (`pickle.rs`) reads its bytes: a slice, or a stream the caller
//! reads as the machine asks, so that a file is never held whole.
//!
//! Invariant: `next(n)` gives exactly `n` bytes, the next ones, or `None` and nothing.

/// Where the machine reads a pickle's bytes: a slice, or a stream the caller reads as the
/// machine asks (the CLI's file, never held whole).
pub trait PickleBytes {
    /// The next `n` bytes; `None` when fewer are left or they cannot be read (a stream keeps
    /// why, for its caller to say).
    fn next(&mut self, n: usize) -> Option<&[u8]>;
}

impl<B: PickleBytes + ?Sized> PickleBytes for &mut B {
    fn next(&mut self, n: usize) -> Option<&[u8]> {
        (**self).next(n)
    }
}

impl PickleBytes for &[u8] {
    fn next(&mut self, n: usize) -> Option<&[u8]> {
        if n > self.len() {
            return None;
        }
        let (taken, rest) = self.split_at(n);
        *self = rest;
        Some(taken)
    }
}
