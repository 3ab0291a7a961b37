//! The smallest simulated device a trace replays on without an out-of-memory, per config:
//! what decides whether a run fits a card, since under pressure an allocator frees its cache
//! and retries before it fails.
//!
//! The search reuses what it can: one replay on an unbounded device gives the bounds (the
//! peak requested bytes, below which nothing fits, and the peak reserved bytes, at which the
//! replay never meets the limit), then a bisection over multiples of [`GRANULE`] between them,
//! where a probe that fails stops at its first out-of-memory instead of replaying the rest.
//! The configs are searched on all cores, one config to a thread.
//!
//! Invariants: a [`Fit`]'s `capacity_bytes` is a multiple of [`GRANULE`] on which a probe
//! finished with no out-of-memory, and `capacity_bytes - GRANULE` is one on which a probe
//! failed (or is below the peak requested bytes, where nothing can fit); the driver calls
//! reported are those of the probe at `capacity_bytes`.

use std::sync::atomic::{AtomicUsize, Ordering};

use cachalot_core::replay::Step;
use cachalot_core::sim::DeviceCalls;
use cachalot_core::{Allocator, Config, Replayer, SimDevice};
use serde::Serialize;

use super::input::NamedTrace;
use super::run::driver_calls;

/// The bisection's step: PyTorch's segment and page granularity, and the CUDA driver's.
pub const GRANULE: u64 = 2 << 20;

/// The device an unbounded replay runs on: the most the simulated device holds.
const UNBOUNDED: u64 = cachalot_core::sim::MAX_CAPACITY;

/// A named card and the capacity a run has on it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Card {
    /// How people name it.
    pub name: &'static str,
    /// The cards of that size the figure is taken from.
    pub examples: &'static str,
    /// The total memory PyTorch reports for it (`total_memory`, the figure its
    /// out-of-memory message calls the total capacity).
    pub total_bytes: u64,
    /// What a run can use: the total less [`CUDA_CONTEXT`].
    pub usable_bytes: u64,
}

/// What the CUDA context and PyTorch's kernels take of a card's memory before the first
/// tensor (lazy module loading on; about 0.5 GiB on an H100 or H200).
pub const CUDA_CONTEXT: u64 = 512 << 20;

const fn card(name: &'static str, examples: &'static str, total_mib: u64) -> Card {
    Card { name, examples, total_bytes: total_mib << 20, usable_bytes: (total_mib << 20) - CUDA_CONTEXT }
}

/// The cards `fit` names, smallest first. Totals as PyTorch reports them (GiB to two
/// places in its out-of-memory message): 23.65 GiB on an RTX 4090, 39.39 GiB on an A100
/// 40GB, 79.10 GiB on an H100 80GB, 139.80 GiB on the H200 measured for docs/pytorch.md.
pub const CARDS: [Card; 4] = [
    card("24 GB", "RTX 4090, L4 and A10 hold a little less", 24_218),
    card("40 GB", "A100 40GB", 40_335),
    card("80 GB", "A100 80GB, H100 80GB", 80_998),
    card("141 GB", "H200", 143_155),
];

/// One config's smallest fitting device.
#[derive(Clone, Debug, Serialize)]
pub struct Fit {
    pub config: String,
    /// The smallest capacity (a multiple of [`GRANULE`]) the replay finished on.
    pub capacity_bytes: u64,
    /// The trace's peak of live requested bytes.
    pub peak_requested_bytes: u64,
    /// `capacity_bytes` over `peak_requested_bytes`.
    pub capacity_over_requested: f64,
    /// Peak reserved bytes on an unbounded device, and its driver calls: what the run
    /// takes with no pressure.
    pub unbounded_peak_reserved_bytes: u64,
    pub unbounded_driver_calls: u64,
    /// Driver calls of the replay at `capacity_bytes` (see `run::driver_calls`), and all of
    /// them by kind.
    pub driver_calls: u64,
    pub device_calls: DeviceCalls,
    /// Allocation retries (cache freed and the allocation tried again) at `capacity_bytes`.
    pub alloc_retries: u64,
    /// For each of [`CARDS`], whether the run fits its usable bytes (probed where it lies
    /// between the smallest fitting capacity and the unbounded peak).
    pub cards: Vec<CardFit>,
    /// Replays the search made, the unbounded one included.
    pub probes: u32,
}

/// Whether a run fits one card.
#[derive(Clone, Debug, Serialize)]
pub struct CardFit {
    pub card: &'static str,
    pub usable_bytes: u64,
    pub fits: bool,
}

/// What one probe found.
struct Probe {
    fits: bool,
    calls: DeviceCalls,
    retries: u64,
    peak_reserved: u64,
    peak_requested: u64,
}

/// Replays `t` under `config` on a device of `capacity` bytes, stopping at the first
/// out-of-memory.
fn probe(t: &NamedTrace, config: &Config, capacity: u64) -> Result<Probe, String> {
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, &t.trace), config.clone());
    let mut replayer = Replayer::new(t.trace.slots);
    let mut failed = false;
    let stopped = "\0out of memory";
    let r = t.steps(|i, op| match replayer.step(&mut alloc, op) {
        Ok(Step::OutOfMemory(_)) => {
            failed = true;
            Err(stopped.into())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{}: operation {i}: {e}", t.name)),
    });
    match r {
        Err(e) if e != stopped => return Err(e),
        _ => {}
    }
    let s = alloc.stats();
    Ok(Probe {
        fits: !failed,
        calls: alloc.device().calls(),
        retries: s.num_alloc_retries,
        peak_reserved: s.reserved_bytes.all.peak as u64,
        peak_requested: s.requested_bytes.all.peak as u64,
    })
}

/// `bytes` rounded up to a multiple of [`GRANULE`].
fn granules_up(bytes: u64) -> u64 {
    bytes.div_ceil(GRANULE) * GRANULE
}

/// The smallest fitting capacity of `t` under `config`, to [`GRANULE`].
pub fn fit(t: &NamedTrace, config: &Config) -> Result<Fit, String> {
    let name = config.to_config_string();
    let unbounded = probe(t, config, UNBOUNDED)?;
    if !unbounded.fits {
        return Err(format!("{}: {name} runs out of memory even on a device of {UNBOUNDED} bytes", t.name));
    }
    let requested = unbounded.peak_requested;
    let mut probes = 1;
    // Known to fail: below the peak requested bytes nothing fits.
    let mut lo = granules_up(requested).saturating_sub(GRANULE);
    // Known to fit once probed: at the unbounded peak the limit is never met. A policy
    // whose decisions look at the capacity is checked, and the bound doubled while it fails.
    let mut hi = granules_up(unbounded.peak_reserved.max(requested)).max(GRANULE);
    let mut at_hi = probe(t, config, hi)?;
    probes += 1;
    while !at_hi.fits {
        lo = hi;
        hi = (hi * 2).min(UNBOUNDED);
        at_hi = if hi == UNBOUNDED { unbounded_again(&unbounded) } else { probe(t, config, hi)? };
        probes += 1;
    }
    while hi - lo > GRANULE {
        let mid = lo + (hi - lo) / GRANULE / 2 * GRANULE;
        let p = probe(t, config, mid)?;
        probes += 1;
        if p.fits {
            hi = mid;
            at_hi = p;
        } else {
            lo = mid;
        }
    }
    let mut cards = Vec::with_capacity(CARDS.len());
    for c in CARDS {
        let fits = if c.usable_bytes < hi {
            false
        } else if c.usable_bytes >= granules_up(unbounded.peak_reserved) {
            true
        } else {
            probes += 1;
            probe(t, config, c.usable_bytes)?.fits
        };
        cards.push(CardFit { card: c.name, usable_bytes: c.usable_bytes, fits });
    }
    Ok(Fit {
        config: name,
        capacity_bytes: hi,
        peak_requested_bytes: requested,
        capacity_over_requested: hi as f64 / requested.max(1) as f64,
        unbounded_peak_reserved_bytes: unbounded.peak_reserved,
        unbounded_driver_calls: driver_calls(&unbounded.calls),
        driver_calls: driver_calls(&at_hi.calls),
        device_calls: at_hi.calls,
        alloc_retries: at_hi.retries,
        cards,
        probes,
    })
}

/// The unbounded probe's figures again (it fitted).
fn unbounded_again(p: &Probe) -> Probe {
    Probe {
        fits: true,
        calls: p.calls,
        retries: p.retries,
        peak_reserved: p.peak_reserved,
        peak_requested: p.peak_requested,
    }
}

/// [`fit`] for every config, on all cores (one config to a thread), in the configs' order.
pub fn fit_all(t: &NamedTrace, configs: &[Config]) -> Result<Vec<Fit>, String> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(configs.len().max(1));
    let next = AtomicUsize::new(0);
    let mut all: Vec<(usize, Result<Fit, String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(c) = configs.get(i) else { break };
                        out.push((i, fit(t, c)));
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
