//! What the allocator keeps about CUDA graph captures: how many are underway, the freed
//! blocks whose events wait for them to end, and the streams recorded as uses during them.
//! The rules that change these are `capture.rs`'s; this file holds the state alone, so the
//! allocator can own it without importing the code that acts on it.
//!
//! Invariants: `capture.rs`'s (a block is in `deferred` iff it is a pending free with no
//! event recorded; `deferred` is empty whenever no capture is underway, unless recording an
//! event failed at the end of the last one).

use alloc::vec::Vec;

use crate::base::device::Stream;
use crate::data::addr_map::IdMap;

/// What the allocator keeps about captures.
#[derive(Clone, Debug, Default)]
pub struct Captures {
    pub(in crate::engine) underway: u32,
    /// Freed blocks whose events wait for the end of the captures, with their stream uses.
    pub(in crate::engine) deferred: Vec<(u32, Vec<Stream>)>,
    /// Streams recorded as uses of a live block while a capture was underway.
    pub(in crate::engine) recorded_during: IdMap<Vec<Stream>>,
}

impl Captures {
    /// Whether block `id` waits for the captures to end.
    pub fn is_deferred(&self, id: u32) -> bool {
        self.deferred.iter().any(|(d, _)| *d == id)
    }

    /// True while no capture is underway and nothing waits for one to end.
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.underway == 0 && self.deferred.is_empty() && self.recorded_during.is_empty()
    }
}
