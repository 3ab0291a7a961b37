//! Recurrence: how cachalot's policy notices that a workload's requests repeat.
//!
//! A training loop asks for the same sizes on the same streams in the same order, step after
//! step (or, with shapes that vary, run after run). Each request the policy serves is logged
//! as its [`Signature`] with the tick it was allocated at and, once freed, the tick it was
//! freed at (a tick counts requests and frees). Beside the log runs its prefix function
//! (Knuth–Morris–Pratt), extended in constant amortized time per request: `border[i]` is the
//! length of the longest proper prefix of the log up to `i` that also ends at `i`. When the
//! latest requests repeat the log's first `k` requests, with `k` at least [`MIN_REPEAT`] and
//! at least the period `p = i + 1 - k` they imply (a whole period has repeated, so each of
//! the first period's requests that a period outlives is known as such), the log is taken to
//! repeat every `p` requests, and its first period, with each request's lifetime, is handed
//! over as a [`Period`]. Only the log's start is matched: a loop whose first step differs
//! (lazily created optimizer state) is found once the log has started again.
//!
//! Invariants: `sigs`, `born`, `died` and `border` have one entry per logged request;
//! `border[i] <= i`; `live_index[id]` is the index of the logged request allocated as block
//! `id` and not yet freed, [`NONE`] for every other block; ticks are counted from the log's
//! start. A log that reaches its capacity without finding a repeat
//! starts again, with twice the capacity (up to [`MAX_LOG`]), from the next request.

use alloc::vec::Vec;

use crate::base::device::Stream;
use crate::base::size::Pool;

/// What the plan must match: the stream and pool asked for and the rounded size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The stream of the request.
    pub stream: Stream,
    /// The pool its rounded size falls in.
    pub pool: Pool,
    /// The rounded size.
    pub bytes: u64,
}

/// One request of a period: its signature, the tick it was made at and the tick it was freed
/// at, both counted from the period's first request (`None`: not freed when the period was
/// recognized).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// What was asked for.
    pub sig: Signature,
    /// Ticks from the period's first request to this one.
    pub born: u32,
    /// Ticks from the period's first request to this one's free.
    pub died: Option<u32>,
}

/// A recognized repetition: the first period's requests, the ticks one period takes, and
/// which of the period's requests comes next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Period {
    /// The period's requests, in order.
    pub requests: Vec<Request>,
    /// Ticks from the first period's first request to the second period's.
    pub ticks: u32,
    /// Index in `requests` of the next request expected.
    pub next: usize,
}

/// The fewest requests that must repeat before a repetition is believed (a period shorter
/// than this must repeat several times).
pub const MIN_REPEAT: usize = 64;

/// The log's first capacity, in requests.
pub const FIRST_LOG: usize = 1 << 17;

/// The most requests a log holds (36 bytes each: 9 MiB at most).
pub const MAX_LOG: usize = 1 << 18;

/// The log of requests and its prefix function (see the module comment).
#[derive(Clone, Debug)]
pub struct Recurrence {
    sigs: Vec<Signature>,
    born: Vec<u32>,
    died: Vec<u32>,
    border: Vec<u32>,
    live_index: Vec<u32>,
    tick: u32,
    capacity: usize,
    skip: bool,
}

/// `died` of a request not yet freed.
const LIVE: u32 = u32::MAX;

/// `live_index` of a block no logged request lives in.
const NONE: u32 = u32::MAX;

impl Default for Recurrence {
    fn default() -> Recurrence {
        Recurrence {
            sigs: Vec::new(),
            born: Vec::new(),
            died: Vec::new(),
            border: Vec::new(),
            live_index: Vec::new(),
            tick: 0,
            capacity: FIRST_LOG,
            skip: false,
        }
    }
}

impl Recurrence {
    /// Requests logged so far.
    pub fn len(&self) -> usize {
        self.sigs.len()
    }

    /// True when nothing is logged.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.sigs.is_empty()
    }

    /// Forgets the log (keeping its capacity): recording starts again with the next request.
    pub fn restart(&mut self) {
        self.sigs.clear();
        self.born.clear();
        self.died.clear();
        self.border.clear();
        self.live_index.fill(NONE);
        self.tick = 0;
    }

    /// Leaves the next request out of the log (it only counts a tick): the one that broke a
    /// followed plan, a one-off, which would otherwise begin a log that never repeats.
    pub fn skip_next(&mut self) {
        self.skip = true;
    }

    /// Logs a request served as block `id`; returns the period when this request completes
    /// a repetition, and then starts a new log.
    pub fn allocated(&mut self, id: u32, sig: Signature) -> Option<Period> {
        if core::mem::take(&mut self.skip) {
            self.tick = self.tick.saturating_add(1);
            return None;
        }
        if self.sigs.len() >= self.capacity || self.tick >= LIVE - 1 {
            self.capacity = (self.capacity * 2).min(MAX_LOG);
            self.restart();
        }
        let i = self.sigs.len();
        let mut k = if i == 0 { 0 } else { self.border[i - 1] as usize };
        while k > 0 && self.sigs[k] != sig {
            k = self.border[k - 1] as usize;
        }
        if i > 0 && self.sigs[k] == sig {
            k += 1;
        }
        self.sigs.push(sig);
        self.born.push(self.tick);
        self.died.push(LIVE);
        self.border.push(k as u32);
        let slot = id as usize;
        if slot >= self.live_index.len() {
            self.live_index.resize((slot + 1).next_power_of_two(), NONE);
        }
        self.live_index[slot] = i as u32;
        self.tick += 1;
        let period = i + 1 - k;
        if k >= MIN_REPEAT && k >= period {
            let found = self.period(period, k % period);
            self.restart();
            return Some(found);
        }
        None
    }

    /// Logs the free of block `id` (a block not logged, allocated before the log began,
    /// still counts a tick).
    pub fn freed(&mut self, id: u32) {
        if let Some(i) = self.live_index.get_mut(id as usize).map(|i| core::mem::replace(i, NONE)) {
            if i != NONE {
                self.died[i as usize] = self.tick;
            }
        }
        self.tick = self.tick.saturating_add(1);
    }

    /// The log's first `p` requests as a period, `next` the index expected next.
    fn period(&self, p: usize, next: usize) -> Period {
        let start = self.born[0];
        let requests = (0..p)
            .map(|i| Request {
                sig: self.sigs[i],
                born: self.born[i] - start,
                died: (self.died[i] != LIVE).then(|| self.died[i] - start),
            })
            .collect();
        Period { requests, ticks: self.born[p] - start, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(bytes: u64) -> Signature {
        Signature { stream: 0, pool: Pool::Large, bytes }
    }

    /// Runs `steps` steps of a loop allocating `sizes` and freeing them in reverse order, from
    /// address `base`; returns the period found, and the request it was found at.
    fn run(r: &mut Recurrence, sizes: &[u64], steps: usize) -> Option<(usize, Period)> {
        let mut n = 0;
        for _ in 0..steps {
            for (j, &s) in sizes.iter().enumerate() {
                n += 1;
                if let Some(p) = r.allocated(j as u32, sig(s)) {
                    return Some((n, p));
                }
            }
            for j in (0..sizes.len()).rev() {
                r.freed(j as u32);
            }
        }
        None
    }

    #[test]
    fn a_loop_is_recognized_once_a_whole_period_repeats() {
        let sizes: Vec<u64> = (1..=100).map(|i| i * 512).collect();
        let mut r = Recurrence::default();
        let (at, p) = run(&mut r, &sizes, 3).expect("the loop repeats");
        // Recognized at the last request of the second step, the period one step long.
        assert_eq!(at, 200);
        assert_eq!(p.requests.len(), 100);
        assert_eq!(p.next, 0);
        assert_eq!(p.ticks, 200, "a period is 100 requests and 100 frees");
        assert_eq!(p.requests[0], Request { sig: sig(512), born: 0, died: Some(199) });
        assert_eq!(p.requests[99], Request { sig: sig(51_200), born: 99, died: Some(100) });
        assert!(r.is_empty(), "the log starts again");
    }

    #[test]
    fn a_repeat_shorter_than_its_period_is_not_believed() {
        // 1,000 distinct sizes, then the first 900 again, then something else.
        let mut r = Recurrence::default();
        let sizes: Vec<u64> = (1..=1000).chain(1..=900).chain(2000..2100).map(|i| i * 512).collect();
        assert!(sizes.iter().enumerate().all(|(j, &s)| r.allocated(j as u32, sig(s)).is_none()));
        assert_eq!(r.len(), 2000);
    }

    #[test]
    fn a_short_period_must_repeat_min_repeat_requests() {
        let mut r = Recurrence::default();
        let found = (0..200u32).find_map(|j| {
            let p = r.allocated(j, sig(512 * (1 + u64::from(j) % 2)));
            r.freed(j);
            p.map(|p| (j, p))
        });
        let (j, p) = found.expect("two sizes in turn repeat");
        assert_eq!((j as usize, p.requests.len(), p.ticks), (MIN_REPEAT + 1, 2, 4));
    }

    #[test]
    fn a_loop_whose_first_step_differs_is_found_once_the_log_starts_again() {
        let mut r = Recurrence { capacity: 300, ..Recurrence::default() };
        let first: Vec<u64> = (1000..1050).map(|i| i * 512).collect();
        assert!(run(&mut r, &first, 1).is_none());
        let sizes: Vec<u64> = (1..=100).map(|i| i * 512).collect();
        let (_, p) = run(&mut r, &sizes, 8).expect("found after the log starts again");
        assert_eq!(p.requests.len(), 100);
        assert_eq!(r.capacity, 600);
    }

    #[test]
    fn a_full_log_starts_again_with_twice_the_room() {
        let mut r = Recurrence { capacity: 8, ..Recurrence::default() };
        for j in 0..9u32 {
            assert!(r.allocated(j, sig((u64::from(j) + 1) * 512)).is_none());
        }
        assert_eq!(r.len(), 1);
        assert_eq!(r.capacity, 16);
    }

    #[test]
    fn a_skipped_request_counts_a_tick_only() {
        let mut r = Recurrence::default();
        r.allocated(1, sig(512));
        r.skip_next();
        r.allocated(2, sig(1024));
        r.allocated(3, sig(512));
        assert_eq!(r.len(), 2);
        assert_eq!((r.born[1], r.sigs[1]), (2, sig(512)));
    }

    #[test]
    fn frees_of_requests_from_before_the_log_count_as_ticks_only() {
        let mut r = Recurrence::default();
        r.freed(7);
        r.allocated(1, sig(512));
        r.freed(1);
        assert_eq!((r.born[0], r.died[0]), (1, 2));
    }
}
