//! `TraceFile`: a trace parsed by the core's own reader (RMM CSV, or a PyTorch snapshot as
//! JSON or pickle), with the snapshot's own segments when it lists them,
//! shared by every allocator and replay that uses it, so a trace is parsed once however
//! many configs replay it.
//!
//! Invariant: the trace never changes after parsing; holders share it through an `Rc`.

use std::rc::Rc;

use cachalot_core::size::format_size;
use cachalot_core::{Trace, TraceOp};
use wasm_bindgen::prelude::*;

use crate::error::js_error;
use crate::js_argument::{bytes, count, text, whole};
use crate::reader::{read_file_slim, read_trace, BROWSER_LIMITS};
use crate::recorded_run::{recorded, Recorded};
use crate::snapshot_map;
use cachalot_core::trace::frame_table::FrameTable;

/// A parsed allocation trace.
#[wasm_bindgen]
pub struct TraceFile {
    pub(crate) trace: Rc<Trace>,
    name: String,
    /// The snapshot's own memory map (`snapshot_map::flat`), when it lists segments.
    segments: Option<Rc<Vec<f64>>>,
    /// What the recorded run itself did, when the trace was read from a snapshot.
    pub(crate) recorded: Option<Rc<Recorded>>,
}

#[wasm_bindgen]
impl TraceFile {
    /// Parses a trace given as bytes (a `Uint8Array`, already decompressed: UTF-8 text, or
    /// the pickle `torch.cuda.memory._dump_snapshot` writes) or as a string; `name` is what the page calls it. A PyTorch snapshot keeps one history per
    /// GPU and a replay simulates one: `device` (optional) picks it, and is needed when
    /// several have allocations (or read each with `parse_each_device`). Throws, naming the
    /// trace and the line, if the text is not a trace the core's reader accepts, and when
    /// the device is missing or not in it, or past the browser's limits (`BROWSER_LIMITS`:
    /// 768 MiB of text, nesting 64 deep, 20 million rows or events), naming the limit.
    pub fn parse(data: &JsValue, name: &JsValue, device: &JsValue) -> Result<TraceFile, JsError> {
        let name = text(name, "trace name")?;
        let device = if device.is_undefined() || device.is_null() {
            None
        } else {
            let d = whole(device, "device")?;
            // A snapshot listing 2^32 devices would not fit in the page's memory.
            let d = usize::try_from(d)
                .map_err(|_| js_error(format!("{name}: device {d} asked for, but no snapshot records that many")))?;
            Some(d)
        };
        let trace = read_trace(&bytes(data, "trace")?, &name, device, &BROWSER_LIMITS).map_err(js_error)?;
        Ok(TraceFile { trace: Rc::new(trace), name, segments: None, recorded: None })
    }

    /// Parses a trace as `parse` does (keeping the snapshot's segments for `snapshot_map`), but a snapshot's every GPU with allocations becomes a
    /// trace of its own (its `device` set), in device order; a CSV gives one trace. One parse,
    /// however many GPUs.
    pub fn parse_each_device(data: &JsValue, name: &JsValue) -> Result<Vec<TraceFile>, JsError> {
        let name = text(name, "trace name")?;
        let mut frames = FrameTable::default();
        let (traces, snapshot) =
            read_file_slim(&bytes(data, "trace")?, &name, &BROWSER_LIMITS, &mut frames).map_err(js_error)?;
        let segments = snapshot
            .as_ref()
            .and_then(|v| v.get("segments").filter(|s| s.is_array()))
            .map(|s| Rc::new(snapshot_map::flat(s)));
        Ok(traces
            .into_iter()
            .map(|t| {
                let recorded = snapshot.as_ref().map(|v| Rc::new(recorded(v, &t, frames.clone())));
                TraceFile { trace: Rc::new(t), name: name.clone(), segments: segments.clone(), recorded }
            })
            .collect())
    }

    /// The memory map (as `Allocator.memory_map()` gives it) of the segments the snapshot
    /// itself lists, as they were when it was taken: what the page draws of a snapshot taken
    /// without a history. `undefined` for a CSV or a snapshot without a `segments` list.
    pub fn snapshot_map(&self) -> Option<Vec<f64>> {
        self.segments.as_deref().cloned()
    }

    /// The snapshot device whose history this is, when the snapshot listed several;
    /// `undefined` otherwise.
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> Option<f64> {
        self.trace.device.map(|d| d as f64)
    }

    /// The name given at parsing.
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// Number of operations.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> usize {
        self.trace.ops.len()
    }

    /// One line saying what the reader kept and skipped.
    pub fn describe(&self) -> String {
        self.trace.describe()
    }

    /// What the reader counted, as JSON (`cachalot replay --json`'s `trace_report`).
    pub fn report_json(&self) -> String {
        serde_json::to_string(&self.trace.report).unwrap_or_default()
    }

    /// Operation `index` in words ("allocate 3.00 MiB on stream 0x0 (slot 5)"); an empty
    /// string past the end. Throws if `index` is not a whole number.
    pub fn describe_op(&self, index: &JsValue) -> Result<String, JsError> {
        Ok(describe(&self.trace, count(index, "operation index")?))
    }
}

/// Operation `index` of `trace` in words; an empty string past the end.
pub fn describe(trace: &Trace, index: usize) -> String {
    match trace.ops.get(index) {
        Some(TraceOp::Alloc { slot, size, stream }) => {
            format!("allocate {} ({size} B) on stream {stream:#x} (slot {slot})", format_size(*size))
        }
        Some(TraceOp::Free { slot }) => format!("free the allocation in slot {slot}"),
        Some(TraceOp::FreeDeferred { slot, lane }) => {
            format!("free the allocation in slot {slot}, still used on another stream (waits on lane {lane})")
        }
        Some(TraceOp::FreeCompleted { lane }) => format!("the other stream's work on lane {lane} finishes"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_in_words() {
        let t =
            cachalot_core::parse_trace("Time,Action,Pointer,Size\n1,allocate,0x10,2048\n2,free,0x10,2048\n").unwrap();
        assert_eq!(describe(&t, 0), "allocate 2.00 KiB (2048 B) on stream 0x0 (slot 0)");
        assert_eq!(describe(&t, 1), "free the allocation in slot 0");
        assert_eq!(describe(&t, 2), "");
    }
}
