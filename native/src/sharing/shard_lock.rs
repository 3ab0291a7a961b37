//! `ShardLock`: the lock around a core allocator. A waiter spins, then yields, then naps;
//! unlocking is one plain store, never a system call.
//!
//! The critical section is usually a malloc or free served from the cache, tens of
//! nanoseconds. `std::sync::Mutex` puts a waiter to sleep in the kernel after a short spin,
//! and from then on every unlock must wake it with a system call that costs more than the
//! work the lock guards: 16 threads sharing one allocator on the H200's host made 0.75-0.96
//! million operations a second in all, against 2.6-3.2 million with this lock
//! (docs/benchmarks.md). Three choices make the difference, each measured there:
//! - Nobody sleeps in the kernel on the lock word, so a releasing thread never pays for a
//!   waiter. Parking waiters on a condition variable, woken by an unlock that sees one parked,
//!   brought back the system calls: at 16 threads some waiter is always parked, and the total
//!   fell to about 1 million.
//! - Unlocking is a store, not an atomic read-modify-write: the releasing thread goes on to its
//!   next operation without waiting for the lock's cache line to come back from the waiters
//!   reading it. With an atomic swap, two threads on this project's 2-core machine ran at
//!   0.34-0.50x one thread's throughput instead of 0.36-0.65x, in the same runs.
//! - Every hand-off moves the allocator's working set to another core, so the lock favours the
//!   thread that has just released it: a spinning waiter that finds the lock free lets a short
//!   grace pass (`GRACE` pauses, about a microsecond) and takes it only if it is still free, so
//!   a thread running many operations in a row keeps the lock and its cache lines.
//!
//! A waiter backs off in three stages: it spins with growing pauses for about a microsecond,
//! then yields its core for a while (taking the lock as soon as it is free, grace over, so no
//! waiter starves), then sleeps 50 µs at a time until the lock is free. So a lock held through a
//! slow driver call (a segment allocation, a page move: tens of microseconds to milliseconds)
//! costs the waiters little CPU, and a napping waiter may take up to a nap, plus the kernel's
//! timer slack (50 µs by default), to notice the lock is free. Yielding twenty times longer before
//! napping cut the 16-thread total to 2.1-2.2 million.
//!
//! Invariants: at most one guard exists at a time (the `locked` flag, taken with acquire and
//! released with release ordering, hands the value from one holder to the next); a guard
//! dropped while its thread panics marks the lock poisoned, and a poisoned lock refuses every
//! later `lock`, as `std::sync::Mutex` does.

use std::cell::UnsafeCell;
use std::hint::spin_loop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Rounds of spinning (each twice as long as the last, capped at 64 pauses) before yielding.
const SPIN_ROUNDS: u32 = 10;
/// Yields before napping.
const YIELDS: u32 = 100;
/// Pauses a spinning waiter lets pass, on finding the lock free, before it takes it: time for
/// the thread that released it to come back for its next operation.
const GRACE: u32 = 32;
/// One nap, once spinning and yielding have not been enough.
const NAP: Duration = Duration::from_micros(50);

/// A value behind a spin-then-yield-then-nap lock.
pub struct ShardLock<T> {
    locked: AtomicBool,
    poisoned: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands `&mut T` to one thread at a time, so sharing the lock between
// threads is sound exactly when `T` may move between threads, as for `std::sync::Mutex`.
unsafe impl<T: Send> Sync for ShardLock<T> {}

/// The lock was poisoned: a thread panicked while holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poisoned;

/// Exclusive access to the value until dropped.
pub struct ShardGuard<'a, T> {
    lock: &'a ShardLock<T>,
}

impl<T> ShardLock<T> {
    /// `value` behind an unlocked, unpoisoned lock.
    pub fn new(value: T) -> ShardLock<T> {
        ShardLock { locked: AtomicBool::new(false), poisoned: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Waits for the lock; refuses it if a panic poisoned it.
    #[inline]
    pub fn lock(&self) -> Result<ShardGuard<'_, T>, Poisoned> {
        if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended();
        }
        let guard = ShardGuard { lock: self };
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(Poisoned);
        }
        Ok(guard)
    }

    #[cold]
    fn lock_contended(&self) {
        let mut waits = 0u32;
        loop {
            // Read until free, so waiters share the line instead of fighting over it.
            while self.locked.load(Ordering::Relaxed) {
                if waits < SPIN_ROUNDS {
                    for _ in 0..(1u32 << waits.min(6)) {
                        spin_loop();
                    }
                } else if waits < SPIN_ROUNDS + YIELDS {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(NAP);
                }
                waits = waits.saturating_add(1);
            }
            if waits < SPIN_ROUNDS {
                for _ in 0..GRACE {
                    spin_loop();
                }
                if self.locked.load(Ordering::Relaxed) {
                    continue;
                }
            }
            if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
        }
    }

    /// True once a thread has panicked while holding the lock.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Relaxed)
    }
}

impl<T> Deref for ShardGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for ShardGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for ShardGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.lock.poisoned.store(true, Ordering::Relaxed);
        }
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn threads_take_turns_without_losing_an_update() {
        // Miri interprets every step, and checks the lock for data races in a thousand.
        let rounds = if cfg!(miri) { 1_000 } else { 100_000 };
        let lock = Arc::new(ShardLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..rounds {
                        // A read and a write apart: a lock that let two threads in would lose
                        // increments.
                        let mut g = lock.lock().unwrap();
                        let v = *g;
                        spin_loop();
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock().unwrap(), 4 * rounds);
    }

    #[test]
    fn a_panic_while_held_poisons_the_lock() {
        let lock = Arc::new(ShardLock::new(1u32));
        let l = Arc::clone(&lock);
        let result = std::thread::spawn(move || {
            let _g = l.lock().unwrap();
            panic!("while holding the lock");
        })
        .join();
        assert!(result.is_err());
        assert!(lock.is_poisoned());
        assert_eq!(lock.lock().err(), Some(Poisoned));
    }

    #[test]
    fn a_waiter_gets_the_lock_held_through_a_long_call() {
        let lock = Arc::new(ShardLock::new(0u32));
        let g = lock.lock().unwrap();
        let l = Arc::clone(&lock);
        let waiter = std::thread::spawn(move || *l.lock().unwrap() + 1);
        std::thread::sleep(Duration::from_millis(20)); // past spinning and yielding: the waiter naps
        drop(g);
        assert_eq!(waiter.join().unwrap(), 1);
    }
}
