//! Where a replay's out of memory happened, in terms of the user's own file: the operation,
//! its CSV line or snapshot event, the recorded time, the pointer the recorded run got, the
//! request, and the Python frames the snapshot recorded for it; with the allocator's
//! explanation. `replay --json` gives it as an object.
//!
//! Invariant: every field but `operation`, `size`, `stream` and `explanation` comes from the
//! input as it was read, and is absent when the input does not hold it (a CSV has no frames,
//! a trace built by hand no positions).

use cachalot_cli::trace_file::Input;
use cachalot_core::{OomReport, Position, TraceOp};
use serde::Serialize;
use serde_json::Value;

use super::byte_size::human;
use super::input::NamedTrace;

/// The first out of memory of a replay.
#[derive(Serialize, Debug, Clone)]
pub struct OomLocation {
    /// 0-based index of the operation among the trace's operations.
    pub operation: usize,
    /// The CSV line (1-based) or snapshot event (0-based, in the device's list) it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<u32>,
    /// The recorded time, in microseconds, as the input has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_us: Option<u64>,
    /// Microseconds since the trace's first operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_start_us: Option<u64>,
    /// The pointer the recorded run got for this allocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<u64>,
    /// Bytes requested.
    pub size: u64,
    /// The stream of the request.
    pub stream: u64,
    /// The stack frames the snapshot recorded for the allocation (`filename`, `line`, `name`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<Value>,
    /// The allocator's explanation (PyTorch's message, and why nothing fit).
    pub explanation: String,
}

impl OomLocation {
    /// Locates operation `op` of `t`, refused with `report` (reading the spooled operations
    /// again to find it).
    pub fn new(t: &NamedTrace, op: usize, report: &OomReport) -> Result<OomLocation, String> {
        let found = t.operation(op)?;
        let (size, stream) = match found {
            Some((TraceOp::Alloc { size, stream, .. }, _, _)) => (size, stream),
            _ => (report.requested, 0),
        };
        let position = found.map(|(_, _, p)| p);
        let time_us = found.map(|(_, time, _)| time);
        let mut at = OomLocation {
            operation: op,
            line: None,
            event: None,
            time_us,
            since_start_us: time_us.zip(t.ops.first_time_us()).map(|(t, t0)| t.saturating_sub(t0)),
            pointer: None,
            size,
            stream,
            frames: Vec::new(),
            explanation: report.to_string(),
        };
        match (position, &t.input) {
            (Some(Position::Line(n)), Input::Csv(_)) => {
                at.line = Some(n);
                at.pointer = t.input.csv_row(n).and_then(|(header, row)| csv_pointer(&header, &row));
            }
            (Some(Position::Event(i)), Input::Snapshot { frames, .. }) => {
                at.event = Some(i);
                if let Some(e) = t.input.snapshot_event(i) {
                    at.pointer = e.addr.number();
                    at.frames = frames.frames(e.stack);
                }
            }
            _ => {}
        }
        Ok(at)
    }

    /// The report's lines: where, then the frames (innermost first), then the explanation.
    pub fn describe(&self) -> String {
        let mut s = format!("operation {}", self.operation);
        if let Some(n) = self.line {
            s.push_str(&format!(", line {n}"));
        }
        if let Some(i) = self.event {
            s.push_str(&format!(", event {i}"));
        }
        if let Some(t) = self.since_start_us {
            s.push_str(&format!(", {:.6} s into the trace", t as f64 / 1e6));
        }
        s.push_str(&format!(": {} on stream {:#x}", human(self.size), self.stream));
        if let Some(p) = self.pointer {
            s.push_str(&format!(", recorded at pointer {p:#x}"));
        }
        for f in &self.frames {
            let get = |k: &str| f.get(k).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
            s.push_str(&format!(
                "\n                  at {}:{} in {}",
                get("filename").unwrap_or_default(),
                get("line").unwrap_or_default(),
                get("name").unwrap_or_default()
            ));
        }
        s.push('\n');
        s.push_str(&self.explanation);
        s
    }
}

/// The Pointer field of a CSV `row`, read with the `header`'s column names.
fn csv_pointer(header: &str, row: &str) -> Option<u64> {
    let column =
        header.split(',').position(|c| c.trim().trim_start_matches('\u{feff}').eq_ignore_ascii_case("Pointer"))?;
    let field = row.split(',').nth(column)?.trim();
    u64::from_str_radix(field.trim_start_matches("0x").trim_start_matches("0X"), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_lines_pointer_is_read_by_its_column() {
        let header = "Thread,Time,Action,Pointer,Size,Stream";
        assert_eq!(csv_pointer(header, "0,1,allocate,0x10,5,0x0"), Some(0x10));
        assert_eq!(csv_pointer("Pointer,Time", "0xabc,2"), Some(0xabc));
        assert_eq!(csv_pointer(header, "0,1"), None);
    }
}
