//! The bounded history of allocator actions that snapshots carry, in PyTorch's
//! `device_traces` vocabulary.
//!
//! Invariants: at most `capacity` entries are kept, the oldest dropped first; with a
//! capacity of 0 nothing is recorded and recording costs one comparison.

use alloc::vec::Vec;
use serde::Serialize;

use crate::base::device::Stream;

/// What happened, with PyTorch's action names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A block was handed out.
    Alloc,
    /// The caller freed a block.
    FreeRequested,
    /// The block became reusable (at once, or after its events completed).
    FreeCompleted,
    /// A segment was obtained from the device.
    SegmentAlloc,
    /// A segment was returned to the device.
    SegmentFree,
    /// Pages were mapped into a virtual range.
    SegmentMap,
    /// Pages were unmapped from a virtual range.
    SegmentUnmap,
    /// A request ended out of memory (`addr` holds the device's free bytes).
    Oom,
}

/// One recorded action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TraceEntry {
    /// What happened.
    pub action: Action,
    /// Address of the block or segment.
    pub addr: u64,
    /// Size in bytes (the requested size for alloc and free).
    pub size: u64,
    /// The stream involved.
    pub stream: Stream,
    /// The device's clock.
    pub time_us: u64,
}

/// A ring of the most recent actions.
#[derive(Clone, Debug, Default)]
pub struct History {
    capacity: usize,
    entries: Vec<TraceEntry>,
    next: usize,
}

impl History {
    /// A history that keeps `capacity` entries (0: off).
    pub fn new(capacity: usize) -> History {
        History { capacity, entries: Vec::new(), next: 0 }
    }

    /// True when recording.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Records an entry, dropping the oldest when full.
    #[inline]
    pub fn record(&mut self, entry: TraceEntry) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() < self.capacity {
            self.entries.push(entry);
        } else {
            self.entries[self.next] = entry;
            self.next = (self.next + 1) % self.capacity;
        }
    }

    /// Entries oldest first.
    pub fn entries(&self) -> Vec<TraceEntry> {
        let mut out = Vec::with_capacity(self.entries.len());
        out.extend_from_slice(&self.entries[self.next..]);
        out.extend_from_slice(&self.entries[..self.next]);
        out
    }

    /// Forgets every entry and keeps `capacity` from now on.
    pub fn reset(&mut self, capacity: usize) {
        *self = History::new(capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(addr: u64) -> TraceEntry {
        TraceEntry { action: Action::Alloc, addr, size: 1, stream: 0, time_us: 0 }
    }

    #[test]
    fn keeps_the_newest_entries_in_order() {
        let mut h = History::new(3);
        for a in 0..5 {
            h.record(entry(a));
        }
        let addrs: Vec<u64> = h.entries().iter().map(|e| e.addr).collect();
        assert_eq!(addrs, [2, 3, 4]);
    }

    #[test]
    fn capacity_zero_records_nothing() {
        let mut h = History::new(0);
        h.record(entry(1));
        assert!(h.entries().is_empty());
    }
}
