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

    /// This device just asked the driver for `bytes` (a segment or a physical handle): taken
    /// when `granted`; refused, the answer was too high, and is forgotten.
    pub fn asked_for(&self, bytes: u64, granted: bool) {
        match self.known.get() {
            Some((free, at)) if granted => self.known.set(Some((free.saturating_sub(bytes), at))),
            _ => self.forget(),
        }
    }

    /// This device just gave memory back: the next question asks the driver.
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
        memo.asked_for(30, true);
        assert_eq!(memo.free(t0, driver(0, &calls)), 70);
        memo.asked_for(500, true);
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
        memo.asked_for(10, true);
        assert_eq!(memo.free(t0, driver(80, &calls)), 80);
        assert_eq!(calls.get(), 1);
    }

    /// A device whose memory this process alone changes, except for `elsewhere`: another
    /// process's allocations, which the memo cannot see.
    struct FakeDriver {
        capacity: u64,
        mine: u64,
        elsewhere: u64,
    }

    impl FakeDriver {
        fn free(&self) -> u64 {
            self.capacity - self.mine - self.elsewhere
        }
    }

    /// The memo against asking the driver every time, the plain path, under memory pressure:
    /// allocations until the driver refuses, frees, another process taking memory, and time
    /// passing. Whatever this device does, the memo reads what the driver says; another
    /// process's memory it reads at most `MAX_AGE` late, and never after a refusal.
    #[test]
    fn the_memo_reads_what_the_driver_says_under_pressure() {
        const MIB: u64 = 1 << 20;
        let mut d = FakeDriver { capacity: 1024 * MIB, mine: 0, elsewhere: 0 };
        let memo = FreeMemoryMemo::default();
        let (mut now, mut live, mut state) = (Instant::now(), Vec::new(), 0x2545_f491_4f6c_dd1du64);
        let (mut refusals, mut stale_reads) = (0, 0);
        // Another process changed the memory since the memo last asked the driver.
        let mut unseen = false;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let (size, roll) = ((state >> 8) % 96 * 2 * MIB + 2 * MIB, state % 100);
            let mut refused = false;
            match roll {
                0..=54 => {
                    let granted = size <= d.free();
                    if granted {
                        d.mine += size;
                        live.push(size);
                    }
                    refused = !granted;
                    refusals += u32::from(refused);
                    memo.asked_for(size, granted);
                }
                55..=89 => {
                    if let Some(size) = live.pop() {
                        d.mine -= size;
                        memo.forget();
                    }
                }
                90..=93 => {
                    d.elsewhere = if d.elsewhere > 0 { 0 } else { d.free().min(size) };
                    unseen = true;
                }
                _ => now += MAX_AGE / 3,
            }
            let asked = Cell::new(false);
            let read = memo.free(now, || {
                asked.set(true);
                Some(d.free())
            });
            assert!(asked.get() || !refused, "a refusal sends the next question to the driver");
            unseen &= !asked.get();
            if !unseen {
                assert_eq!(read, d.free(), "only this device changed the memory since the memo asked");
            } else if read != d.free() {
                // Another process's memory, read late: no later than MAX_AGE.
                stale_reads += 1;
                now += MAX_AGE;
                assert_eq!(memo.free(now, || Some(d.free())), d.free());
                unseen = false;
            }
        }
        assert!(refusals > 100 && stale_reads > 10, "{refusals} refusals, {stale_reads} stale reads");
    }
}
