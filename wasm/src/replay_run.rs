//! `ReplayRun`: one whole cold pass of a trace on a fresh allocator — what `cachalot replay
//! --json` measures for its memory figures — with the timeline of requested, allocated and
//! reserved bytes after every operation. Like the CLI, the pass places segments where the
//! trace's own addresses say the run's were (a snapshot's `segment_alloc` entries, or those
//! a CSV's pointers imply), unless asked not to (`--no-follow-addresses`), and says how many
//! it followed and where it gave them up, under the CLI's field names.
//!
//! Invariant: the figures are those of `Replayer::run_ops` on `Allocator::new(SimDevice::
//! for_replay(capacity, trace), config)` (`SimDevice::new(capacity)` when not following)
//! over the whole trace, in the CLI's own type ([`PassFigures`], so the names and the ratio
//! are defined once); each timeline has one value per operation.

use cachalot_core::replay::{ReplayError, Step};
use cachalot_core::{Allocator, Config, PassFigures, ReplayOutcome, Replayer, SimDevice, Trace};
use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::error::js_error;
use crate::js_argument::{flag, number, text};
use crate::js_number::to_capacity;
use crate::trace_file::TraceFile;

/// The figures of a pass: `cachalot replay --json`'s own ([`PassFigures`]), and where in the
/// pass its peak and first refusal fell.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Figures {
    #[serde(flatten)]
    pub pass: PassFigures,
    /// Operation after which reserved memory first reached its peak.
    pub peak_reserved_op: usize,
    /// Index of the first operation refused for lack of memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_oom_op: Option<usize>,
    /// Segment placements the trace gives (`cachalot replay --json`'s fields of the name;
    /// 0 when not following, as with `--no-follow-addresses`).
    pub segment_placements_recorded: usize,
    /// True when they were inferred from the trace's pointers, not recorded.
    pub segment_placements_inferred: bool,
    /// Placements the pass followed (0 when told not to follow them).
    pub segment_placements_followed: usize,
    /// Where and why the pass gave them up, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_placements_abandoned: Option<Abandoned>,
}

/// The operation at which a pass gave the trace's placements up, and the device's reason
/// (the CLI's `segment_placements_abandoned`, its `operation` and `why`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Abandoned {
    pub operation: usize,
    pub why: String,
}

/// Whether to follow the trace's addresses: `true` unless `value` is `false` (left out is
/// `undefined`: following, as the CLI does by default).
pub(crate) fn follows(value: &JsValue) -> Result<bool, JsError> {
    if value.is_undefined() || value.is_null() {
        return Ok(true);
    }
    flag(value, "follow_addresses")
}

/// A pass's figures read as [`PassFigures`]' own (`figures.peak_reserved_bytes`), as the
/// JSON flattens them.
impl std::ops::Deref for Figures {
    type Target = PassFigures;
    fn deref(&self) -> &PassFigures {
        &self.pass
    }
}

impl std::ops::DerefMut for Figures {
    fn deref_mut(&mut self) -> &mut PassFigures {
        &mut self.pass
    }
}

/// A pass with its timelines.
#[derive(Default)]
pub struct Pass {
    pub figures: Figures,
    pub requested: Vec<f64>,
    pub allocated: Vec<f64>,
    pub reserved: Vec<f64>,
    /// The index of each operation refused for lack of memory, in order.
    pub oom_ops: Vec<f64>,
}

/// Replays all of `trace` once on a fresh allocator, following the trace's addresses if
/// `follow`.
pub fn cold_pass(trace: &Trace, config: &Config, capacity: u64, follow: bool) -> Result<Pass, ReplayError> {
    let device = if follow { SimDevice::for_replay(capacity, trace) } else { SimDevice::new(capacity) };
    let mut alloc = Allocator::new(device, config.clone());
    let mut abandoned = None;
    let mut replayer = Replayer::new(trace.slots);
    let n = trace.ops.len();
    let mut p = Pass {
        requested: Vec::with_capacity(n),
        allocated: Vec::with_capacity(n),
        reserved: Vec::with_capacity(n),
        ..Pass::default()
    };
    let (mut outcome, mut peak) = (ReplayOutcome { ops: n, ..ReplayOutcome::default() }, (0, 0));
    for (i, op) in trace.ops.iter().enumerate() {
        match replayer.step(&mut alloc, op) {
            Ok(Step::OutOfMemory(report)) => {
                outcome.ooms += 1;
                p.oom_ops.push(i as f64);
                outcome.first_oom.get_or_insert((i, report));
            }
            Ok(_) => {}
            Err(error) => return Err(ReplayError { op: i, error }),
        }
        if abandoned.is_none() {
            abandoned = alloc.device().placements_abandoned().map(|a| Abandoned { operation: i, why: a.to_string() });
        }
        let s = alloc.stats();
        p.requested.push(s.requested_bytes.all.current as f64);
        p.allocated.push(s.allocated_bytes.all.current as f64);
        let reserved = s.reserved_bytes.all.current;
        p.reserved.push(reserved as f64);
        if reserved > peak.0 {
            peak = (reserved, i);
        }
    }
    let s = alloc.stats();
    outcome.peak_requested_bytes = s.requested_bytes.all.peak as u64;
    outcome.peak_allocated_bytes = s.allocated_bytes.all.peak as u64;
    outcome.peak_reserved_bytes = s.reserved_bytes.all.peak as u64;
    outcome.device_allocs = s.num_device_alloc;
    outcome.device_frees = s.num_device_free;
    p.figures = Figures {
        pass: PassFigures::new("", &config.to_config_string(), capacity, &outcome),
        peak_reserved_op: peak.1,
        first_oom_op: outcome.first_oom.as_ref().map(|(i, _)| *i),
        // As the CLI's `--no-follow-addresses`, which clears them: none given when not followed.
        segment_placements_recorded: if follow { trace.segment_placements.len() } else { 0 },
        segment_placements_inferred: follow && trace.placements_inferred && !trace.segment_placements.is_empty(),
        segment_placements_followed: alloc.device().placements_followed(),
        segment_placements_abandoned: abandoned,
    };
    Ok(p)
}

/// A whole cold pass of a trace under one config.
#[wasm_bindgen]
pub struct ReplayRun {
    pass: Pass,
}

#[wasm_bindgen]
impl ReplayRun {
    /// Replays all of `trace` under `config` on a simulated device of `capacity` bytes,
    /// placing segments where the trace's addresses say unless `follow_addresses` is `false`
    /// (left out: following). Refused allocations are counted in the figures, not thrown.
    /// Throws if the config does not parse, the capacity is not a whole number from 1 byte
    /// to 1 TiB, `follow_addresses` is given but not a boolean, or an operation fails for a
    /// reason other than memory.
    #[wasm_bindgen(constructor)]
    pub fn new(
        trace: &TraceFile,
        config: &JsValue,
        capacity: &JsValue,
        follow_addresses: &JsValue,
    ) -> Result<ReplayRun, JsError> {
        let config = Config::parse(&text(config, "config")?).map_err(js_error)?;
        let capacity = to_capacity(number(capacity, "capacity")?).map_err(js_error)?;
        let follow = follows(follow_addresses)?;
        let mut pass = cold_pass(&trace.trace, &config, capacity, follow).map_err(js_error)?;
        pass.figures.trace = trace.name();
        Ok(ReplayRun { pass })
    }

    /// The figures, as JSON with `cachalot replay --json`'s field names.
    pub fn figures_json(&self) -> String {
        serde_json::to_string(&self.pass.figures).unwrap_or_default()
    }

    /// Bytes requested by live allocations after each operation.
    pub fn requested(&self) -> Vec<f64> {
        self.pass.requested.clone()
    }

    /// Bytes of allocated blocks after each operation.
    pub fn allocated(&self) -> Vec<f64> {
        self.pass.allocated.clone()
    }

    /// Bytes of segments held after each operation.
    pub fn reserved(&self) -> Vec<f64> {
        self.pass.reserved.clone()
    }

    /// The index of each operation refused for lack of memory, in order (the first is the
    /// figures' `first_oom_op`): what the timeline marks and the page jumps between.
    pub fn oom_ops(&self) -> Vec<f64> {
        self.pass.oom_ops.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::parse_trace;

    #[test]
    fn figures_equal_the_replay_engine() {
        let mut csv = String::from("Time,Action,Pointer,Size\n");
        for i in 0..200u64 {
            csv += &format!("{i},allocate,{:#x},{}\n", 0x1000 + i * 0x10, (i % 7 + 1) * 700_000);
            if i % 3 == 0 {
                csv += &format!("{i},free,{:#x},0\n", 0x1000 + i * 0x10);
            }
        }
        let trace = parse_trace(&csv).unwrap();
        for (conf, capacity) in [("policy:pytorch", 1u64 << 30), ("policy:pytorch,max_split_size_mb:20", 200 << 20)] {
            let config = Config::parse(conf).unwrap();
            let pass = cold_pass(&trace, &config, capacity, false).unwrap();
            let mut alloc = Allocator::new(SimDevice::new(capacity), config.clone());
            let want = Replayer::new(trace.slots).run_ops(&mut alloc, &trace.ops).unwrap();
            let f = &pass.figures;
            assert_eq!(f.peak_requested_bytes, want.peak_requested_bytes);
            assert_eq!(f.peak_allocated_bytes, want.peak_allocated_bytes);
            assert_eq!(f.peak_reserved_bytes, want.peak_reserved_bytes);
            assert_eq!((f.device_allocs, f.device_frees, f.ooms), (want.device_allocs, want.device_frees, want.ooms));
            assert_eq!(pass.oom_ops.len() as u64, f.ooms, "{conf}: one marker per refusal");
            assert_eq!(pass.oom_ops.first().map(|&i| i as usize), f.first_oom_op, "{conf}: the first is the figures'");
            assert_eq!(pass.reserved.len(), trace.ops.len());
            assert_eq!(pass.reserved[f.peak_reserved_op], f.peak_reserved_bytes as f64);
            assert_eq!(pass.requested.iter().cloned().fold(0.0, f64::max), f.peak_requested_bytes as f64);
            assert_eq!((f.segment_placements_followed, f.segment_placements_recorded), (0, 0), "{conf}: not following");
        }
    }

    /// A pass follows the trace's addresses as the CLI's replay does, and counts them; where
    /// the config asks for other segments than the run made, it says at which operation it
    /// gave them up.
    #[test]
    fn a_pass_follows_the_traces_addresses_and_says_where_it_gave_them_up() {
        // 12 MiB at each of two pointers 12 MiB apart: the run made a 12 MiB segment for each.
        let csv = "Time,Action,Pointer,Size\n1,allocate,0x7f0000000000,12582912\n2,allocate,0x7f0000c00000,12582912\n";
        let trace = parse_trace(csv).unwrap();
        assert_eq!(trace.segment_placements.len(), 2);
        let default = Config::parse("policy:pytorch").unwrap();
        let pass = cold_pass(&trace, &default, 1 << 30, true).unwrap();
        let mut alloc = Allocator::new(SimDevice::for_replay(1 << 30, &trace), default.clone());
        let want = Replayer::new(trace.slots).run_ops(&mut alloc, &trace.ops).unwrap();
        let f = &pass.figures;
        assert_eq!((f.peak_reserved_bytes, f.device_allocs), (want.peak_reserved_bytes, want.device_allocs));
        assert_eq!((f.segment_placements_followed, f.segment_placements_recorded), (2, 2));
        assert!(f.segment_placements_inferred && f.segment_placements_abandoned.is_none());
        // 3 MiB made a 20 MiB segment in the run; under large_segment_size_mb:32 it asks for 32.
        let trace = parse_trace("Time,Action,Pointer,Size\n1,allocate,0x7f0000000000,3145728\n").unwrap();
        let other = Config::parse("policy:pytorch,large_segment_size_mb:32").unwrap();
        let f = cold_pass(&trace, &other, 1 << 30, true).unwrap().figures;
        let gave_up = f.segment_placements_abandoned.expect("another segment size gives the placements up");
        assert_eq!((gave_up.operation, f.segment_placements_followed), (0, 0));
        assert!(gave_up.why.contains("asked for 33554432 bytes where the run made 20971520"), "{}", gave_up.why);
    }
}
