//! `FreeMemoryMemo`: the device's free memory as the driver last told it, less what this
//! device has taken since, asked again once the answer is [`MAX_AGE`] old, after this device
//! gave memory back, or after the driver refused it memory.
//!
//! Why: `cuMemGetInfo` is a driver call that costs microseconds, and the paged policy asks
//! what is free on its slow paths (how large a chunk may be near the device's end, and
//! whether a regrowing stream's hole takes its front): a decoding trace replayed on a capped
//! device asked thousands of times in every pass, a pass that allocated and mapped nothing
//! (docs/benchmarks.md, *What asking for free memory cost*). The answer only steers those
//! heuristics; the device's own refusal of a `cuMemCreate` or `cuMemAlloc` still decides what
//! fits. So a memo that is exact for this device's own allocations and at most `MAX_AGE` late
//! for other processes' serves them as well as the driver does.
//!
//! Invariants: a remembered answer is never older than `MAX_AGE`; each allocation this device
//! makes after it lowers it by the bytes asked for (a driver rounding up, or keeping
//! bookkeeping of its own, makes it read a little high until the next question or refusal);
//! a free or release forgets it rather than adding the bytes back, and so does a refused
//! allocation (the answer was too high): the next question asks the driver, so an
//! out-of-memory report after a refusal gives the driver's own figure; a driver error is never
//! remembered.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long an answer is used before the driver is asked again. At a few microseconds a call,
/// asking at most once a millisecond costs well under 1% of the time whatever the policy asks.
pub const MAX_AGE: Duration = Duration::from_millis(1);

/// The last answer and when it was given.
#[derive(Debug, Default)]
pub struct FreeMemoryMemo {
    known: Cell<Option<(u64, Instant)>>,
}

impl FreeMemoryMemo {
    /// Free bytes at `now`: the remembered answer while it is younger than [`MAX_AGE`], else
    /// `ask()`'s (remembered unless it is `None`, a driver error, read as nothing free).
    pub fn free(&self, now: Instant, ask: impl FnOnce() -> Option<u64>) -> u64 {
        if let Some((bytes, at)) = self.known.get() {
            if now.saturating_duration_since(at) < MAX_AGE {
                return bytes;
            }
        }
        let answer = ask();
        self.known.set(answer.map(|bytes| (bytes, now)));
        answer.unwrap_or(0)
    }

    /// This device just took `bytes` from the device (a segment or a physical handle).
    pub fn took(&self, bytes: u64) {
        if let Some((free, at)) = self.known.get() {
            self.known.set(Some((free.saturating_sub(bytes), at)));
        }
    }

    /// This device just gave memory back, or the driver refused it some: the next question
    /// asks the driver.
    pub fn forget(&self) {
        self.known.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver that answers `free` and counts its calls.
    fn driver(free: u64, calls: &Cell<u32>) -> impl FnOnce() -> Option<u64> + '_ {
        move || {
            calls.set(calls.get() + 1);
            Some(free)
        }
    }

    #[test]
    fn asks_the_driver_again_only_once_the_answer_is_too_old() {
        let (memo, calls, t0) = (FreeMemoryMemo::default(), Cell::new(0), Instant::now());
        assert_eq!(memo.free(t0, driver(100, &calls)), 100);
        assert_eq!(memo.free(t0 + MAX_AGE / 2, driver(50, &calls)), 100, "young: remembered");
        assert_eq!(calls.get(), 1);
        assert_eq!(memo.free(t0 + MAX_AGE, driver(50, &calls)), 50, "as old as MAX_AGE: asked again");
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn what_the_device_takes_lowers_the_answer_and_what_it_gives_back_forgets_it() {
        let (memo, calls, t0) = (FreeMemoryMemo::default(), Cell::new(0), Instant::now());
        memo.free(t0, driver(100, &calls));
        memo.took(30);
        assert_eq!(memo.free(t0, driver(0, &calls)), 70);
        memo.took(500);
        assert_eq!(memo.free(t0, driver(0, &calls)), 0, "never below nothing");
        assert_eq!(calls.get(), 1);
        memo.forget();
        assert_eq!(memo.free(t0, driver(40, &calls)), 40, "asked after memory went back");
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn a_driver_error_reads_as_nothing_free_and_is_not_remembered() {
        let (memo, calls, t0) = (FreeMemoryMemo::default(), Cell::new(0), Instant::now());
        assert_eq!(memo.free(t0, || None), 0);
        memo.took(10);
        assert_eq!(memo.free(t0, driver(80, &calls)), 80);
        assert_eq!(calls.get(), 1);
    }
}
