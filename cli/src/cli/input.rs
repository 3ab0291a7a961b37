//! Where traces come from: files (`.csv`, `.csv.gz`, snapshot `.json`, gzip detected by its
//! magic bytes) or the three reference traces built into the binary, by name.
//!
//! Invariants: a loaded trace carries the name it is reported under (a file's base name, or
//! the embedded trace's file name) and holds at least one operation; a snapshot's trace holds
//! one device's events (the core's `parse_device_trace`), chosen with `--device N` when it
//! recorded several.

use std::io::Read;
use std::path::Path;

use cachalot_cli::trace_file::decode;
use cachalot_core::{parse_device_trace, Trace, TraceErrorKind};

use super::output::note;

/// The reference traces, embedded: (file name, gzip bytes).
pub const EMBEDDED: [(&str, &[u8]); 3] = [
    ("gpt2_train.csv.gz", include_bytes!("../../../traces/gpt2_train.csv.gz")),
    ("resnet50_train.csv.gz", include_bytes!("../../../traces/resnet50_train.csv.gz")),
    ("mixed_fc_conv.csv.gz", include_bytes!("../../../traces/mixed_fc_conv.csv.gz")),
];

/// The trace name that reads stdin.
pub const STDIN: &str = "-";

/// The trace replayed when none is named.
pub const DEFAULT_TRACE: &str = "gpt2_train.csv.gz";

/// A trace with the name it is reported under.
pub struct NamedTrace {
    /// File name (no directories).
    pub name: String,
    /// The device whose events were kept, when the snapshot recorded several devices' lists.
    pub device: Option<usize>,
    /// The parsed trace.
    pub trace: Trace,
}

impl NamedTrace {
    /// The name, with the device when one was chosen: how reports title the trace.
    pub fn label(&self) -> String {
        match self.device {
            Some(d) => format!("{}, device {d}", self.name),
            None => self.name.clone(),
        }
    }
}

/// Loads a trace from a path, or an embedded trace by name (`gpt2_train`, with or without
/// `.csv.gz`); `None` gives the default embedded trace. `device` picks one device's events of
/// a snapshot.
pub fn load(spec: Option<&str>, device: Option<usize>) -> Result<NamedTrace, String> {
    let spec = spec.unwrap_or(DEFAULT_TRACE);
    let (name, text) = if spec == STDIN {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).map_err(|e| format!("cannot read the trace from stdin: {e}"))?;
        ("stdin".to_string(), decode(&bytes, "stdin")?)
    } else if let Some((n, bytes)) = EMBEDDED
        .iter()
        .find(|(n, _)| *n == spec || n.strip_suffix(".csv.gz") == Some(spec))
        // A file of that name wins; a folder of that name (a project's own `gpt2_train/`)
        // does not hide the built-in trace.
        .filter(|_| !Path::new(spec).is_file())
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
    let trace = parse_device_trace(&text, device).map_err(|e| match e.kind {
        TraceErrorKind::DeviceNotChosen { .. } => format!("{name}: {e}: choose one with --device N"),
        TraceErrorKind::NoSuchDevice | TraceErrorKind::Invalid => format!("{name}: {e}"),
    })?;
    let t = NamedTrace { name, device: trace.device, trace };
    if t.trace.ops.is_empty() {
        // Nothing to replay: any figure would be made up.
        return Err(format!(
            "{} holds no allocation events (for a snapshot: was record_history on when it was taken?)",
            t.label()
        ));
    }
    Ok(t)
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
        note(&format!("{}: {}", t.label(), t.trace.describe()));
    }
    Ok(())
}
