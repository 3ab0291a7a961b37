//! One statistic ([`Stat`]: current, peak, total increases and decreases) and a statistic for
//! all / small pool / large pool ([`StatArray`]), as PyTorch reports them.
//!
//! Invariants: `current == allocated - freed` and `peak >= current`, until a reset
//! deliberately restarts the totals or the peak.

use serde::Serialize;

use crate::base::size::Pool;

/// One statistic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stat {
    /// Value now.
    pub current: i64,
    /// Highest value since the last peak reset.
    pub peak: i64,
    /// Sum of all increases.
    pub allocated: i64,
    /// Sum of all decreases.
    pub freed: i64,
}

impl Stat {
    /// Adds `n`.
    #[inline]
    pub fn increase(&mut self, n: u64) {
        self.current += n as i64;
        self.allocated += n as i64;
        if self.current > self.peak {
            self.peak = self.current;
        }
    }

    /// Subtracts `n`.
    #[inline]
    pub fn decrease(&mut self, n: u64) {
        self.current -= n as i64;
        self.freed += n as i64;
    }

    /// Adds `n` when positive, subtracts it when negative.
    pub fn change(&mut self, n: i64) {
        match n {
            1.. => self.increase(n as u64),
            ..0 => self.decrease(n.unsigned_abs()),
            0 => {}
        }
    }

    pub(crate) fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    pub(crate) fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }

    /// Adds another allocator's figures. The peak becomes the sum of the two peaks: an upper
    /// bound on the peak of the sum, reached when both peaked at once.
    pub(crate) fn absorb(&mut self, other: &Stat) {
        self.current += other.current;
        self.peak += other.peak;
        self.allocated += other.allocated;
        self.freed += other.freed;
    }
}

/// A statistic for all pools and for each pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StatArray {
    /// Both pools together.
    pub all: Stat,
    /// The small pool.
    pub small_pool: Stat,
    /// The large pool.
    pub large_pool: Stat,
}

impl StatArray {
    /// Adds `n` to the total and to `pool`'s figure.
    #[inline]
    pub fn increase(&mut self, pool: Pool, n: u64) {
        self.all.increase(n);
        self.pool_mut(pool).increase(n);
    }

    /// Subtracts `n` from the total and from `pool`'s figure.
    #[inline]
    pub fn decrease(&mut self, pool: Pool, n: u64) {
        self.all.decrease(n);
        self.pool_mut(pool).decrease(n);
    }

    /// The figure of one pool.
    pub fn pool(&self, pool: Pool) -> &Stat {
        match pool {
            Pool::Small => &self.small_pool,
            Pool::Large => &self.large_pool,
        }
    }

    #[inline]
    pub(crate) fn pool_mut(&mut self, pool: Pool) -> &mut Stat {
        match pool {
            Pool::Small => &mut self.small_pool,
            Pool::Large => &mut self.large_pool,
        }
    }

    #[cfg(test)]
    pub(crate) fn each(&mut self, f: impl Fn(&mut Stat)) {
        f(&mut self.all);
        f(&mut self.small_pool);
        f(&mut self.large_pool);
    }
}
