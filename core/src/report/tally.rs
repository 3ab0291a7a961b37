//! Statistics as the allocator keeps them while it runs: running totals from which the
//! figures PyTorch reports (`stats.rs`) are worked out when asked for.
//!
//! A [`Tally`] keeps one statistic for both pools: per pool the sums of increases and
//! decreases and the peak, overall the current value and the peak. A [`PendingTally`] keeps
//! an *active* statistic, which counts what is allocated plus what waits for a pending free
//! (events on other streams): it counts only the pending part and adds the matching
//! allocation tally when reported, so a malloc or free updates it only while some free is
//! pending. Both cost one pool's figures per update, not all three of both pools.
//!
//! Invariants: a tally's reported `current == allocated - freed` and `peak >= current` until
//! a reset deliberately restarts the totals or the peak; a pending tally's current values
//! are the pending blocks (or bytes) per pool, never negative.

use serde::Serialize;

use crate::base::size::Pool;
use crate::report::stat::{Stat, StatArray};

/// One statistic for both pools as the allocator keeps it: per pool, the sum of increases
/// and of decreases since the start and the peak; overall, the current value and the peak;
/// and the sums as they stood at the last `reset_accumulated`. [`Tally::report`] gives the
/// [`StatArray`] PyTorch reports. The overall current value could be summed from the pools';
/// it is kept so that an increase checks the overall peak without reading the other pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    raised: [i64; 2],
    lowered: [i64; 2],
    peak: [i64; 2],
    all_current: i64,
    all_peak: i64,
    raised_before: [i64; 2],
    lowered_before: [i64; 2],
}

impl Tally {
    /// Adds `n` to `pool`'s figure (and so to the total).
    #[inline]
    pub fn increase(&mut self, pool: Pool, n: u64) {
        let p = pool.index();
        self.raised[p] += n as i64;
        let current = self.pool_current(p);
        if current > self.peak[p] {
            self.peak[p] = current;
        }
        self.all_current += n as i64;
        if self.all_current > self.all_peak {
            self.all_peak = self.all_current;
        }
    }

    /// Subtracts `n` from `pool`'s figure (and so from the total).
    #[inline]
    pub fn decrease(&mut self, pool: Pool, n: u64) {
        self.lowered[pool.index()] += n as i64;
        self.all_current -= n as i64;
    }

    /// Adds `n` when positive, subtracts it when negative.
    pub fn change(&mut self, pool: Pool, n: i64) {
        match n {
            1.. => self.increase(pool, n as u64),
            ..0 => self.decrease(pool, n.unsigned_abs()),
            0 => {}
        }
    }

    /// The current value of `pool`.
    #[inline]
    fn pool_current(&self, p: usize) -> i64 {
        self.raised[p] - self.lowered[p]
    }

    /// Restarts the peaks at the current values.
    pub fn reset_peak(&mut self) {
        for p in 0..2 {
            self.peak[p] = self.pool_current(p);
        }
        self.all_peak = self.all_current;
    }

    /// Restarts the sums of increases and decreases.
    pub fn reset_accumulated(&mut self) {
        (self.raised_before, self.lowered_before) = (self.raised, self.lowered);
    }

    /// The current value for both pools together.
    #[inline]
    pub fn current(&self) -> i64 {
        self.all_current
    }

    /// The figures as PyTorch reports them.
    pub fn report(&self) -> StatArray {
        let pool = |p: usize| Stat {
            current: self.pool_current(p),
            peak: self.peak[p],
            allocated: self.raised[p] - self.raised_before[p],
            freed: self.lowered[p] - self.lowered_before[p],
        };
        let (small, large) = (pool(Pool::Small.index()), pool(Pool::Large.index()));
        StatArray {
            all: Stat {
                current: self.all_current,
                peak: self.all_peak,
                allocated: small.allocated + large.allocated,
                freed: small.freed + large.freed,
            },
            small_pool: small,
            large_pool: large,
        }
    }
}

/// An active statistic as the allocator keeps it: the blocks (or bytes) whose free waits for
/// events, beside the allocation tally they add to. Active = allocation + pending, at all
/// times, per pool. Active's sums of increases are allocation's (both rise at each malloc);
/// its decreases are allocation's less what is pending now, plus what was pending at the last
/// `reset_accumulated` (those decreases came after it). Its peak is allocation's peak or the
/// highest active value reached while a free was pending, whichever is higher: while none is
/// pending, active equals allocation and cannot exceed allocation's peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PendingTally {
    pending: [i64; 2],
    all_pending: i64,
    /// Highest active value per pool reached while a free was pending (since the last peak
    /// reset, which sets it to the active value then).
    peak: [i64; 2],
    all_peak: i64,
    pending_before: [i64; 2],
}

impl PendingTally {
    /// A free of `n` in `pool` now waits for events: allocation fell by `n`, active did not.
    #[inline]
    pub fn began(&mut self, pool: Pool, n: u64) {
        self.pending[pool.index()] += n as i64;
        self.all_pending += n as i64;
    }

    /// A pending free of `n` in `pool` completed: active falls by `n`.
    #[inline]
    pub fn ended(&mut self, pool: Pool, n: u64) {
        self.pending[pool.index()] -= n as i64;
        self.all_pending -= n as i64;
    }

    /// True while some free is pending.
    #[inline(always)]
    pub fn any_pending(&self) -> bool {
        self.all_pending != 0
    }

    /// Records active's value in `pool` after `allocation` rose there (only needed while a
    /// free is pending: otherwise active equals allocation).
    #[cold]
    pub fn note_peak(&mut self, pool: Pool, allocation: &Tally) {
        let p = pool.index();
        self.peak[p] = self.peak[p].max(allocation.pool_current(p) + self.pending[p]);
        self.all_peak = self.all_peak.max(allocation.all_current + self.all_pending);
    }

    /// Restarts the peaks at active's current values.
    pub fn reset_peak(&mut self, allocation: &Tally) {
        for p in 0..2 {
            self.peak[p] = allocation.pool_current(p) + self.pending[p];
        }
        self.all_peak = allocation.all_current + self.all_pending;
    }

    /// Restarts the sums (allocation's own reset restarts the rest of them).
    pub fn reset_accumulated(&mut self) {
        self.pending_before = self.pending;
    }

    /// Active's figures as PyTorch reports them.
    pub fn report(&self, allocation: &Tally) -> StatArray {
        let base = allocation.report();
        let pool = |s: &Stat, p: usize| Stat {
            current: s.current + self.pending[p],
            peak: s.peak.max(self.peak[p]),
            allocated: s.allocated,
            freed: s.freed - self.pending[p] + self.pending_before[p],
        };
        let (small, large) = (pool(&base.small_pool, Pool::Small.index()), pool(&base.large_pool, Pool::Large.index()));
        StatArray {
            all: Stat {
                current: base.all.current + self.all_pending,
                peak: base.all.peak.max(self.all_peak),
                allocated: small.allocated + large.allocated,
                freed: small.freed + large.freed,
            },
            small_pool: small,
            large_pool: large,
        }
    }
}
