//! Where traces and reference figures come from: files (`.csv`, `.csv.gz`, snapshot
//! `.json`, gzip detected by its magic bytes) or the three reference traces built into the
//! binary, by name.
//!
//! Invariant: a loaded trace carries the name it is reported under (a file's base name, or
//! the embedded trace's file name, so reference figures can be looked up by it).

use std::path::Path;

use cachalot::trace_file::decode;
use cachalot_core::{parse_trace, Trace};

/// The reference traces, embedded: (file name, gzip bytes).
pub const EMBEDDED: [(&str, &[u8]); 3] = [
    ("gpt2_train.csv.gz", include_bytes!("../../../traces/gpt2_train.csv.gz")),
    ("resnet50_train.csv.gz", include_bytes!("../../../traces/resnet50_train.csv.gz")),
    ("mixed_fc_conv.csv.gz", include_bytes!("../../../traces/mixed_fc_conv.csv.gz")),
];

/// PyTorch's figures for the reference traces (one JSON object per line).
pub const PYTORCH_REFERENCE: &str = include_str!("../../../traces/pytorch_reference.jsonl");

/// The trace replayed when none is named.
pub const DEFAULT_TRACE: &str = "gpt2_train.csv.gz";

/// A trace with the name it is reported under.
pub struct NamedTrace {
    /// File name (no directories).
    pub name: String,
    /// The parsed trace.
    pub trace: Trace,
}

/// Loads a trace from a path, or an embedded trace by name (`gpt2_train`, with or without
/// `.csv.gz`); `None` gives the default embedded trace.
pub fn load(spec: Option<&str>) -> Result<NamedTrace, String> {
    let spec = spec.unwrap_or(DEFAULT_TRACE);
    let (name, text) = if let Some((n, bytes)) = EMBEDDED
        .iter()
        .find(|(n, _)| *n == spec || n.strip_suffix(".csv.gz") == Some(spec))
        .filter(|_| !Path::new(spec).exists())
    {
        (n.to_string(), decode(bytes, n)?)
    } else {
        let path = Path::new(spec);
        let bytes = std::fs::read(path).map_err(|e| {
            let names: Vec<&str> = EMBEDDED.iter().map(|(n, _)| n.trim_end_matches(".csv.gz")).collect();
            format!("cannot read trace '{spec}': {e} (built-in traces: {})", names.join(", "))
        })?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| spec.into());
        (name, decode(&bytes, spec)?)
    };
    let trace = parse_trace(&text).map_err(|e| format!("{name}: {e}"))?;
    Ok(NamedTrace { name, trace })
}

/// PyTorch's measured figures for a reference trace under a PyTorch config name
/// (`default`, `max_split_size_mb:128`, `expandable_segments:True`, `backend:cudaMallocAsync`).
pub fn pytorch_reference(trace: &str, conf: &str) -> Option<serde_json::Value> {
    PYTORCH_REFERENCE
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["trace"] == trace && v["conf"] == conf)
}

/// Every PyTorch config measured for a trace, in file order.
pub fn pytorch_references(trace: &str) -> Vec<serde_json::Value> {
    PYTORCH_REFERENCE
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["trace"] == trace)
        .collect()
}

/// Rows the reader skipped (unknown frees, failures, zero sizes) are reported on stderr;
/// with `strict`, frees of pointers the trace never allocated are an error.
pub fn check_skipped(t: &NamedTrace, strict: bool) -> Result<(), String> {
    let r = &t.trace.report;
    if strict && r.unknown_frees > 0 {
        return Err(format!(
            "{}: {} free(s) of pointers the trace never allocated (recording started late?); drop --strict to skip them",
            t.name, r.unknown_frees
        ));
    }
    if r.unknown_frees + r.alloc_failures + r.zero_size + r.implicit_frees > 0 {
        eprintln!("cachalot: note: {}: {}", t.name, t.trace.describe());
    }
    Ok(())
}
