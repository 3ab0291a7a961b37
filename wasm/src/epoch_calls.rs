//! `epoch_calls`: what `empty_cache()` between two passes of a trace (two epochs of the
//! run it recorded) costs in driver calls, against keeping the cache. One allocator replays
//! the trace cold (the first epoch), frees what it left live, then replays it again three
//! times keeping its cache, as `cachalot replay --passes 3` does; a second allocator replays
//! the same first epoch, calls `empty_cache()`, and replays the trace once more.
//!
//! Invariant: `cold` and `warm` are the device calls `cachalot replay --json --passes 3`
//! reports as `device_calls_cold` and `device_calls_warm` (the last warm pass) for the same
//! trace, config and capacity; `emptied` counts the calls `empty_cache()` made and
//! `after_empty` those of the pass after it. Segment sizes are listed so that the page can
//! put a time on each call.

use cachalot_core::replay::Replayer;
use cachalot_core::sim::DeviceCalls;
use cachalot_core::{Allocator, Config, SimDevice, Trace};
use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::error::js_error;
use crate::js_argument::{number, text};
use crate::js_number::to_capacity;
use crate::trace_file::TraceFile;

/// Driver calls of each phase, and the sizes of the segments `empty_cache()` returned.
#[derive(Debug, Default, Serialize)]
pub struct EpochCalls {
    pub cold: DeviceCalls,
    pub warm: DeviceCalls,
    pub emptied: DeviceCalls,
    /// Bytes of each segment `empty_cache()` gave back, in the order the allocator held them.
    pub emptied_segment_bytes: Vec<u64>,
    pub after_empty: DeviceCalls,
    /// Sizes of the segments the pass after `empty_cache()` asked for again.
    pub after_empty_segment_bytes: Vec<u64>,
}

/// The sizes of the segments `alloc` holds.
fn segment_sizes(alloc: &Allocator<SimDevice>) -> Vec<u64> {
    alloc.snapshot(0).segments.iter().map(|s| s.total_size).collect()
}

/// The sizes in `from` that are not in `to`, as multisets.
fn gone(mut from: Vec<u64>, to: &[u64]) -> Vec<u64> {
    for size in to {
        if let Some(i) = from.iter().position(|s| s == size) {
            from.swap_remove(i);
        }
    }
    from
}

/// Measures `trace` under `config` on a device of `capacity` bytes.
pub fn measure(trace: &Trace, config: &Config, capacity: u64) -> Result<EpochCalls, String> {
    let fail = |e: cachalot_core::replay::ReplayError| e.to_string();
    let mut out = EpochCalls::default();

    let mut kept = Allocator::new(SimDevice::for_replay(capacity, trace), config.clone());
    let mut replayer = Replayer::new(trace.slots);
    replayer.run_ops(&mut kept, &trace.ops).map_err(fail)?;
    out.cold = kept.device().calls();
    replayer.free_live(&mut kept).map_err(|e| e.to_string())?;
    for _ in 0..3 {
        let before = kept.device().calls();
        replayer.run_pass(&mut kept, &trace.ops).map_err(fail)?;
        out.warm = kept.device().calls().since(&before);
    }

    let mut emptied = Allocator::new(SimDevice::for_replay(capacity, trace), config.clone());
    let mut replayer = Replayer::new(trace.slots);
    replayer.run_pass(&mut emptied, &trace.ops).map_err(fail)?;
    let held = segment_sizes(&emptied);
    let before = emptied.device().calls();
    emptied.empty_cache().map_err(|e| e.to_string())?;
    out.emptied = emptied.device().calls().since(&before);
    let left = segment_sizes(&emptied);
    out.emptied_segment_bytes = gone(held, &left);
    let before = emptied.device().calls();
    replayer.run_ops(&mut emptied, &trace.ops).map_err(fail)?;
    out.after_empty = emptied.device().calls().since(&before);
    out.after_empty_segment_bytes = gone(segment_sizes(&emptied), &left);
    Ok(out)
}

/// The driver calls of two epochs of `trace`, with and without `empty_cache()` between
/// them, as JSON (see [`EpochCalls`]). Throws if the config does not parse, the capacity
/// is not a whole number from 1 byte to 1 TiB, or an operation fails for a reason other
/// than memory.
#[wasm_bindgen]
pub fn epoch_calls_json(trace: &TraceFile, config: &JsValue, capacity: &JsValue) -> Result<String, JsError> {
    let config = Config::parse(&text(config, "config")?).map_err(js_error)?;
    let capacity = to_capacity(number(capacity, "capacity")?).map_err(js_error)?;
    let calls = measure(&trace.trace, &config, capacity).map_err(js_error)?;
    serde_json::to_string(&calls).map_err(js_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::parse_trace;

    #[test]
    fn empty_cache_between_epochs_returns_every_segment_and_asks_again() {
        let mut csv = String::from("Time,Action,Pointer,Size\n");
        for i in 0..60u64 {
            csv += &format!("{i},allocate,{:#x},{}\n", 0x1000 + i * 0x10, (i % 5 + 1) * 3_000_000);
            if i % 2 == 1 {
                csv += &format!("{i},free,{:#x},0\n", 0x1000 + (i - 1) * 0x10);
            }
        }
        let trace = parse_trace(&csv).unwrap();
        let calls = measure(&trace, &Config::parse("policy:pytorch").unwrap(), 1 << 30).unwrap();
        assert!(calls.cold.allocations > 0);
        assert_eq!(calls.warm.allocations, 0, "a kept cache serves the second epoch");
        assert_eq!(calls.emptied.frees, calls.cold.allocations - calls.cold.frees, "every segment goes back");
        assert_eq!(calls.emptied_segment_bytes.len() as u64, calls.emptied.frees);
        assert_eq!(calls.after_empty.allocations, calls.after_empty_segment_bytes.len() as u64);
        assert!(calls.after_empty.allocations > 0, "the epoch after empty_cache asks the driver again");
    }
}
