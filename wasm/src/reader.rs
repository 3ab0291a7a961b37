//! The browser's file reader as plain Rust: the bytes of a file a person opened in the page
//! (already gunzipped by the page: RMM CSV, a PyTorch snapshot as JSON, or the pickle
//! `torch.cuda.memory._dump_snapshot` writes) become traces, within the browser's own limits,
//! through the core's own opener and pickle machine (`cachalot_core::trace::open_bytes`), the
//! CLI's too. `TraceFile`
//! calls these after converting its JavaScript arguments; the `browser` fuzz target
//! (`fuzz/doors/browser.rs`) and `wasm/tests/fuzz_door.rs` call them natively, which the
//! wasm-bindgen classes cannot be (their JavaScript values exist only in a page).
//!
//! Invariants: the byte limit is checked before any byte is looked at, so a file past it costs
//! nothing more than the copy JavaScript handed in; every error is one line that starts with the
//! file's name, and a limit met names it and says what to do (the CLI reads more).

use cachalot_core::trace::{
    open_bytes, parse_device_trace_within, parse_each_device_value_within, parse_snapshot_value_within, Limit, Opened,
    TraceLimits,
};
use cachalot_core::{Trace, TraceError, TraceErrorKind};

/// What the page reads at most: 768 MiB of text (the page's own `limits.textBytes` in
/// `web-demo/js/trace_source.js`, so a file the page passes is never refused here), nesting
/// 64 deep, 20 million rows or events. The wasm module's memory (4 GiB at most, never given
/// back) holds the text, its parsed form and the trace at once: the core's default of 1 GiB of
/// text did not fit beside them.
pub const BROWSER_LIMITS: TraceLimits = TraceLimits { bytes: 768 << 20, depth: 64, events: 20_000_000 };

/// Reads one trace from `data` (RMM CSV, or a PyTorch snapshot as JSON or pickle), named
/// `name` in errors; `device` picks a snapshot's GPU, as `TraceFile.parse` documents.
pub fn read_trace(data: &[u8], name: &str, device: Option<usize>, limits: &TraceLimits) -> Result<Trace, String> {
    let read = match open_bytes(data, limits).map_err(|e| message(name, e))? {
        Opened::Snapshot(v) => parse_snapshot_value_within(&v, device, limits),
        Opened::Csv(_) if device.is_some() => {
            let d = device.unwrap_or_default();
            return Err(format!("{name}: device {d} asked for, but an RMM CSV trace records one device"));
        }
        Opened::Csv(text) => parse_device_trace_within(text, None, limits),
    };
    read.map_err(|e| message(name, e))
}

/// Reads `data` as [`read_trace`] does, one trace per GPU of a snapshot with allocations.
pub fn read_each_device(data: &[u8], name: &str, limits: &TraceLimits) -> Result<Vec<Trace>, String> {
    read_file(data, name, limits).map(|(traces, _)| traces)
}

/// Reads `data` as [`read_each_device`] does, with the snapshot's `segments` list when it is
/// a snapshot that has one (what the page draws of a snapshot taken without a history).
pub fn read_file(
    data: &[u8],
    name: &str,
    limits: &TraceLimits,
) -> Result<(Vec<Trace>, Option<serde_json::Value>), String> {
    let (traces, snapshot) = read_file_whole(data, name, limits)?;
    let segments =
        snapshot.and_then(|mut v| v.get_mut("segments").filter(|s| s.is_array()).map(serde_json::Value::take));
    Ok((traces, segments))
}

/// Reads `data` as [`read_file`] does, with the whole snapshot when it is one (for what the
/// recorded run itself did: `recorded_run.rs`).
pub fn read_file_whole(
    data: &[u8],
    name: &str,
    limits: &TraceLimits,
) -> Result<(Vec<Trace>, Option<serde_json::Value>), String> {
    match open_bytes(data, limits).map_err(|e| message(name, e))? {
        Opened::Snapshot(v) => {
            let traces = parse_each_device_value_within(&v, limits).map_err(|e| message(name, e))?;
            Ok((traces, Some(v)))
        }
        Opened::Csv(text) => {
            Ok((vec![parse_device_trace_within(text, None, limits).map_err(|e| message(name, e))?], None))
        }
    }
}

/// Reads `data` as [`read_file_whole`] does, but a JSON snapshot (up to
/// `slim_snapshot::SNAPSHOT_JSON_BYTES`) with its frames interned into `frames` as they are
/// read, so its value holds its events and segments alone.
pub(crate) fn read_file_slim(
    data: &[u8],
    name: &str,
    limits: &TraceLimits,
    frames: &mut cachalot_core::trace::frame_table::FrameTable,
) -> Result<(Vec<Trace>, Option<serde_json::Value>), String> {
    match crate::slim_snapshot::read(data, limits, frames) {
        Some(v) => Ok((parse_each_device_value_within(&v, limits).map_err(|e| message(name, e))?, Some(v))),
        None => read_file_whole(data, name, limits),
    }
}

/// A reader's error as one line naming the file and, for a limit or a device, what to do.
fn message(name: &str, e: TraceError) -> String {
    match e.kind {
        TraceErrorKind::DeviceNotChosen { .. } => format!(
            "{name}: {e}: choose one with the device argument, or read each with parse_each_device \
             (with the CLI: cachalot replay \"{name}\" --device N)"
        ),
        // The whole file past the limit on bytes, refused before it is looked at.
        TraceErrorKind::Limit(l @ Limit::Bytes(_)) if e.line == 0 => limit_met(name, &l),
        TraceErrorKind::Limit(_) => limit_met(name, &e),
        TraceErrorKind::NoSuchDevice | TraceErrorKind::Invalid => format!("{name}: {e}"),
    }
}

/// The message of a limit met: what it was, and where a larger file can be read.
fn limit_met(name: &str, what: &dyn core::fmt::Display) -> String {
    format!("{name}: {what}: the page reads no more; replay it with the command-line tool (cachalot replay FILE)")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "Time,Action,Pointer,Size\n1,allocate,0x10,2048\n2,free,0x10,2048\n";

    #[test]
    fn reads_within_limits_and_names_the_limit_met() {
        let small = TraceLimits { bytes: 1 << 20, depth: 8, events: 10 };
        assert_eq!(read_trace(CSV.as_bytes(), "t.csv", None, &small).unwrap().ops.len(), 2);
        let e = read_trace(CSV.as_bytes(), "t.csv", None, &TraceLimits { bytes: 10, ..small }).unwrap_err();
        assert!(e.starts_with("t.csv: more than 10 bytes of text (the limit on bytes read)"), "{e}");
        let e = read_trace(CSV.as_bytes(), "t.csv", None, &TraceLimits { events: 1, ..small }).unwrap_err();
        assert!(e.contains("the limit on events") && e.contains("cachalot replay"), "{e}");
        let e = read_each_device(b"[[[[[[[[[[1]]]]]]]]]]", "deep.json", &small).unwrap_err();
        assert!(e.starts_with("deep.json: ") && e.contains("the limit on nesting"), "{e}");
        let e = read_trace(b"\xff\xfe", "bin", None, &small).unwrap_err();
        assert!(e.starts_with("bin: invalid trace: not UTF-8 text"), "{e}");
    }

    /// A pickled snapshot (as `torch.cuda.memory._dump_snapshot` writes) reads as its JSON does,
    /// with its segments, through the CLI's own pickle machine.
    #[test]
    fn a_pickle_reads_as_its_json() {
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../native/cli/tests/fixtures/pytorch_snapshot");
        let pickle = std::fs::read(format!("{fixtures}.pickle")).unwrap();
        let json = std::fs::read(format!("{fixtures}.json")).unwrap();
        let (traces, segments) = read_file(&pickle, "x.pickle", &BROWSER_LIMITS).unwrap();
        let from_json = read_each_device(&json, "x.json", &BROWSER_LIMITS).unwrap();
        assert!(!traces[0].ops.is_empty());
        assert_eq!(
            traces.iter().map(|t| &t.ops).collect::<Vec<_>>(),
            from_json.iter().map(|t| &t.ops).collect::<Vec<_>>()
        );
        assert!(segments.is_some_and(|s| s.is_array()));
        let e = read_trace(b"\x80\x02cos\nsystem\n.", "evil.pickle", None, &BROWSER_LIMITS).unwrap_err();
        assert!(e.starts_with("evil.pickle: invalid trace: not a readable pickle: opcode"), "{e}");
    }

    /// The page's own limit (`limits.textBytes` in `web-demo/js/trace_source.js`) is this one.
    #[test]
    fn the_browser_limit_is_the_pages() {
        let js = include_str!("../../web-demo/js/trace_source.js");
        assert!(js.contains("textBytes: 768 * 1024 * 1024"), "the page's limit changed; change BROWSER_LIMITS with it");
        assert_eq!(BROWSER_LIMITS.bytes, 768 * 1024 * 1024);
    }
}
