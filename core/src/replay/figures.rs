//! A pass's memory figures, named as `cachalot replay --json` reports them and the browser
//! shows them: one definition for both, so the two cannot drift apart.
//!
//! Invariant: every figure is the [`ReplayOutcome`]'s it was made from (the ratio is peak
//! reserved over peak requested, 1 when nothing was requested).

use alloc::format;
use alloc::string::String;

use crate::replay::replayer::ReplayOutcome;

/// The figures of one pass of a trace under one config, on a device of `capacity_bytes`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PassFigures {
    /// The trace's name.
    pub trace: String,
    /// The config, as `Config::to_config_string` writes it.
    pub config: String,
    /// Operations in the trace.
    pub ops: usize,
    /// Peak bytes requested by live allocations.
    pub peak_requested_bytes: u64,
    /// Peak bytes of allocated blocks.
    pub peak_allocated_bytes: u64,
    /// Peak bytes of segments held.
    pub peak_reserved_bytes: u64,
    /// Peak reserved over peak requested.
    pub reserved_over_requested: f64,
    /// Segments (or spans of pages) obtained from the device.
    pub device_allocs: u64,
    /// Segments (or spans of pages) given back.
    pub device_frees: u64,
    /// Allocations refused for lack of memory.
    pub ooms: u64,
    /// The simulated device's size.
    pub capacity_bytes: u64,
    /// The first refusal, `operation N: ` and its explanation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_oom: Option<String>,
}

impl PassFigures {
    /// The figures of `outcome`, a pass of `trace` under `config` on `capacity` bytes.
    pub fn new(trace: &str, config: &str, capacity: u64, outcome: &ReplayOutcome) -> PassFigures {
        PassFigures {
            trace: trace.into(),
            config: config.into(),
            ops: outcome.ops,
            peak_requested_bytes: outcome.peak_requested_bytes,
            peak_allocated_bytes: outcome.peak_allocated_bytes,
            peak_reserved_bytes: outcome.peak_reserved_bytes,
            reserved_over_requested: outcome.peak_reserved_bytes as f64 / outcome.peak_requested_bytes.max(1) as f64,
            device_allocs: outcome.device_allocs,
            device_frees: outcome.device_frees,
            ooms: outcome.ooms,
            capacity_bytes: capacity,
            first_oom: outcome.first_oom.as_ref().map(|(i, report)| format!("operation {i}: {report}")),
        }
    }
}
