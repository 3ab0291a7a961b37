//! `HeldPeaks`: what the per-stream shards of one device hold from it (segments, reserved
//! bytes, oversize segments), added up as each shard reports a change, so that the peaks of
//! the sum are exact.
//!
//! Every other statistic of a sharded allocator adds up the shards' figures, and its peak is
//! the sum of their peaks: an upper bound, since the shards need not peak at once. What the
//! device holds changes only when a shard calls the device (a segment, a mapping, a release),
//! never on a malloc or free served from the cache, so following its sum costs the hot path
//! nothing, and `torch.cuda.max_memory_reserved()` is the peak the device saw.
//!
//! Invariants: each current value is the sum of the changes reported since the allocator
//! was made; each peak is the largest current value since the last reset, in the order the
//! atomic additions took effect.

use std::sync::atomic::{AtomicI64, Ordering};

use cachalot_core::stats::Stat;
use cachalot_core::{DeviceStats, HeldChange};

/// One figure's current value and peak.
#[derive(Default)]
struct Peaked {
    current: AtomicI64,
    peak: AtomicI64,
}

impl Peaked {
    fn add(&self, n: i64) {
        if n == 0 {
            return;
        }
        let now = self.current.fetch_add(n, Ordering::AcqRel) + n;
        if n > 0 {
            self.peak.fetch_max(now, Ordering::AcqRel);
        }
    }

    fn reset(&self) {
        self.peak.store(self.current.load(Ordering::Acquire), Ordering::Release);
    }

    /// Puts this peak into `stat`, whose current value was read from the shards one at a time
    /// and so may, while threads run, exceed any value the sum really had: the peak is kept
    /// at least the current value reported beside it.
    fn write_into(&self, stat: &mut Stat) {
        stat.peak = self.peak.load(Ordering::Acquire).max(stat.current);
    }
}

/// Segments, reserved bytes (each for all pools, the small pool and the large pool) and
/// oversize segments held by every shard together.
#[derive(Default)]
pub struct HeldPeaks {
    /// All pools, the small pool, the large pool.
    segments: [Peaked; 3],
    bytes: [Peaked; 3],
    oversize_segments: Peaked,
}

impl HeldPeaks {
    /// Adds one shard's change.
    pub fn add(&self, change: HeldChange) {
        let pool = 1 + change.pool.index();
        for i in [0, pool] {
            self.segments[i].add(change.segments);
            self.bytes[i].add(change.bytes);
        }
        self.oversize_segments.add(change.oversize_segments);
    }

    /// Restarts every peak at the current value.
    pub fn reset(&self) {
        self.segments.iter().chain(&self.bytes).chain([&self.oversize_segments]).for_each(Peaked::reset);
    }

    /// Replaces the summed peaks of `stats` (the shards' figures added up) by the exact ones.
    pub fn write_into(&self, stats: &mut DeviceStats) {
        for (figures, array) in [(&self.segments, &mut stats.segment), (&self.bytes, &mut stats.reserved_bytes)] {
            figures[0].write_into(&mut array.all);
            figures[1].write_into(&mut array.small_pool);
            figures[2].write_into(&mut array.large_pool);
        }
        self.oversize_segments.write_into(&mut stats.oversize_segments);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::size::Pool;

    fn change(pool: Pool, bytes: i64) -> HeldChange {
        HeldChange { pool, segments: bytes.signum(), bytes, oversize_segments: 0 }
    }

    #[test]
    fn the_peak_is_of_the_sum_not_the_sum_of_peaks() {
        let held = HeldPeaks::default();
        // Two shards, each peaking at 4 MiB, never at once.
        held.add(change(Pool::Large, 4 << 20));
        held.add(change(Pool::Large, -(4 << 20)));
        held.add(change(Pool::Small, 4 << 20));
        let mut stats: DeviceStats = DeviceStats::default();
        stats.reserved_bytes.all.current = 4 << 20;
        stats.reserved_bytes.all.peak = 8 << 20; // what adding the shards' peaks gives
        held.write_into(&mut stats);
        assert_eq!(stats.reserved_bytes.all.peak, 4 << 20);
        assert_eq!((stats.reserved_bytes.large_pool.peak, stats.reserved_bytes.small_pool.peak), (4 << 20, 4 << 20));
        assert_eq!(stats.segment.all.peak, 1);
        held.reset();
        held.add(change(Pool::Small, -(4 << 20)));
        stats = DeviceStats::default();
        held.write_into(&mut stats);
        assert_eq!(
            (stats.reserved_bytes.all.peak, stats.segment.all.peak),
            (4 << 20, 1),
            "a reset starts from the current value"
        );
    }
}
