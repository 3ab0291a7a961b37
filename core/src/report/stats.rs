//! Statistics in the shape of PyTorch's `DeviceStats`: each figure for all / small pool /
//! large pool, with current, peak, allocated (total increases) and freed (total decreases).
//!
//! The allocator keeps them as [`Counters`], whose arrays are running totals (`tally.rs`),
//! from which the reported [`StatArray`]s are worked out when asked for.
//!
//! Invariants: `current == allocated - freed` and `peak >= current` for every stat, until
//! `reset_accumulated` or `reset_peak` deliberately restart the totals or the peak.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde::Serialize;

use crate::base::size::Pool;
pub use crate::report::stat::{Stat, StatArray};
pub use crate::report::stat_fields::{StatField, StatKind, STAT_FIELDS};
pub use crate::report::tally::{PendingTally, Tally};

/// Everything PyTorch's `torch.cuda.memory_stats()` reports, for one allocator. `A` is how
/// each statistic array is held and `P` how the two active ones are: [`StatArray`] as
/// reported, [`Tally`] and [`PendingTally`] as the allocator keeps them ([`Counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceStats<A = StatArray, P = A> {
    /// Allocations handed out to callers.
    pub allocation: A,
    /// Segments obtained from the device.
    pub segment: A,
    /// Blocks allocated or waiting for a pending free.
    pub active: P,
    /// Free blocks that share their segment (cannot be returned to the device).
    pub inactive_split: A,
    /// Bytes of allocated blocks.
    pub allocated_bytes: A,
    /// Bytes of segments.
    pub reserved_bytes: A,
    /// Bytes of active blocks.
    pub active_bytes: P,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: A,
    /// Bytes callers asked for.
    pub requested_bytes: A,
    /// Device allocations retried after releasing every cached segment.
    pub num_alloc_retries: u64,
    /// Requests that ended out of memory.
    pub num_ooms: u64,
    /// Times every pending event was waited for.
    pub num_sync_all_streams: u64,
    /// Device allocation calls that succeeded.
    pub num_device_alloc: u64,
    /// Device free calls.
    pub num_device_free: u64,
    /// Requests refused before the device was asked (`throw_on_cudamalloc_oom`); `None` where
    /// the PyTorch release followed has no such counter (2.11), so it is not reported.
    pub num_oom_rejections: Option<u64>,
    /// Allocations of blocks at least `max_split_size` bytes.
    pub oversize_allocations: Stat,
    /// Segments at least `max_split_size` bytes.
    pub oversize_segments: Stat,
    /// The configured `max_split_size` (PyTorch reports `SIZE_MAX` as -1).
    pub max_split_size: i64,
}

/// Names of the [`StatArray`] fields, in PyTorch's order.
pub const ARRAY_NAMES: [&str; 9] = [
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
];

impl DeviceStats {
    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }
}

/// The statistics as the allocator keeps them.
pub type Counters = DeviceStats<Tally, PendingTally>;

impl Counters {
    fn tallies_mut(&mut self) -> [&mut Tally; 7] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// Called after a malloc raised the allocation figures of `pool`, the only moment the
    /// active figures rise: while a free is pending, their peaks may lie above allocation's.
    #[inline(always)]
    pub fn allocation_rose(&mut self, pool: Pool) {
        // Blocks and bytes are pending together, so one test serves both.
        if self.active.any_pending() {
            self.active.note_peak(pool, &self.allocation);
            self.active_bytes.note_peak(pool, &self.allocated_bytes);
        }
    }

    /// Restarts every peak at its current value (`torch.cuda.reset_peak_memory_stats`).
    pub fn reset_peak(&mut self) {
        self.tallies_mut().into_iter().for_each(Tally::reset_peak);
        self.active.reset_peak(&self.allocation);
        self.active_bytes.reset_peak(&self.allocated_bytes);
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }

    /// Restarts the allocated/freed totals and the counters
    /// (`torch.cuda.reset_accumulated_memory_stats`).
    pub fn reset_accumulated(&mut self) {
        self.tallies_mut().into_iter().for_each(Tally::reset_accumulated);
        self.active.reset_accumulated();
        self.active_bytes.reset_accumulated();
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
        if let Some(n) = self.num_oom_rejections.as_mut() {
            *n = 0;
        }
    }

    /// The statistics as PyTorch reports them.
    pub fn report(&self) -> DeviceStats {
        DeviceStats {
            allocation: self.allocation.report(),
            segment: self.segment.report(),
            active: self.active.report(&self.allocation),
            inactive_split: self.inactive_split.report(),
            allocated_bytes: self.allocated_bytes.report(),
            reserved_bytes: self.reserved_bytes.report(),
            active_bytes: self.active_bytes.report(&self.allocated_bytes),
            inactive_split_bytes: self.inactive_split_bytes.report(),
            requested_bytes: self.requested_bytes.report(),
            num_alloc_retries: self.num_alloc_retries,
            num_ooms: self.num_ooms,
            num_sync_all_streams: self.num_sync_all_streams,
            num_device_alloc: self.num_device_alloc,
            num_device_free: self.num_device_free,
            num_oom_rejections: self.num_oom_rejections,
            oversize_allocations: self.oversize_allocations,
            oversize_segments: self.oversize_segments,
            max_split_size: self.max_split_size,
        }
    }
}

impl DeviceStats {
    /// The stat arrays with their names, in PyTorch's order.
    pub fn arrays(&self) -> [(&'static str, &StatArray); 9] {
        [
            (ARRAY_NAMES[0], &self.allocation),
            (ARRAY_NAMES[1], &self.segment),
            (ARRAY_NAMES[2], &self.active),
            (ARRAY_NAMES[3], &self.inactive_split),
            (ARRAY_NAMES[4], &self.allocated_bytes),
            (ARRAY_NAMES[5], &self.reserved_bytes),
            (ARRAY_NAMES[6], &self.active_bytes),
            (ARRAY_NAMES[7], &self.inactive_split_bytes),
            (ARRAY_NAMES[8], &self.requested_bytes),
        ]
    }

    /// Adds the figures of another allocator on the same device (the native library's
    /// per-stream shards): currents, totals and counters add up exactly; each peak becomes
    /// the sum of the peaks, an upper bound that is exact when one of them holds nothing
    /// at the other's peak.
    pub fn absorb(&mut self, other: &DeviceStats) {
        let others = other.arrays();
        for (mine, (_, theirs)) in self.arrays_mut().into_iter().zip(others) {
            mine.all.absorb(&theirs.all);
            mine.small_pool.absorb(&theirs.small_pool);
            mine.large_pool.absorb(&theirs.large_pool);
        }
        self.oversize_allocations.absorb(&other.oversize_allocations);
        self.oversize_segments.absorb(&other.oversize_segments);
        self.num_alloc_retries += other.num_alloc_retries;
        self.num_ooms += other.num_ooms;
        self.num_sync_all_streams += other.num_sync_all_streams;
        self.num_device_alloc += other.num_device_alloc;
        self.num_device_free += other.num_device_free;
        if let Some(theirs) = other.num_oom_rejections {
            *self.num_oom_rejections.get_or_insert(0) += theirs;
        }
    }

    /// The flat `name.pool.metric → value` list of `torch.cuda.memory_stats()`, sorted by
    /// key as PyTorch sorts it.
    pub fn flat(&self) -> Vec<(String, i64)> {
        use alloc::format;
        let mut out = Vec::with_capacity(120);
        for (name, array) in self.arrays() {
            for (pool, stat) in
                [("all", &array.all), ("large_pool", &array.large_pool), ("small_pool", &array.small_pool)]
            {
                for (metric, v) in [
                    ("allocated", stat.allocated),
                    ("current", stat.current),
                    ("freed", stat.freed),
                    ("peak", stat.peak),
                ] {
                    out.push((format!("{name}.{pool}.{metric}"), v));
                }
            }
        }
        for (name, stat) in
            [("oversize_allocations", &self.oversize_allocations), ("oversize_segments", &self.oversize_segments)]
        {
            for (metric, v) in
                [("allocated", stat.allocated), ("current", stat.current), ("freed", stat.freed), ("peak", stat.peak)]
            {
                out.push((format!("{name}.{metric}"), v));
            }
        }
        for (name, v) in [
            ("num_alloc_retries", self.num_alloc_retries as i64),
            ("num_device_alloc", self.num_device_alloc as i64),
            ("num_device_free", self.num_device_free as i64),
            ("num_ooms", self.num_ooms as i64),
            ("num_sync_all_streams", self.num_sync_all_streams as i64),
            ("max_split_size", self.max_split_size),
        ] {
            out.push((name.into(), v));
        }
        if let Some(n) = self.num_oom_rejections {
            out.push(("num_oom_rejections".into(), n as i64));
        }
        out.sort();
        out
    }

    /// [`DeviceStats::flat`] as a JSON object.
    pub fn to_flat_json(&self) -> String {
        let mut map = serde_json::Map::new();
        for (k, v) in self.flat() {
            map.insert(k, v.into());
        }
        serde_json::Value::Object(map).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_tracks_peak_and_totals() {
        let mut s = Stat::default();
        s.increase(10);
        s.decrease(4);
        s.increase(1);
        assert_eq!(s, Stat { current: 7, peak: 10, allocated: 11, freed: 4 });
        s.reset_peak();
        assert_eq!(s.peak, 7);
    }

    #[test]
    fn a_tally_reports_what_a_stat_array_kept_the_plain_way_does() {
        let (mut tally, mut plain) = (Tally::default(), StatArray::default());
        let steps = [
            (Pool::Small, 5i64),
            (Pool::Large, 7),
            (Pool::Small, -3),
            (Pool::Large, 2),
            (Pool::Large, -9),
            (Pool::Small, 4),
        ];
        for (i, &(pool, n)) in steps.iter().enumerate() {
            if n > 0 {
                tally.increase(pool, n as u64);
                plain.increase(pool, n as u64);
            } else {
                tally.decrease(pool, n.unsigned_abs());
                plain.decrease(pool, n.unsigned_abs());
            }
            if i == 2 {
                tally.reset_peak();
                plain.each(Stat::reset_peak);
            }
            if i == 3 {
                tally.reset_accumulated();
                plain.each(Stat::reset_accumulated);
            }
            assert_eq!(tally.report(), plain, "after step {i}");
            assert_eq!(tally.current(), plain.all.current);
        }
    }

    #[test]
    fn flat_keys_match_pytorch_names() {
        let mut st: DeviceStats = DeviceStats::default();
        st.allocated_bytes.increase(Pool::Small, 512);
        let flat = st.flat();
        let get = |k: &str| flat.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        assert_eq!(get("allocated_bytes.all.current"), Some(512));
        assert_eq!(get("allocated_bytes.small_pool.peak"), Some(512));
        assert_eq!(get("allocated_bytes.large_pool.current"), Some(0));
        assert_eq!(get("num_ooms"), Some(0));
        assert_eq!(get("oversize_segments.peak"), Some(0));
        assert_eq!(flat.len(), 9 * 3 * 4 + 2 * 4 + 6);
    }

    #[test]
    fn absorbing_adds_every_figure() {
        let mut a: DeviceStats = DeviceStats { max_split_size: -1, ..DeviceStats::default() };
        a.allocated_bytes.increase(Pool::Small, 512);
        a.num_ooms = 1;
        let mut b: DeviceStats = DeviceStats::default();
        b.reserved_bytes.increase(Pool::Large, 2 << 20);
        b.allocated_bytes.increase(Pool::Small, 1024);
        b.allocated_bytes.decrease(Pool::Small, 1024);
        b.num_device_alloc = 3;
        b.oversize_segments.increase(1);
        let (fa, fb) = (a.flat(), b.flat());
        a.absorb(&b);
        for ((key, sum), ((_, x), (_, y))) in a.flat().iter().zip(fa.iter().zip(&fb)) {
            assert_eq!(*sum, x + y, "{key}");
        }
        assert_eq!(a.max_split_size, -1, "configuration, not a figure");
    }
}
