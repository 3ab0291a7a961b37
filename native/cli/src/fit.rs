//! `cachalot fit`'s search on all cores: the core's `replay::fit` (the one implementation,
//! which the browser's Compare view calls too) for each config, one config to a thread, the
//! trace's operations read from its spool by every probe.
//!
//! Invariant: [`fit_all`] and [`calls_all_at`] return one result per config, in the configs'
//! order, each what `replay::fit` gives for it alone; errors name the trace.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};

use cachalot_core::replay::fit::{calls_at, fit, FitError, OpSource};
use cachalot_core::{Config, TraceOp};

pub use cachalot_core::replay::fit::{Card, Fit, CALM_CALLS, CALM_CALLS_PER_OPERATION, CARDS, CUDA_CONTEXT, GRANULE};

use super::input::NamedTrace;

/// The spooled operations, read a piece at a time by each probe; a probe's stop ends the read.
impl OpSource for NamedTrace {
    type Error = String;
    fn each_op<F: FnMut(usize, &TraceOp) -> ControlFlow<()>>(&self, mut each: F) -> Result<(), String> {
        let mut stopped = false;
        let read = self.steps(|i, op| {
            if each(i, op).is_break() {
                stopped = true;
                // Ends the read; not an error (see below).
                return Err(String::new());
            }
            Ok(())
        });
        if stopped {
            Ok(())
        } else {
            read
        }
    }
}

/// A search's error, the trace named.
fn named(t: &NamedTrace) -> impl Fn(FitError<String>) -> String + '_ {
    move |e| match e {
        FitError::Source(e) => e,
        other => format!("{}: {other}", t.name),
    }
}

/// [`fit`] of `t` run `runs` times in a row for every config, on all cores, in the configs'
/// order.
pub fn fit_all(t: &NamedTrace, configs: &[Config], runs: u32) -> Result<Vec<Fit>, String> {
    on_all_cores(configs, |c| fit(&t.trace, t, c, runs).map_err(named(t)))
}

/// [`calls_at`] `capacity` bytes of `t` run `runs` times in a row for every config, on all
/// cores, in the configs' order.
pub fn calls_all_at(t: &NamedTrace, configs: &[Config], capacity: u64, runs: u32) -> Result<Vec<Option<u64>>, String> {
    on_all_cores(configs, |c| calls_at(&t.trace, t, c, capacity, runs).map_err(named(t)))
}

/// `each` for every config, one config to a thread, in the configs' order.
fn on_all_cores<T: Send>(
    configs: &[Config],
    each: impl Fn(&Config) -> Result<T, String> + Sync,
) -> Result<Vec<T>, String> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(configs.len().max(1));
    let next = AtomicUsize::new(0);
    let mut all: Vec<(usize, Result<T, String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(c) = configs.get(i) else { break };
                        out.push((i, each(c)));
                    }
                    out
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect()
    });
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}
