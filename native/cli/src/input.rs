//! Where traces come from: files (`.csv`, `.csv.gz`, snapshot `.json`, gzip detected by its
//! magic bytes) or the three reference traces built into the binary, by name.
//!
//! A loaded trace's operations are not held: they are in a spool (`op_spool.rs`), read a
//! piece at a time by each pass over them ([`NamedTrace::pieces`], [`NamedTrace::steps`]), so
//! that a replay's memory follows live blocks, not the file's length.
//!
//! Invariants: a loaded trace carries the name it is reported under (a file's base name, or
//! the embedded trace's file name) and has at least one operation; a snapshot's trace holds
//! one device's events (the core's `parse_device_trace`), chosen with `--device N` when it
//! recorded several; `trace.ops` is empty (`trace.ops_taken` counts what `ops` holds).

use std::path::Path;

use cachalot_cli::op_spool::{Piece, Spool};
use cachalot_cli::trace_file::{parse_spooled, Input, Loaded, Source};
use cachalot_core::trace::TraceLimits;
use cachalot_core::{Position, Trace, TraceOp};

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
    /// The parsed trace, without its operations (see `ops`).
    pub trace: Trace,
    /// What it was read from.
    pub input: Input,
    /// The operations, spooled.
    pub ops: Spool,
}

impl NamedTrace {
    /// The name, with the device when one was chosen: how reports title the trace.
    pub fn label(&self) -> String {
        match self.device {
            Some(d) => format!("{}, device {d}", self.name),
            None => self.name.clone(),
        }
    }

    /// Calls `each` with the operations in order, a piece at a time (see `op_spool.rs`).
    pub fn pieces(&self, each: impl FnMut(&Piece) -> Result<(), String>) -> Result<(), String> {
        self.ops.pieces(each)
    }

    /// Calls `each` with every operation and its index, in order.
    pub fn steps(&self, mut each: impl FnMut(usize, &TraceOp) -> Result<(), String>) -> Result<(), String> {
        self.pieces(|p| p.ops.iter().enumerate().try_for_each(|(k, op)| each(p.first + k, op)))
    }

    /// Operation `i` with its time and its place in the input.
    pub fn operation(&self, i: usize) -> Result<Option<(TraceOp, u64, Position)>, String> {
        self.ops.get(i)
    }

    /// Peak of the bytes live at once, as requested (`Trace::peak_requested`).
    pub fn peak_requested(&self) -> u64 {
        self.ops.peak_requested()
    }
}

/// Loads a trace from a path, or an embedded trace by name (`gpt2_train`, with or without
/// `.csv.gz`); `None` gives the default embedded trace. `device` picks one device's events of
/// a snapshot. The bytes are read as they come, within `limits`.
pub fn load(spec: Option<&str>, device: Option<usize>, limits: &TraceLimits) -> Result<NamedTrace, String> {
    let spec = spec.unwrap_or(DEFAULT_TRACE);
    let read = |name: &str, input: &mut dyn std::io::Read, source| parse_spooled(input, name, device, limits, source);
    let (name, loaded) = if spec == STDIN {
        ("stdin".to_string(), read("stdin", &mut std::io::stdin().lock(), Source::Gone)?)
    } else if let Some((n, bytes)) = EMBEDDED
        .iter()
        .find(|(n, _)| *n == spec || n.strip_suffix(".csv.gz") == Some(spec))
        // A file of that name wins; a folder of that name (a project's own `gpt2_train/`)
        // does not hide the built-in trace.
        .filter(|_| !Path::new(spec).is_file())
    {
        (n.to_string(), read(n, &mut &bytes[..], Source::Static(bytes))?)
    } else {
        let path = Path::new(spec);
        let mut file = std::fs::File::open(path).map_err(|e| {
            let names: Vec<&str> = EMBEDDED.iter().map(|(n, _)| n.trim_end_matches(".csv.gz")).collect();
            format!("cannot read trace '{spec}': {e} (built-in traces: {})", names.join(", "))
        })?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| spec.into());
        let loaded = read(&name, &mut file, Source::File(path.into()))?;
        (name, loaded)
    };
    let (Loaded { trace, input }, ops) = loaded;
    let t = NamedTrace { name, device: trace.device, trace, input, ops };
    if t.ops.is_empty() {
        // Nothing to replay: any figure would be made up.
        let unknown = match &t.trace.report.first_unknown_action {
            Some(u) => format!(
                "; {} event(s) had an action the reader does not know, the first '{}' at {}",
                t.trace.report.unknown_actions, u.action, u.at
            ),
            None => String::new(),
        };
        return Err(format!(
            "{} holds no allocation events (for a snapshot: was record_history on when it was taken?){unknown}",
            t.label()
        ));
    }
    Ok(t)
}

/// What the reader skipped, each kind with where its first is: one phrase each.
fn skipped(t: &NamedTrace) -> Vec<(String, bool)> {
    let r = &t.trace.report;
    let at = |p: &Option<cachalot_core::Position>| p.map(|p| format!(" (the first at {p})")).unwrap_or_default();
    let mut out = Vec::new();
    // (phrase, whether --strict refuses it)
    if r.double_frees > 0 {
        out.push((
            format!("{} double free(s) of a pointer already freed{}", r.double_frees, at(&r.first_double_free)),
            true,
        ));
    }
    if r.unknown_frees > 0 {
        out.push((
            format!(
                "{} free(s) of pointers the trace never allocated{} (recording started late?)",
                r.unknown_frees,
                at(&r.first_unknown_free)
            ),
            true,
        ));
    }
    if r.implicit_frees > 0 {
        out.push((
            format!(
                "{} allocation(s) at a pointer still live, its free never logged{}: the earlier allocation is freed first",
                r.implicit_frees,
                at(&r.first_implicit_free)
            ),
            true,
        ));
    }
    if let Some(u) = &r.first_unknown_action {
        let name = if u.action.is_empty() { "no action".to_string() } else { format!("action '{}'", u.action) };
        out.push((
            format!(
                "{} event(s) with an action the reader does not know skipped (the first, {name}, at {})",
                r.unknown_actions, u.at
            ),
            true,
        ));
    }
    out
}

/// What the reader skipped is noted on stderr, each kind with where its first is; with
/// `strict`, double frees, frees of pointers never allocated, allocations at a live pointer
/// and unknown snapshot actions are an error instead.
pub fn check_skipped(t: &NamedTrace, strict: bool) -> Result<(), String> {
    let skipped = skipped(t);
    if strict {
        if let Some((what, _)) = skipped.iter().find(|(_, refused)| *refused) {
            return Err(format!("{}: {what}; drop --strict to count and skip them", t.label()));
        }
    }
    let r = &t.trace.report;
    for (what, _) in &skipped {
        note(&format!("{}: {what}", t.label()));
    }
    if r.alloc_failures + r.zero_size > 0 {
        note(&format!("{}: {}", t.label(), t.trace.describe()));
    }
    Ok(())
}
