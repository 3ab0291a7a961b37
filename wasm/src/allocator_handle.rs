//! `Allocator`: one cachalot allocator over a simulated device, as JavaScript sees it.
//! By hand (malloc, free, record_stream, empty_cache, a memory fraction, streams held busy
//! so that frees stay pending) or driven by a trace it steps through, forwards and back.
//!
//! Invariants: the allocator is always the result of a fresh `Allocator::new(SimDevice::
//! new(capacity), config)` followed by the calls made since (a reset starts it afresh with
//! the same config, capacity and memory fraction); when a trace is loaded, its cursor's
//! `position` operations are among those calls, and `seek` backwards replays them on a
//! fresh allocator (the core's allocator cannot be copied).

use cachalot_core::{Allocator as Core, Config, SimDevice};
use wasm_bindgen::prelude::*;

use crate::decisions;
use crate::error::js_error;
use crate::js_number::{to_capacity, to_f64, to_u64};
use crate::memory_map;
use crate::trace_cursor::TraceCursor;
use crate::trace_file::TraceFile;

/// A caching allocator over a simulated device.
#[wasm_bindgen]
pub struct Allocator {
    inner: Core<SimDevice>,
    config: Config,
    capacity: u64,
    fraction: Option<f64>,
    explain: bool,
    cursor: Option<TraceCursor>,
}

#[wasm_bindgen]
impl Allocator {
    /// An allocator with `config` (`PYTORCH_CUDA_ALLOC_CONF` syntax) over a simulated device
    /// of `capacity` bytes.
    #[wasm_bindgen(constructor)]
    pub fn new(config: &str, capacity: f64) -> Result<Allocator, JsError> {
        let config = Config::parse(config).map_err(js_error)?;
        let capacity = to_capacity(capacity).map_err(js_error)?;
        let inner = Core::new(SimDevice::new(capacity), config.clone());
        Ok(Allocator { inner, config, capacity, fraction: None, explain: false, cursor: None })
    }

    /// The config as the core writes it back (`policy:pytorch,max_split_size_mb:128`).
    pub fn config_string(&self) -> String {
        self.config.to_config_string()
    }

    /// Simulated device capacity in bytes.
    #[wasm_bindgen(getter)]
    pub fn capacity(&self) -> f64 {
        to_f64(self.capacity)
    }

    /// Allocates `size` bytes on `stream`; returns the address.
    pub fn malloc(&mut self, size: f64, stream: f64) -> Result<f64, JsError> {
        let size = to_u64(size, "size").map_err(js_error)?;
        let stream = to_u64(stream, "stream").map_err(js_error)?;
        self.inner.malloc(size, stream).map(to_f64).map_err(js_error)
    }

    /// Frees the allocation at `addr` (JS `free_block`: wasm-bindgen's `free()` drops the
    /// allocator itself).
    #[wasm_bindgen(js_name = free_block)]
    pub fn free_block(&mut self, addr: f64) -> Result<(), JsError> {
        let addr = to_u64(addr, "address").map_err(js_error)?;
        self.inner.free(addr).map_err(js_error)
    }

    /// Marks the allocation at `addr` as used on `stream` too.
    pub fn record_stream(&mut self, addr: f64, stream: f64) -> Result<(), JsError> {
        let addr = to_u64(addr, "address").map_err(js_error)?;
        let stream = to_u64(stream, "stream").map_err(js_error)?;
        self.inner.record_stream(addr, stream).map_err(js_error)
    }

    /// Returns every cached segment that holds no allocation to the device.
    pub fn empty_cache(&mut self) -> Result<(), JsError> {
        self.inner.empty_cache().map_err(js_error)
    }

    /// Limits reserved memory to `fraction` of the device (kept across resets).
    pub fn set_memory_fraction(&mut self, fraction: f64) -> Result<(), JsError> {
        self.inner.set_memory_fraction(fraction).map_err(js_error)?;
        self.fraction = Some(fraction);
        Ok(())
    }

    /// Keeps `stream` busy: events recorded on it stay pending, so frees wait.
    pub fn hold_stream(&mut self, stream: f64) -> Result<(), JsError> {
        let stream = to_u64(stream, "stream").map_err(js_error)?;
        self.inner.device_mut().hold_stream(stream);
        Ok(())
    }

    /// The work queued on `stream` completes; frees waiting on it complete at the next malloc.
    pub fn finish_stream(&mut self, stream: f64) -> Result<(), JsError> {
        let stream = to_u64(stream, "stream").map_err(js_error)?;
        self.inner.device_mut().finish_stream(stream);
        Ok(())
    }

    /// Starts or stops noting decisions (kept across resets).
    pub fn set_explain(&mut self, on: bool) {
        self.explain = on;
        self.inner.set_explain(on);
    }

    /// The decisions since the last call, as JSON `[{kind, ..., text}]`.
    pub fn take_decisions(&mut self) -> String {
        decisions::to_json(&self.inner.take_decisions())
    }

    /// Segments and blocks in the flat layout of `memory_map.rs`.
    pub fn memory_map(&self) -> Vec<f64> {
        memory_map::encode(&self.inner.segments(0))
    }

    /// The snapshot in PyTorch's `torch.cuda.memory._snapshot()` schema, as JSON.
    pub fn snapshot_json(&self) -> String {
        self.inner.snapshot_json(0)
    }

    /// The statistics (`DeviceStats`), as JSON.
    pub fn stats_json(&self) -> String {
        serde_json::to_string(&self.inner.stats()).unwrap_or_default()
    }

    /// The statistics with `torch.cuda.memory_stats()` keys, as JSON.
    pub fn flat_stats_json(&self) -> String {
        self.inner.stats().to_flat_json()
    }

    /// The figures the page shows on every frame: requested, allocated and reserved bytes
    /// (current, then peak), device allocations, out-of-memory errors and segments.
    pub fn figures(&self) -> Vec<f64> {
        let s = self.inner.stats();
        let (q, a, r) = (&s.requested_bytes.all, &s.allocated_bytes.all, &s.reserved_bytes.all);
        vec![
            q.current as f64,
            a.current as f64,
            r.current as f64,
            q.peak as f64,
            a.peak as f64,
            r.peak as f64,
            s.num_device_alloc as f64,
            s.num_ooms as f64,
            s.segment.all.current as f64,
        ]
    }

    /// The `torch.cuda.memory_summary()` table.
    pub fn memory_summary(&self, abbreviated: bool) -> String {
        self.inner.memory_summary(0, abbreviated)
    }

    /// Starts afresh: a new device and allocator with the same config, capacity and memory
    /// fraction; a loaded trace goes back to its start.
    pub fn reset(&mut self) -> Result<(), JsError> {
        let device = match &self.cursor {
            Some(c) => SimDevice::for_replay(self.capacity, &c.trace),
            None => SimDevice::new(self.capacity),
        };
        let mut inner = Core::new(device, self.config.clone());
        if let Some(f) = self.fraction {
            inner.set_memory_fraction(f).map_err(js_error)?;
        }
        inner.set_explain(self.explain);
        self.inner = inner;
        self.cursor = self.cursor.as_ref().map(TraceCursor::rewound);
        Ok(())
    }

    /// Starts afresh (see `reset`) with `trace` loaded at its start.
    pub fn load_trace(&mut self, trace: &TraceFile) -> Result<(), JsError> {
        self.cursor = Some(TraceCursor::new(trace.trace.clone()));
        self.reset()
    }

    /// Operations of the loaded trace executed so far (0 without one).
    pub fn trace_position(&self) -> usize {
        self.cursor.as_ref().map_or(0, |c| c.position)
    }

    /// Operations in the loaded trace (0 without one).
    pub fn trace_length(&self) -> usize {
        self.cursor.as_ref().map_or(0, |c| c.trace.ops.len())
    }

    /// Allocations of the loaded trace refused so far.
    pub fn trace_ooms(&self) -> f64 {
        self.cursor.as_ref().map_or(0.0, |c| c.ooms as f64)
    }

    /// The latest refusal while stepping the trace, if any: operation and message.
    pub fn trace_last_oom(&self) -> Option<String> {
        self.cursor.as_ref().and_then(|c| c.last_oom.clone())
    }

    /// Executes up to `n` more operations of the loaded trace; returns how many ran.
    pub fn step(&mut self, n: usize) -> Result<usize, JsError> {
        let Some(cursor) = self.cursor.as_mut() else {
            return Err(js_error("no trace is loaded"));
        };
        cursor.step(&mut self.inner, n).map_err(js_error)
    }

    /// Moves to the state after `position` operations of the loaded trace (backwards by
    /// replaying from the start on a fresh allocator).
    pub fn seek(&mut self, position: usize) -> Result<(), JsError> {
        let Some(cursor) = self.cursor.as_ref() else {
            return Err(js_error("no trace is loaded"));
        };
        if position < cursor.position {
            self.reset()?;
        }
        let here = self.trace_position();
        self.step(position.saturating_sub(here))?;
        Ok(())
    }
}
