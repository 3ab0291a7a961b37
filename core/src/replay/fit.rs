//! The smallest simulated device a trace replays on without an out-of-memory, under one
//! config: what decides whether a run fits a card, since under pressure an allocator frees
//! its cache and retries before it fails. `cachalot fit` (one config to a thread) and the
//! browser's Compare view (one config at a time) both call [`fit`], so their figures are the
//! same by construction.
//!
//! The search reuses what it can: one replay on an unbounded device gives the bounds (the
//! peak requested bytes, below which nothing fits, and the peak reserved bytes, at which the
//! replay never meets the limit), then a bisection over multiples of [`GRANULE`] between them,
//! where a probe that fails stops at its first out-of-memory instead of replaying the rest.
//! The operations come from an [`OpSource`], read from the start by every probe: a slice in
//! the browser, the CLI's spool on disk.
//!
//! A probe replays the trace `runs` times in a row on one allocator, what each run left cached
//! kept, as a loop repeating the recorded steps would: a second run may need a page or a few
//! more than the first (its requests meet the first's cache, not an empty device).
//!
//! Fitting may cost driver calls: near its smallest device a policy that moves pages moves
//! the last ones again and again. So the search goes on to the calm device: the least
//! capacity a second bisection, between the smallest device and the device with room (the
//! unbounded peak, the first one's upper bound), finds at which the replay's driver calls
//! are within a tenth of those with room plus one per thousand operations; it reuses the
//! first bisection's probes. The device with room is the least on which the run never meets
//! the limit, not a roomy card: there cachalot's policy makes small chunks (single pages once
//! less than 4 GiB is free) and about twice the calls of an unbounded device, so calm means
//! that pages no longer move over and over, not that calls are as few as with plenty of
//! memory. The bisection takes the calls to fall as the device grows, as they do for
//! cachalot's policy near its smallest device on every trace measured (docs/benchmarks.md),
//! but they need not: PyTorch's default makes 49 calls at its calm device on mixed_fc_conv
//! and 83 fifteen pages up. So a larger device may make more.
//!
//! Invariants: a [`Fit`]'s `capacity_bytes` is a multiple of [`GRANULE`] on which a probe
//! finished with no out-of-memory, and `capacity_bytes - GRANULE` is one on which a probe
//! failed (or is below the peak requested bytes, where nothing can fit); the driver calls
//! reported are those of the probe at `capacity_bytes`. `calm_capacity_bytes` is a multiple of
//! [`GRANULE`], no less than `capacity_bytes` and no more than `roomy_capacity_bytes`, where a
//! probe finished with calls calm beside `roomy_driver_calls` (within [`CALM_CALLS`], and
//! [`CALM_CALLS_PER_OPERATION`] more); a granule less is below `capacity_bytes`, or a probe
//! there failed or made more calls.

use alloc::string::String;
use alloc::vec::Vec;
use core::convert::Infallible;
use core::fmt;
use core::ops::ControlFlow;

use crate::base::config::Config;
use crate::base::error::AllocError;
use crate::engine::allocator::Allocator;
use crate::replay::replayer::{Replayer, Step};
use crate::sim::device_calls::DeviceCalls;
use crate::sim::sim_device::{SimDevice, MAX_CAPACITY};
use crate::trace::operations::{Trace, TraceOp};

/// The bisection's step: PyTorch's segment and page granularity, and the CUDA driver's.
pub const GRANULE: u64 = 2 << 20;

/// The device an unbounded replay runs on: the most the simulated device holds.
const UNBOUNDED: u64 = MAX_CAPACITY;

/// Calm: driver calls at most those with room plus this fraction of them (a tenth), and
/// [`CALM_CALLS_PER_OPERATION`] more. Near its smallest device a policy that moves pages makes
/// two to four times the calls it makes with room; a tenth more is the spread between devices
/// a few pages apart.
pub const CALM_CALLS: f64 = 0.1;

/// Calls a run may make beyond [`CALM_CALLS`] and still be calm, per operation replayed: one
/// per thousand. A call costs a GPU 10 to 70 µs (docs/benchmarks.md), a thousand allocations
/// and frees of a training or decoding step launch kernels for milliseconds: under 1% of the
/// time. Without it a handful of calls more would count: PyTorch's default, which frees its
/// cache and retries on any device smaller than its unbounded peak, made 410 calls on its
/// smallest device for a decoding trace of 323,528 operations against 278 with room.
pub const CALM_CALLS_PER_OPERATION: f64 = 0.001;

/// Whether `calls` over `operations` replayed are calm beside `roomy` calls (see [`CALM_CALLS`]).
fn calm(calls: u64, roomy: u64, operations: u64) -> bool {
    calls as f64 <= roomy as f64 * (1.0 + CALM_CALLS) + operations as f64 * CALM_CALLS_PER_OPERATION
}

/// A named card and the capacity a run has on it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
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

/// The cards a fit is checked against, smallest first. Totals as PyTorch reports them (GiB
/// to two places in its out-of-memory message): 23.65 GiB on an RTX 4090, 39.39 GiB on an
/// A100 40GB, 79.10 GiB on an H100 80GB, 139.80 GiB on the H200 measured for docs/pytorch.md.
pub const CARDS: [Card; 4] = [
    card("24 GB", "RTX 4090, L4 and A10 hold a little less", 24_218),
    card("40 GB", "A100 40GB", 40_335),
    card("80 GB", "A100 80GB, H100 80GB", 80_998),
    card("141 GB", "H200", 143_155),
];

/// One config's smallest fitting device.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Fit {
    /// The config, as `Config::to_config_string` writes it.
    pub config: String,
    /// Times the trace ran in a row in each probe.
    pub runs: u32,
    /// The smallest capacity (a multiple of [`GRANULE`]) the replay finished on.
    pub capacity_bytes: u64,
    /// The trace's peak of live requested bytes.
    pub peak_requested_bytes: u64,
    /// `capacity_bytes` over `peak_requested_bytes`.
    pub capacity_over_requested: f64,
    /// Peak reserved bytes on an unbounded device: what the run takes with no pressure.
    pub unbounded_peak_reserved_bytes: u64,
    /// Driver calls (see [`DeviceCalls::driver_calls`]) on an unbounded device (all its runs).
    pub unbounded_driver_calls: u64,
    /// Driver calls of the replay at `capacity_bytes` (all its runs).
    pub driver_calls: u64,
    /// All the calls of the replay at `capacity_bytes`, by kind.
    pub device_calls: DeviceCalls,
    /// The driver calls of each run of that replay, in order (they add up to `driver_calls`):
    /// a later run on what the one before left cached may move pages the first did not.
    pub driver_calls_runs: Vec<u64>,
    /// Allocation retries (cache freed and the allocation tried again) at `capacity_bytes`.
    pub alloc_retries: u64,
    /// The device with room the calm device is judged against: the unbounded peak reserved
    /// bytes, to a granule up (doubled until the replay finishes, for a policy whose decisions
    /// look at the capacity).
    pub roomy_capacity_bytes: u64,
    /// Driver calls of the replay at `roomy_capacity_bytes` (all its runs).
    pub roomy_driver_calls: u64,
    /// The calm device: the least capacity the search found at which the driver calls are
    /// within [`CALM_CALLS`] of `roomy_driver_calls` and [`CALM_CALLS_PER_OPERATION`] more
    /// (`capacity_bytes` when they are there); see the module comment.
    pub calm_capacity_bytes: u64,
    /// Driver calls of the replay at `calm_capacity_bytes` (all its runs).
    pub calm_driver_calls: u64,
    /// For each of [`CARDS`], whether the run fits its usable bytes (probed where it lies
    /// between the smallest fitting capacity and the unbounded peak).
    pub cards: Vec<CardFit>,
    /// Replays the search made, the unbounded one included.
    pub probes: u32,
}

/// Whether a run fits one card.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CardFit {
    /// The card's name, as in [`CARDS`].
    pub card: &'static str,
    /// The bytes a run can use on it.
    pub usable_bytes: u64,
    /// Whether the replay finished on that many bytes.
    pub fits: bool,
}

/// A trace's operations, read from the first each time: every probe replays them anew.
pub trait OpSource {
    /// What reading them may fail with.
    type Error;
    /// Calls `each` with every operation and its index, in order, until it returns `Break`.
    fn each_op<F: FnMut(usize, &TraceOp) -> ControlFlow<()>>(&self, each: F) -> Result<(), Self::Error>;
}

/// Operations held in memory (the browser's parsed trace).
impl OpSource for [TraceOp] {
    type Error = Infallible;
    fn each_op<F: FnMut(usize, &TraceOp) -> ControlFlow<()>>(&self, mut each: F) -> Result<(), Infallible> {
        for (i, op) in self.iter().enumerate() {
            if each(i, op).is_break() {
                break;
            }
        }
        Ok(())
    }
}

/// Why a search gave no answer.
#[derive(Debug)]
pub enum FitError<E> {
    /// The operations could not be read.
    Source(E),
    /// Replaying operation `op` failed for a reason other than memory (a trace the
    /// allocator refuses).
    Replay {
        /// The operation's index.
        op: usize,
        /// What the allocator said.
        error: AllocError,
    },
    /// The config runs out of memory even on the largest device simulated.
    Unbounded {
        /// The config, as `Config::to_config_string` writes it.
        config: String,
    },
}

impl<E: fmt::Display> fmt::Display for FitError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FitError::Source(e) => write!(f, "{e}"),
            FitError::Replay { op, error } => write!(f, "operation {op}: {error}"),
            FitError::Unbounded { config } => {
                write!(f, "{config} runs out of memory even on a device of {UNBOUNDED} bytes")
            }
        }
    }
}

/// What one probe found.
#[derive(Clone)]
struct Probe {
    fits: bool,
    calls: DeviceCalls,
    /// Driver calls of each run replayed, the one that ran out of memory included.
    calls_runs: Vec<u64>,
    retries: u64,
    peak_reserved: u64,
    peak_requested: u64,
    /// Operations replayed, over all runs.
    operations: u64,
}

/// Replays `ops` (the operations of `trace`) `runs` times in a row under `config` on a device
/// of `capacity` bytes, freeing what each run leaves live, stopping at the first out-of-memory.
fn probe<S: OpSource + ?Sized>(
    trace: &Trace,
    ops: &S,
    config: &Config,
    capacity: u64,
    runs: u32,
) -> Result<Probe, FitError<S::Error>> {
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, trace), config.clone());
    let mut replayer = Replayer::new(trace.slots);
    let mut failed = false;
    let mut refused = None;
    let mut calls_runs = Vec::with_capacity(runs.max(1) as usize);
    let mut operations = 0;
    for _ in 0..runs.max(1) {
        let before = alloc.device().calls().driver_calls();
        let mut end = 0;
        ops.each_op(|i, op| {
            end = i + 1;
            match replayer.step(&mut alloc, op) {
                Ok(Step::OutOfMemory(_)) => {
                    failed = true;
                    ControlFlow::Break(())
                }
                Ok(_) => ControlFlow::Continue(()),
                Err(error) => {
                    refused = Some(FitError::Replay { op: i, error });
                    ControlFlow::Break(())
                }
            }
        })
        .map_err(FitError::Source)?;
        if let Some(e) = refused {
            return Err(e);
        }
        if !failed {
            replayer.free_live(&mut alloc).map_err(|error| FitError::Replay { op: end, error })?;
        }
        calls_runs.push(alloc.device().calls().driver_calls() - before);
        operations += end as u64;
        if failed {
            break;
        }
    }
    let s = alloc.stats();
    Ok(Probe {
        fits: !failed,
        calls: alloc.device().calls(),
        calls_runs,
        retries: s.num_alloc_retries,
        peak_reserved: s.reserved_bytes.all.peak as u64,
        peak_requested: s.requested_bytes.all.peak as u64,
        operations,
    })
}

/// `bytes` rounded up to a multiple of [`GRANULE`].
fn granules_up(bytes: u64) -> u64 {
    bytes.div_ceil(GRANULE) * GRANULE
}

/// The smallest fitting capacity, to [`GRANULE`], of `trace` (whose operations `ops`
/// gives: `trace.ops` itself, or a reader of them when they are not held) run `runs` times in
/// a row under `config`, the driver calls there and the verdict for each of [`CARDS`].
pub fn fit<S: OpSource + ?Sized>(
    trace: &Trace,
    ops: &S,
    config: &Config,
    runs: u32,
) -> Result<Fit, FitError<S::Error>> {
    let name = config.to_config_string();
    let runs = runs.max(1);
    let unbounded = probe(trace, ops, config, UNBOUNDED, runs)?;
    if !unbounded.fits {
        return Err(FitError::Unbounded { config: name });
    }
    let requested = unbounded.peak_requested;
    let mut probes = 1;
    // Known to fail: below the peak requested bytes nothing fits.
    let mut lo = granules_up(requested).saturating_sub(GRANULE);
    // Known to fit once probed: at the unbounded peak the limit is never met. A policy
    // whose decisions look at the capacity is checked, and the bound doubled while it fails.
    let mut hi = granules_up(unbounded.peak_reserved.max(requested)).max(GRANULE);
    let mut at_hi = probe(trace, ops, config, hi, runs)?;
    probes += 1;
    while !at_hi.fits {
        lo = hi;
        hi = (hi * 2).min(UNBOUNDED);
        at_hi = if hi == UNBOUNDED { unbounded.clone() } else { probe(trace, ops, config, hi, runs)? };
        probes += 1;
    }
    let (roomy_at, roomy, operations) = (hi, at_hi.calls.driver_calls(), unbounded.operations);
    // The calls of every probe that finished, for the calm device's search.
    let mut finished = alloc::vec![(hi, at_hi.clone())];
    while hi - lo > GRANULE {
        let mid = lo + (hi - lo) / GRANULE / 2 * GRANULE;
        let p = probe(trace, ops, config, mid, runs)?;
        probes += 1;
        if p.fits {
            hi = mid;
            finished.push((mid, p.clone()));
            at_hi = p;
        } else {
            lo = mid;
        }
    }
    let (mut calm_lo, mut calm_hi, mut at_calm) = (hi - GRANULE, hi, at_hi.clone());
    if !calm(at_calm.calls.driver_calls(), roomy, operations) {
        (calm_lo, calm_hi, at_calm) = (hi, roomy_at, finished[0].1.clone());
    }
    while calm_hi - calm_lo > GRANULE {
        let mid = calm_lo + (calm_hi - calm_lo) / GRANULE / 2 * GRANULE;
        let p = match finished.iter().find(|(at, _)| *at == mid) {
            Some((_, p)) => p.clone(),
            None => {
                probes += 1;
                probe(trace, ops, config, mid, runs)?
            }
        };
        if p.fits && calm(p.calls.driver_calls(), roomy, operations) {
            calm_hi = mid;
            at_calm = p;
        } else {
            calm_lo = mid;
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
            probe(trace, ops, config, c.usable_bytes, runs)?.fits
        };
        cards.push(CardFit { card: c.name, usable_bytes: c.usable_bytes, fits });
    }
    Ok(Fit {
        config: name,
        runs,
        capacity_bytes: hi,
        peak_requested_bytes: requested,
        capacity_over_requested: hi as f64 / requested.max(1) as f64,
        unbounded_peak_reserved_bytes: unbounded.peak_reserved,
        unbounded_driver_calls: unbounded.calls.driver_calls(),
        driver_calls: at_hi.calls.driver_calls(),
        device_calls: at_hi.calls,
        driver_calls_runs: at_hi.calls_runs,
        alloc_retries: at_hi.retries,
        roomy_capacity_bytes: roomy_at,
        roomy_driver_calls: roomy,
        calm_capacity_bytes: calm_hi,
        calm_driver_calls: at_calm.calls.driver_calls(),
        cards,
        probes,
    })
}

/// The driver calls (see [`DeviceCalls::driver_calls`]) of `runs` replays in a row of `trace`
/// under `config` on a device of `capacity` bytes, or `None` when they run out of memory there:
/// what a config costs on the device another one needs.
pub fn calls_at<S: OpSource + ?Sized>(
    trace: &Trace,
    ops: &S,
    config: &Config,
    capacity: u64,
    runs: u32,
) -> Result<Option<u64>, FitError<S::Error>> {
    let p = probe(trace, ops, config, capacity, runs)?;
    Ok(p.fits.then(|| p.calls.driver_calls()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_fits_and_one_granule_less_does_not() {
        // Two 3 MiB blocks live at once, a third after one is freed.
        let t = crate::parse_trace(
            "Time,Action,Pointer,Size\n1,allocate,0x1,3145728\n2,allocate,0x2,3145728\n3,free,0x1,3145728\n\
             4,allocate,0x3,3145728\n",
        )
        .unwrap();
        let config = Config::parse("policy:pytorch").unwrap();
        for runs in [1, 3] {
            let f = fit(&t, &t.ops[..], &config, runs).unwrap();
            assert_eq!((f.runs, f.capacity_bytes % GRANULE), (runs, 0));
            assert_eq!(f.peak_requested_bytes, 6 << 20);
            assert!(probe(&t, &t.ops[..], &config, f.capacity_bytes, runs).unwrap().fits);
            assert!(!probe(&t, &t.ops[..], &config, f.capacity_bytes - GRANULE, runs).unwrap().fits);
            assert!(f.cards.iter().all(|c| c.fits));
            assert_eq!(f.driver_calls, f.device_calls.driver_calls());
            assert_eq!(f.driver_calls_runs.len(), runs as usize);
            assert_eq!(f.driver_calls_runs.iter().sum::<u64>(), f.driver_calls);
            // The same replay where it fits; none a granule below.
            assert_eq!(calls_at(&t, &t.ops[..], &config, f.capacity_bytes, runs).unwrap(), Some(f.driver_calls));
            assert_eq!(calls_at(&t, &t.ops[..], &config, f.capacity_bytes - GRANULE, runs).unwrap(), None);
            // Calm between the smallest device and the roomy one, where the replays make the
            // calls reported.
            assert!(f.capacity_bytes <= f.calm_capacity_bytes && f.calm_capacity_bytes <= f.roomy_capacity_bytes);
            assert_eq!(
                calls_at(&t, &t.ops[..], &config, f.calm_capacity_bytes, runs).unwrap(),
                Some(f.calm_driver_calls)
            );
            assert_eq!(
                calls_at(&t, &t.ops[..], &config, f.roomy_capacity_bytes, runs).unwrap(),
                Some(f.roomy_driver_calls)
            );
        }
    }

    #[test]
    fn calls_are_calm_within_a_tenth_of_those_with_room_and_one_per_thousand_operations() {
        assert!(calm(110, 100, 0) && !calm(111, 100, 0));
        assert!(calm(111, 100, 1_000) && !calm(112, 100, 1_000));
        assert!(calm(0, 0, 0) && !calm(1, 0, 999));
    }
}
