//! `ReplayRun`: one whole cold pass of a trace on a fresh allocator — what `cachalot replay
//! --json` measures for its memory figures — with the timeline of requested, allocated and
//! reserved bytes after every operation.
//!
//! Invariant: the figures are those of `Replayer::run_ops` on `Allocator::new(SimDevice::
//! new(capacity), config)` over the whole trace, in the CLI's own type ([`PassFigures`], so
//! the names and the ratio are defined once); each timeline has one value per operation.

use cachalot_core::replay::{ReplayError, Step};
use cachalot_core::{Allocator, Config, PassFigures, ReplayOutcome, Replayer, SimDevice, Trace};
use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::error::js_error;
use crate::js_argument::{number, text};
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

/// Replays all of `trace` once on a fresh allocator.
pub fn cold_pass(trace: &Trace, config: &Config, capacity: u64) -> Result<Pass, ReplayError> {
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, trace), config.clone());
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
    /// Replays all of `trace` under `config` on a simulated device of `capacity` bytes.
    /// Refused allocations are counted in the figures, not thrown. Throws if the config does
    /// not parse, the capacity is not a whole number from 1 byte to 1 TiB, or an operation
    /// fails for a reason other than memory.
    #[wasm_bindgen(constructor)]
    pub fn new(trace: &TraceFile, config: &JsValue, capacity: &JsValue) -> Result<ReplayRun, JsError> {
        let config = Config::parse(&text(config, "config")?).map_err(js_error)?;
        let capacity = to_capacity(number(capacity, "capacity")?).map_err(js_error)?;
        let mut pass = cold_pass(&trace.trace, &config, capacity).map_err(js_error)?;
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
            let pass = cold_pass(&trace, &config, capacity).unwrap();
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
        }
    }
}
