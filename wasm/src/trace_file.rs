//! `TraceFile`: a trace parsed by the core's own reader (RMM CSV or PyTorch snapshot JSON),
//! shared by every allocator and replay that uses it, so a trace is parsed once however
//! many configs replay it.
//!
//! Invariant: the trace never changes after parsing; holders share it through an `Rc`.

use std::rc::Rc;

use cachalot_core::size::format_size;
use cachalot_core::{parse_device_trace, Trace, TraceErrorKind, TraceOp};
use wasm_bindgen::prelude::*;

use crate::error::{js_error, js_error_with};
use crate::js_argument::{bytes, count, text, whole};

/// A parsed allocation trace.
#[wasm_bindgen]
pub struct TraceFile {
    pub(crate) trace: Rc<Trace>,
    name: String,
}

#[wasm_bindgen]
impl TraceFile {
    /// Parses a trace given as UTF-8 bytes (a `Uint8Array`, already decompressed) or as a
    /// string; `name` is what the page calls it. A PyTorch snapshot keeps one history per
    /// GPU and a replay simulates one: `device` (optional) picks it, and is needed when
    /// several have allocation events. Throws, naming the trace and the line, if the text is
    /// not a trace the core's reader accepts, and when the device is missing or not in it;
    /// when it is missing, the error's `devices` lists those to choose from.
    pub fn parse(data: &JsValue, name: &JsValue, device: &JsValue) -> Result<TraceFile, JsValue> {
        let name = text(name, "trace name")?;
        let device = if device.is_undefined() || device.is_null() {
            None
        } else {
            Some(usize::try_from(whole(device, "device")?).unwrap_or(usize::MAX))
        };
        let data = bytes(data, "trace")?;
        let text = core::str::from_utf8(&data).map_err(|e| js_error(format!("{name}: not UTF-8 text: {e}")))?;
        let trace = parse_device_trace(text, device).map_err(|e| match &e.kind {
            TraceErrorKind::DeviceNotChosen { devices } => js_error_with(
                format!(
                    "{name}: {e}: choose one with the device argument (with the CLI: cachalot replay {name} --device N)"
                ),
                "devices",
                devices.iter().map(|&d| JsValue::from_f64(d as f64)).collect::<Vec<JsValue>>().into(),
            ),
            TraceErrorKind::NoSuchDevice | TraceErrorKind::Invalid => js_error(format!("{name}: {e}")).into(),
        })?;
        Ok(TraceFile { trace: Rc::new(trace), name })
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
