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
//! was made, which is the sum of the shards' own current values whenever no shard is inside a
//! call; each peak is the largest current value since the last reset. One lock covers every
//! figure, so a reset and a change never interleave: it is taken only next to device calls
//! and when statistics are read, never on a malloc or free served from the cache.

use std::sync::{Mutex, MutexGuard, PoisonError};

use cachalot_core::stats::Stat;
use cachalot_core::{DeviceStats, HeldChange};

/// One figure's current value and peak.
#[derive(Clone, Copy, Default)]
struct Peaked {
    current: i64,
    peak: i64,
}

impl Peaked {
    fn add(&mut self, n: i64) {
        self.current += n;
        self.peak = self.peak.max(self.current);
    }

    /// Puts this peak into `stat`, whose current value was read from the shards one at a time
    /// and so may, while threads run, exceed any value the sum really had: the peak is kept
    /// at least the current value reported beside it.
    fn write_into(&self, stat: &mut Stat) {
        stat.peak = self.peak.max(stat.current);
    }
}

/// Segments, reserved bytes (each for all pools, the small pool and the large pool) and
/// oversize segments held by every shard together.
#[derive(Default)]
struct Figures {
    /// All pools, the small pool, the large pool.
    segments: [Peaked; 3],
    bytes: [Peaked; 3],
    oversize_segments: Peaked,
}

/// What every shard of one device holds, added up, with exact peaks.
#[derive(Default)]
pub struct HeldPeaks {
    figures: Mutex<Figures>,
}

impl HeldPeaks {
    fn figures(&self) -> MutexGuard<'_, Figures> {
        // The lock guards additions that cannot panic; a poisoned lock holds whole figures.
        self.figures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds one shard's change.
    pub fn add(&self, change: HeldChange) {
        let mut f = self.figures();
        for i in [0, 1 + change.pool.index()] {
            f.segments[i].add(change.segments);
            f.bytes[i].add(change.bytes);
        }
        f.oversize_segments.add(change.oversize_segments);
    }

    /// Restarts every peak at the current value.
    pub fn reset(&self) {
        let mut f = self.figures();
        let f = &mut *f;
        for p in f.segments.iter_mut().chain(&mut f.bytes).chain([&mut f.oversize_segments]) {
            p.peak = p.current;
        }
    }

    /// Replaces the summed peaks of `stats` (the shards' figures added up) by the exact ones.
    pub fn write_into(&self, stats: &mut DeviceStats) {
        let f = self.figures();
        for (figures, array) in [(&f.segments, &mut stats.segment), (&f.bytes, &mut stats.reserved_bytes)] {
            figures[0].write_into(&mut array.all);
            figures[1].write_into(&mut array.small_pool);
            figures[2].write_into(&mut array.large_pool);
        }
        f.oversize_segments.write_into(&mut stats.oversize_segments);
    }

    /// Checks that the current values equal `stats`', the shards' figures added up while no
    /// shard was inside a call (for the invariant checker).
    pub fn check_sum(&self, stats: &DeviceStats) -> Result<(), String> {
        let f = self.figures();
        let pairs = [("segment", &f.segments, &stats.segment), ("reserved_bytes", &f.bytes, &stats.reserved_bytes)];
        for (name, figures, array) in pairs {
            for (pool, mine, theirs) in [
                ("all", figures[0], array.all),
                ("small_pool", figures[1], array.small_pool),
                ("large_pool", figures[2], array.large_pool),
            ] {
                if mine.current != theirs.current {
                    return Err(format!(
                        "the hub counts {name}.{pool}.current {} but the shards hold {}",
                        mine.current, theirs.current
                    ));
                }
            }
        }
        if f.oversize_segments.current != stats.oversize_segments.current {
            return Err(format!(
                "the hub counts {} oversize segments but the shards hold {}",
                f.oversize_segments.current, stats.oversize_segments.current
            ));
        }
        Ok(())
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
