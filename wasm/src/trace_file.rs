//! `TraceFile`: a trace parsed by the core's own reader (RMM CSV or PyTorch snapshot JSON),
//! shared by every allocator and replay that uses it, so a trace is parsed once however
//! many configs replay it.
//!
//! Invariant: the trace never changes after parsing; holders share it through an `Rc`.

use std::rc::Rc;

use cachalot_core::size::format_size;
use cachalot_core::{parse_trace, Trace, TraceOp};
use wasm_bindgen::prelude::*;

use crate::error::js_error;
use crate::js_argument::{bytes, count, text};

/// A parsed allocation trace.
#[wasm_bindgen]
pub struct TraceFile {
    pub(crate) trace: Rc<Trace>,
    name: String,
}

#[wasm_bindgen]
impl TraceFile {
    /// Parses a trace given as UTF-8 bytes (a `Uint8Array`, already decompressed) or as a
    /// string; `name` is what the page calls it. Throws, naming the trace and the line, if
    /// the text is not a trace the core's reader accepts.
    pub fn parse(data: &JsValue, name: &JsValue) -> Result<TraceFile, JsError> {
        let name = text(name, "trace name")?;
        let data = bytes(data, "trace")?;
        let text = core::str::from_utf8(&data).map_err(|e| js_error(format!("{name}: not UTF-8 text: {e}")))?;
        let trace = parse_trace(text).map_err(|e| js_error(format!("{name}: {e}")))?;
        Ok(TraceFile { trace: Rc::new(trace), name })
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
        let t = parse_trace("Time,Action,Pointer,Size\n1,allocate,0x10,2048\n2,free,0x10,2048\n").unwrap();
        assert_eq!(describe(&t, 0), "allocate 2.00 KiB (2048 B) on stream 0x0 (slot 0)");
        assert_eq!(describe(&t, 1), "free the allocation in slot 0");
        assert_eq!(describe(&t, 2), "");
    }
}
