//! One replay of a trace under one config, timed: a cold pass on a fresh allocator for the
//! memory figures, then warm passes on the same allocator for the CPU cost per operation.
//!
//! Invariant: `ns_per_op` is the median over at least three warm passes of the replay loop
//! alone (parsing, reading the spooled operations back, setup and the final frees are
//! outside the clock).

use std::io::{IsTerminal, Write};

use cachalot_core::replay::Step;
use cachalot_core::sim::DeviceCalls;
use cachalot_core::{Allocator, Config, PassFigures, PlanCounts, Replayer, SimDevice};
use serde::Serialize;

use super::input::NamedTrace;
use super::pass::replay_pass;

/// Simulated device size when none is given: an H200's usable memory.
pub const DEFAULT_CAPACITY: u64 = 140 << 30;

/// How to run.
pub struct RunOptions {
    /// Simulated device size in bytes.
    pub capacity: u64,
    /// Warm passes to time (at least 3).
    pub warm_passes: usize,
    /// Capture memory summaries at the peak and at the end.
    pub summary: bool,
}

/// What a run measured; the `--json` output.
#[derive(Serialize)]
pub struct RunReport {
    /// The cold pass's memory figures, defined once for this tool and the browser.
    #[serde(flatten)]
    pub figures: PassFigures,
    /// Peak reserved bytes over the cold pass and every warm pass: where a training loop's
    /// reserved memory settles (a policy that moves pages could creep up pass after pass).
    pub peak_reserved_bytes_all_passes: u64,
    /// Out-of-memory events in the warm passes, each run on what the pass before left cached
    /// (`ooms` counts the first pass's alone): a device that holds one run of a trace may not
    /// hold a second (`cachalot fit --runs`).
    pub warm_pass_ooms: u64,
    pub ns_per_op: f64,
    pub ns_per_op_cold: f64,
    pub ns_per_op_passes: Vec<f64>,
    /// Per warm pass: whether the decision memo (`decision_memo:True`) answered some of its
    /// operations. Passes it answered are far cheaper, so one median over both would hide
    /// when it engaged.
    pub memo_answered_passes: Vec<bool>,
    /// The median warm ns/op of the passes the memo did not answer, and of those it did
    /// (absent when there were none of that kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_per_op_before_memo: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_per_op_with_memo: Option<f64>,
    /// Most blocks (allocated, free, pending or unmapped) alive at once over the cold pass
    /// and the first warm pass.
    pub blocks: usize,
    /// The most host bytes the metadata that grows with blocks held at any moment of those
    /// passes, over `blocks` (see `metadata.rs`).
    pub metadata_bytes_per_block: f64,
    /// The most host bytes of fixed metadata (per pool and stream) held in those passes.
    pub metadata_fixed_bytes: usize,
    pub virtual_memory: bool,
    pub device_calls_cold: DeviceCalls,
    pub device_calls_warm: DeviceCalls,
    /// Driver calls (`DeviceCalls::driver_calls`) of each warm pass, in order: the last is
    /// `device_calls_warm`'s, and one between may be far more (a pass that moves the pages of
    /// tensors regrown by copy on a device with little room).
    pub driver_calls_passes: Vec<u64>,
    /// What cachalot's learned layout did over every pass (plans begun, given up, requests
    /// placed where a plan put them...): all zero under PyTorch's policies, and for a workload
    /// whose requests never repeat.
    pub learned_layout: PlanCounts,
    /// Segment placements the trace gave (a snapshot's `segment_alloc` entries, or those its
    /// pointers imply; 0 with `--no-follow-addresses`), whether they were inferred from
    /// pointers, and how many of them the replay's first pass followed (all of them while it
    /// decides as the run did).
    pub segment_placements_recorded: usize,
    pub segment_placements_inferred: bool,
    pub segment_placements_followed: usize,
    /// Where and why the first pass gave the placements up (absent when it did not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_placements_abandoned: Option<super::placements::Abandoned>,
    pub trace_report: cachalot_core::trace::TraceReport,
    /// The first out of memory, located in the input (an object; absent when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_oom: Option<super::oom_location::OomLocation>,
    #[serde(skip)]
    pub summary_at_peak: Option<String>,
    #[serde(skip)]
    pub summary_at_end: Option<String>,
}

fn progress(msg: &str) {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err, "\r\x1b[2K{msg}");
        let _ = err.flush();
    }
}

fn done_progress() {
    progress("");
}

/// Replays `t` under `config`.
pub fn run(t: &NamedTrace, config: &Config, opts: &RunOptions) -> Result<RunReport, String> {
    let ops = t.ops.len().max(1) as f64;
    let config_name = config.to_config_string();
    progress(&format!("{} under {config_name}: cold pass", t.name));
    let mut alloc = Allocator::new(SimDevice::for_replay(opts.capacity, &t.trace), config.clone());
    let mut replayer = Replayer::new(t.trace.slots);
    let (cold, spent) = replay_pass(t, &mut replayer, &mut alloc)?;
    let cold_ns = spent.as_nanos() as f64 / ops;
    let device_calls_cold = alloc.device().calls();
    let segment_placements_followed = alloc.device().placements_followed();
    let segment_placements_abandoned = match alloc.device().placements_abandoned() {
        Some(_) => super::placements::locate(t, config, opts.capacity)?,
        None => None,
    };
    let summary_at_end = opts.summary.then(|| alloc.memory_summary(0, false));
    replayer.free_live(&mut alloc).map_err(|e| format!("{}: {e}", t.name))?;
    let mut passes = Vec::with_capacity(opts.warm_passes);
    let mut device_calls_warm = DeviceCalls::default();
    let mut driver_calls_passes = Vec::with_capacity(opts.warm_passes);
    let mut memo_answered = Vec::with_capacity(opts.warm_passes);
    let mut warm_pass_ooms = 0;
    for p in 0..opts.warm_passes.max(3) {
        let before = alloc.device().calls();
        let memo_before = alloc.memo_counts().periods_replayed;
        progress(&format!("{} under {config_name}: warm pass {}/{}", t.name, p + 1, opts.warm_passes.max(3)));
        let (warm, spent) = replay_pass(t, &mut replayer, &mut alloc)?;
        warm_pass_ooms += warm.ooms;
        passes.push(spent.as_nanos() as f64 / ops);
        memo_answered.push(alloc.memo_counts().periods_replayed > memo_before);
        replayer.free_live(&mut alloc).map_err(|e| format!("{}: {e}", t.name))?;
        device_calls_warm = alloc.device().calls().since(&before);
        driver_calls_passes.push(device_calls_warm.driver_calls());
    }
    done_progress();
    let metadata = super::metadata::measure(t, config, opts.capacity)?;
    let summary_at_peak = if opts.summary { Some(summary_at_peak(t, config, opts.capacity)?) } else { None };
    let median = median_of(passes.iter().copied()).unwrap_or(0.0);
    let of_kind = |answered: bool| {
        median_of(passes.iter().zip(&memo_answered).filter(|(_, m)| **m == answered).map(|(p, _)| *p)).map(round1)
    };
    let first_oom = cold
        .first_oom
        .as_ref()
        .map(|(op, report)| super::oom_location::OomLocation::new(t, *op, report))
        .transpose()?;
    let mut figures = PassFigures::new(&t.name, &config_name, opts.capacity, &cold);
    // The browser shows the core's one-line `first_oom`; here the located object replaces it.
    figures.first_oom = None;
    Ok(RunReport {
        figures,
        peak_reserved_bytes_all_passes: alloc.stats().reserved_bytes.all.peak as u64,
        warm_pass_ooms,
        ns_per_op: round1(median),
        ns_per_op_cold: round1(cold_ns),
        ns_per_op_before_memo: of_kind(false),
        ns_per_op_with_memo: of_kind(true),
        ns_per_op_passes: passes.into_iter().map(round1).collect(),
        memo_answered_passes: memo_answered,
        blocks: metadata.blocks,
        metadata_bytes_per_block: round1(metadata.bytes_per_block()),
        metadata_fixed_bytes: metadata.fixed_bytes,
        virtual_memory: alloc.uses_virtual_memory(),
        device_calls_cold,
        device_calls_warm,
        driver_calls_passes,
        learned_layout: alloc.plan_counts(),
        segment_placements_recorded: t.trace.segment_placements.len(),
        segment_placements_inferred: t.trace.placements_inferred && !t.trace.segment_placements.is_empty(),
        segment_placements_followed,
        segment_placements_abandoned,
        trace_report: t.trace.report.clone(),
        summary_at_peak,
        summary_at_end,
        first_oom,
    })
}

/// The median (the upper one of an even count), `None` of nothing.
fn median_of(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied()
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The memory summary at the moment reserved memory peaked (an untimed replay that keeps
/// the statistics of the newest peak).
fn summary_at_peak(t: &NamedTrace, config: &Config, capacity: u64) -> Result<String, String> {
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, &t.trace), config.clone());
    let mut replayer = Replayer::new(t.trace.slots);
    let mut best = (0u64, alloc.stats(), 0usize);
    t.steps(|i, op| {
        match replayer.step(&mut alloc, op) {
            Ok(Step::Allocated(_)) if alloc.reserved_bytes() > best.0 => {
                best = (alloc.reserved_bytes(), alloc.stats(), i)
            }
            Ok(_) => {}
            Err(e) => return Err(format!("{}: operation {i}: {e}", t.name)),
        }
        Ok(())
    })?;
    let (_, stats, op) = best;
    Ok(format!(
        "at operation {op} of {}, when reserved memory peaked:\n{}",
        t.ops.len(),
        cachalot_core::summary::memory_summary(&stats, 0, false)
    ))
}

/// The driver calls that obtain, map or give back memory (`DeviceCalls::driver_calls`, the
/// one definition `replay`, `compare`, `advise`, `fit` and the browser share).
pub fn driver_calls(c: &DeviceCalls) -> u64 {
    c.driver_calls()
}
