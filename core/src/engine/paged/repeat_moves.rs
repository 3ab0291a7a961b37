//! The pages a repeating workload has mapped while no plan was followed: what a plan for a
//! workload regrowing tensors in a region must first have cost already.
//!
//! A region's holes settle most regrowing loops by themselves (unbounded, the decoding traces'
//! warm passes make no call or a few dozen), and following a plan moves the memory held into
//! its ranges once, about as many pages as it holds: 521 calls for a loop that had made 18 in
//! its warm passes (s_8_256_64_24_1024). On a device a few percent over the loop's peak the
//! same holes move pages every generation for good, which a followed plan ends. So such a
//! workload gets a plan only once the pages mapped since its repeat was first seen, from the
//! start of the period before (to within 64 requests), reach the most pages ever in use: what
//! moving into the plan costs. Buying once the rent paid equals the price (rent or buy) costs
//! at most twice what the better choice in hindsight would have.
//!
//! Invariants: `at_log[k]` is `mapped` once the log's request `64 k` (from 0) was served, an
//! entry for each 64 requests logged since the log began; `since <= mapped`.

use alloc::vec::Vec;

/// Pages mapped, and since when they count towards a plan (see the module comment).
#[derive(Clone, Debug, Default)]
pub struct RepeatMoves {
    /// Pages mapped so far (fresh or moved), every span counted.
    mapped: u64,
    /// `mapped` at every 64th request of the recurrence log, from its first.
    at_log: Vec<u64>,
    /// `mapped` when the repeat now waiting for a plan began, if one waits.
    since: Option<u64>,
}

/// Requests of the log between two notes of `mapped`.
const EVERY: usize = 64;

impl RepeatMoves {
    /// Counts `pages` just mapped.
    #[inline]
    pub fn mapped(&mut self, pages: u64) {
        self.mapped += pages;
    }

    /// Notes that the recurrence log now holds `len` requests (1: it has just begun).
    #[inline]
    pub fn logged(&mut self, len: usize) {
        if len == 1 {
            self.at_log.clear();
        }
        if len % EVERY == 1 {
            self.at_log.push(self.mapped);
        }
    }

    /// A repeat was found once the log held `len` requests, its latest period the last
    /// `period` of them: the pages mapped since the first repeat still waiting for a plan
    /// began, this one if none waits.
    pub fn repeat_found(&mut self, len: usize, period: usize) -> u64 {
        let start = self.at_log.get(len.saturating_sub(period) / EVERY).copied().unwrap_or(self.mapped);
        self.mapped - *self.since.get_or_insert(start)
    }

    /// No repeat waits any more: a plan is made, or the workload has settled.
    pub fn forget(&mut self) {
        self.since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `requests` requests logged, `pages` mapped to serve each.
    fn log(moves: &mut RepeatMoves, requests: usize, pages: u64) {
        for len in 1..=requests {
            moves.mapped(pages);
            moves.logged(len);
        }
    }

    #[test]
    fn a_repeat_counts_the_pages_mapped_since_its_latest_period_began() {
        let mut moves = RepeatMoves::default();
        // A cold period of 256 requests mapping 3 pages each, then a warm one mapping 1 each:
        // the note at its start was taken once its first request (the 257th) was served.
        log(&mut moves, 256, 3);
        for len in 257..=512 {
            moves.mapped(1);
            moves.logged(len);
        }
        assert_eq!(moves.repeat_found(512, 256), 255);
    }

    #[test]
    fn a_period_beginning_between_two_notes_counts_from_the_note_before_it() {
        let mut moves = RepeatMoves::default();
        log(&mut moves, 200, 1);
        // The period began with the 101st request; the note before it was taken at the 65th.
        assert_eq!(moves.repeat_found(200, 100), 200 - 65);
    }

    #[test]
    fn a_repeat_still_waiting_counts_from_where_it_began_and_a_forgotten_one_starts_again() {
        let mut moves = RepeatMoves::default();
        log(&mut moves, 128, 2);
        assert_eq!(moves.repeat_found(128, 64), 256 - 130);
        // The log begins again while that repeat waits: its pages go on counting.
        log(&mut moves, 128, 1);
        assert_eq!(moves.repeat_found(128, 64), 384 - 130);
        moves.forget();
        log(&mut moves, 128, 1);
        assert_eq!(moves.repeat_found(128, 64), 512 - 449);
    }
}
