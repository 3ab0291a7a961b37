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
use crate::js_argument::{count, flag, number, text, whole};
use crate::js_number::{to_capacity, to_f64, to_fraction};
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
    /// Whether a loaded trace's addresses place the segments (`load_trace`'s choice).
    follow: bool,
}

#[wasm_bindgen]
impl Allocator {
    /// An allocator with `config` (`PYTORCH_CUDA_ALLOC_CONF` syntax) over a simulated device
    /// of `capacity` bytes. Throws if the config does not parse (the message names the key)
    /// or the capacity is not a whole number from 1 byte to 1 TiB.
    #[wasm_bindgen(constructor)]
    pub fn new(config: &JsValue, capacity: &JsValue) -> Result<Allocator, JsError> {
        let config = Config::parse(&text(config, "config")?).map_err(js_error)?;
        let capacity = to_capacity(number(capacity, "capacity")?).map_err(js_error)?;
        let inner = Core::new(SimDevice::new(capacity), config.clone());
        Ok(Allocator { inner, config, capacity, fraction: None, explain: false, cursor: None, follow: true })
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

    /// Allocates `size` bytes on `stream`; returns the address. Throws PyTorch's
    /// out-of-memory message when the device (or the memory fraction) has no room, and a
    /// message naming the argument when one is not a whole number from 0 to 2^53.
    pub fn malloc(&mut self, size: &JsValue, stream: &JsValue) -> Result<f64, JsError> {
        let size = whole(size, "size")?;
        let stream = whole(stream, "stream")?;
        self.inner.malloc(size, stream).map(to_f64).map_err(js_error)
    }

    /// Frees the allocation at `addr` (JS `free_block`: wasm-bindgen's `free()` drops the
    /// allocator itself). Throws if `addr` is not a live allocation (never allocated, already
    /// freed, or inside a block rather than at its start), and changes nothing then.
    #[wasm_bindgen(js_name = free_block)]
    pub fn free_block(&mut self, addr: &JsValue) -> Result<(), JsError> {
        let addr = whole(addr, "address")?;
        self.inner.free(addr).map_err(js_error)
    }

    /// Marks the allocation at `addr` as used on `stream` too. Throws if `addr` is not a
    /// live allocation, or when 255 streams are recorded on it already.
    pub fn record_stream(&mut self, addr: &JsValue, stream: &JsValue) -> Result<(), JsError> {
        let addr = whole(addr, "address")?;
        let stream = whole(stream, "stream")?;
        self.inner.record_stream(addr, stream).map_err(js_error)
    }

    /// Returns every cached segment that holds no allocation to the device.
    pub fn empty_cache(&mut self) -> Result<(), JsError> {
        self.inner.empty_cache().map_err(js_error)
    }

    /// Limits reserved memory to `fraction` of the device (kept across resets). Throws,
    /// keeping the fraction in effect, unless `fraction` is a number from 0 to 1.
    pub fn set_memory_fraction(&mut self, fraction: &JsValue) -> Result<(), JsError> {
        let fraction = to_fraction(number(fraction, "memory fraction")?).map_err(js_error)?;
        self.inner.set_memory_fraction(fraction).map_err(js_error)?;
        self.fraction = Some(fraction);
        Ok(())
    }

    /// Keeps `stream` busy: events recorded on it stay pending, so frees wait.
    pub fn hold_stream(&mut self, stream: &JsValue) -> Result<(), JsError> {
        let stream = whole(stream, "stream")?;
        self.inner.device_mut().hold_stream(stream);
        Ok(())
    }

    /// The work queued on `stream` completes; frees waiting on it complete at the next malloc.
    pub fn finish_stream(&mut self, stream: &JsValue) -> Result<(), JsError> {
        let stream = whole(stream, "stream")?;
        self.inner.device_mut().finish_stream(stream);
        Ok(())
    }

    /// Starts or stops noting decisions (kept across resets). Throws unless `on` is a
    /// boolean.
    pub fn set_explain(&mut self, on: &JsValue) -> Result<(), JsError> {
        let on = flag(on, "explain")?;
        self.explain = on;
        self.inner.set_explain(on);
        Ok(())
    }

    /// The decisions since the last call, as JSON `[{kind, ..., text}]`. Past 65,536 untaken
    /// the older half is dropped, so the latest (at least 32,768) are kept.
    pub fn take_decisions(&mut self) -> String {
        decisions::to_json(&self.inner.take_decisions())
    }

    /// Segments and blocks in the flat layout of `memory_map.rs`.
    pub fn memory_map(&self) -> Vec<f64> {
        memory_map::encode(&self.inner.layout(), self.vm_kind() == memory_map::KIND_PAGED)
    }

    /// The snapshot in PyTorch's `torch.cuda.memory._snapshot()` schema, as JSON.
    pub fn snapshot_json(&mut self) -> String {
        self.inner.snapshot_json(0)
    }

    /// The statistics (`DeviceStats`), as JSON.
    pub fn stats_json(&mut self) -> String {
        serde_json::to_string(&self.inner.stats()).unwrap_or_default()
    }

    /// The statistics with `torch.cuda.memory_stats()` keys, as JSON.
    pub fn flat_stats_json(&mut self) -> String {
        self.inner.stats().to_flat_json()
    }

    /// A sentence for each key of this allocator's config that changes nothing here:
    /// PyTorch's split and expandable-segment settings under cachalot's policy, which maps
    /// pages instead (the core's `Config::moot_key_notes`).
    pub fn keys_without_effect(&self) -> Vec<String> {
        if !self.inner.uses_virtual_memory() {
            return Vec::new();
        }
        self.inner.config().moot_key_notes()
    }

    /// The figures the page shows on every frame: requested, allocated and reserved bytes
    /// (current, then peak), device allocations, out-of-memory errors, segments, and how the
    /// allocator holds memory (`memory_map`'s segment kinds: 0 classic segments, 1 expandable
    /// segments, 2 cachalot's paged policy; under virtual memory segments are address ranges
    /// and device allocations are mapping calls).
    pub fn figures(&mut self) -> Vec<f64> {
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
            if self.inner.uses_virtual_memory() {
                self.inner.address_ranges() as f64
            } else {
                s.segment.all.current as f64
            },
            self.vm_kind(),
        ]
    }

    /// The `torch.cuda.memory_summary()` table. Throws unless `abbreviated` is a boolean.
    pub fn memory_summary(&mut self, abbreviated: &JsValue) -> Result<String, JsError> {
        Ok(self.inner.memory_summary(0, flag(abbreviated, "abbreviated")?))
    }

    /// Starts afresh: a new device and allocator with the same config, capacity and memory
    /// fraction; a loaded trace goes back to its start.
    pub fn reset(&mut self) -> Result<(), JsError> {
        let device = match &self.cursor {
            Some(c) if self.follow => SimDevice::for_replay(self.capacity, &c.trace),
            _ => SimDevice::new(self.capacity),
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

    /// Starts afresh (see `reset`) with `trace` loaded at its start, its segments placed
    /// where the trace's addresses say unless `follow_addresses` is `false` (left out:
    /// following, as `ReplayRun` does). Throws if `follow_addresses` is given but not a
    /// boolean.
    pub fn load_trace(&mut self, trace: &TraceFile, follow_addresses: &JsValue) -> Result<(), JsError> {
        self.follow = crate::replay_run::follows(follow_addresses)?;
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
    /// Allocations refused for lack of memory are counted (`trace_ooms`) and skipped. Throws
    /// when no trace is loaded, when `n` is not a whole number, or when an operation fails
    /// for another reason (a free of an address freed by hand): the position then stays at
    /// that operation, and stepping again fails the same way.
    pub fn step(&mut self, n: &JsValue) -> Result<usize, JsError> {
        let n = count(n, "step count")?;
        self.step_by(n)
    }

    /// Moves to the state after `position` operations of the loaded trace (backwards by
    /// replaying from the start on a fresh allocator). Throws when no trace is loaded, when
    /// `position` is not a whole number from 0 to the trace's length, or as `step` does.
    pub fn seek(&mut self, position: &JsValue) -> Result<(), JsError> {
        let position = whole(position, "position")?;
        let Some(cursor) = self.cursor.as_ref() else {
            return Err(js_error("no trace is loaded"));
        };
        let length = cursor.trace.ops.len();
        let Some(position) = usize::try_from(position).ok().filter(|&p| p <= length) else {
            return Err(js_error(format!("position must be at most the trace's length, {length}, got {position}")));
        };
        if position < cursor.position {
            self.reset()?;
        }
        let here = self.trace_position();
        self.step_by(position - here)?;
        Ok(())
    }
}

impl Allocator {
    /// `step`'s work, with `n` already checked.
    fn step_by(&mut self, n: usize) -> Result<usize, JsError> {
        let Some(cursor) = self.cursor.as_mut() else {
            return Err(js_error("no trace is loaded"));
        };
        cursor.step(&mut self.inner, n).map_err(js_error)
    }

    /// How this allocator holds memory, as a `memory_map` segment kind.
    fn vm_kind(&self) -> f64 {
        match (self.inner.uses_virtual_memory(), self.inner.config().policy) {
            (false, _) => memory_map::KIND_CLASSIC,
            (true, cachalot_core::Policy::Cachalot) => memory_map::KIND_PAGED,
            (true, cachalot_core::Policy::PyTorch) => memory_map::KIND_EXPANDABLE,
        }
    }
}
