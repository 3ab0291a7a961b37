//! PyTorch's own figures for the reference traces, measured on an H200
//! (`traces/pytorch_reference.jsonl`, one JSON object per trace and PyTorch config).
//!
//! Invariants: a trace gets figures only when it is the reference trace itself — same file
//! name, same number of operations and same peak of requested bytes as the rows record — so
//! a user's trace that shares a name gets none; a ratio over requested bytes uses the peak
//! PyTorch's run requested (the whole trace's), never a replay's, which an out-of-memory
//! can cut short.

use serde_json::Value;

use super::input::NamedTrace;

/// The measured rows (one JSON object per line).
const PYTORCH_REFERENCE: &str = include_str!("../../../traces/pytorch_reference.jsonl");

/// PyTorch's figures for one trace, in file order.
pub struct PyTorchFigures {
    rows: Vec<Value>,
    /// The peak of requested bytes of PyTorch's run of the trace.
    peak_requested: u64,
}

impl PyTorchFigures {
    /// The figures measured for `t`; none unless `t` is a reference trace.
    pub fn for_trace(t: &NamedTrace) -> PyTorchFigures {
        let rows: Vec<Value> = PYTORCH_REFERENCE
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["trace"] == t.name.as_str())
            .collect();
        let none = PyTorchFigures { rows: Vec::new(), peak_requested: 0 };
        if rows.is_empty() {
            return none;
        }
        let peak_requested = t.peak_requested();
        let same_trace = rows.iter().all(|v| {
            // Rows that measured no requested bytes (cudaMallocAsync keeps none) record 0.
            let requested = v["peak_requested"].as_u64().unwrap_or(0);
            v["ops"].as_u64() == Some(t.ops.len() as u64) && (requested == 0 || requested == peak_requested)
        });
        if same_trace {
            PyTorchFigures { rows, peak_requested }
        } else {
            none
        }
    }

    /// The row measured under PyTorch config `conf` (`default`, `max_split_size_mb:128`,
    /// `expandable_segments:True`, `backend:cudaMallocAsync`).
    pub fn row(&self, conf: &str) -> Option<&Value> {
        self.rows.iter().find(|v| v["conf"] == conf)
    }

    /// Every row, in file order.
    pub fn rows(&self) -> &[Value] {
        &self.rows
    }

    /// A row's peak reserved bytes over the peak PyTorch's run requested.
    pub fn reserved_over_requested(&self, row: &Value) -> f64 {
        peak_reserved(row) as f64 / self.peak_requested.max(1) as f64
    }
}

/// A row's peak reserved bytes.
pub fn peak_reserved(row: &Value) -> u64 {
    row["peak_reserved"].as_u64().unwrap_or(0)
}

/// A row's median warm ns per operation.
pub fn ns_per_op(row: &Value) -> f64 {
    row["ns_per_op_warm_median"].as_f64().unwrap_or(0.0)
}
