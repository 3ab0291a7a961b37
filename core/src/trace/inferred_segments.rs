//! Segments inferred from a trace's own pointers, for a replay to place its segments where
//! the recorded run's were (an RMM CSV, or a snapshot without `segment_alloc` entries).
//!
//! PyTorch hands out the front of a fresh segment to the request that made it, so an
//! allocation whose pointer lies outside every segment seen so far is taken to have made
//! a segment that begins at that pointer, of the size PyTorch 2.11's rules give its request
//! under the default config (rounded to 512 bytes; 2 MiB for a small request, 20 MiB below
//! 10 MiB, else a multiple of 2 MiB). The list goes to
//! [`crate::SimDevice::follow_placements`] as a snapshot's recorded placements do; where the
//! replay under another config asks for other sizes, the device abandons the list and says
//! where.
//!
//! Invariants: the segments seen never overlap one another (a pointer inside one starts no
//! segment, and a segment that would reach into the next one seen is cut short of it, so
//! the device refuses its size rather than a later one's address); `placements` holds them
//! in the order their first allocations came; memory is proportional to the segments
//! inferred, never to the rows.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::base::size::{round_size, segment_size, LARGE_BUFFER, POWER2_INTERVALS};

/// The segments a trace's pointers imply, in the order they were made.
#[derive(Clone, Debug, Default)]
pub(crate) struct InferredSegments {
    /// Start → end of each segment seen.
    seen: BTreeMap<u64, u64>,
    /// (address, size) in order.
    placements: Vec<(u64, u64)>,
}

impl InferredSegments {
    /// An allocation of `size` bytes at `ptr`: a fresh segment when `ptr` lies in none seen.
    pub(crate) fn see(&mut self, ptr: u64, size: u64) {
        if ptr == 0 || self.seen.range(..=ptr).next_back().is_some_and(|(_, &end)| end > ptr) {
            return;
        }
        let len = segment_size(round_size(size, &[1; POWER2_INTERVALS]), LARGE_BUFFER);
        let next = self.seen.range(ptr..).next().map_or(u64::MAX, |(&start, _)| start);
        let end = ptr.saturating_add(len).min(next);
        self.seen.insert(ptr, end);
        self.placements.push((ptr, end - ptr));
    }

    /// The segments inferred, (address, size) in the order they were made.
    pub(crate) fn into_placements(self) -> Vec<(u64, u64)> {
        self.placements
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_outside_every_segment_starts_one_of_pytorchs_size() {
        let mut s = InferredSegments::default();
        let base = 0x7f00_0000_0000;
        s.see(base, 100); // small: 2 MiB
        s.see(base + 512, 100); // inside it
        s.see(base + (2 << 20), 3 << 20); // 1-10 MiB: 20 MiB
        s.see(base + (10 << 20), 1 << 20); // inside the 20 MiB one
        s.see(base + (64 << 20), (10 << 20) + 1); // 10 MiB and above: a multiple of 2 MiB
        s.see(0, 100); // no pointer: nothing inferred
        assert_eq!(s.into_placements(), [(base, 2 << 20), (base + (2 << 20), 20 << 20), (base + (64 << 20), 12 << 20)]);
    }

    #[test]
    fn a_segment_is_cut_short_of_the_next_one_seen() {
        let mut s = InferredSegments::default();
        s.see(1 << 30, 100);
        s.see((1 << 30) - (1 << 20), 100);
        assert_eq!(s.into_placements(), [(1 << 30, 2 << 20), ((1 << 30) - (1 << 20), 1 << 20)]);
    }
}
