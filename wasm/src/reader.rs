//! The browser's file reader as plain Rust: the bytes of a file a person opened in the page
//! (already gunzipped by the page) become traces, within the browser's own limits. `TraceFile`
//! calls these after converting its JavaScript arguments; the `browser` fuzz target
//! (`fuzz/doors/browser.rs`) and `wasm/tests/fuzz_door.rs` call them natively, which the
//! wasm-bindgen classes cannot be (their JavaScript values exist only in a page).
//!
//! Invariants: the byte limit is checked before any byte is looked at, so a file past it costs
//! nothing more than the copy JavaScript handed in; every error is one line that starts with the
//! file's name, and a limit met names it and says what to do (the CLI reads more).

use cachalot_core::trace::{parse_device_trace_within, parse_each_device_within, Limit, TraceLimits};
use cachalot_core::{Trace, TraceErrorKind};

/// What the page reads at most: 768 MiB of text (the page's own `limits.textBytes` in
/// `web-demo/js/trace_source.js`, so a file the page passes is never refused here), nesting
/// 64 deep, 20 million rows or events. The wasm module's memory (4 GiB at most, never given
/// back) holds the text, its parsed form and the trace at once: the core's default of 1 GiB of
/// text did not fit beside them.
pub const BROWSER_LIMITS: TraceLimits = TraceLimits { bytes: 768 << 20, depth: 64, events: 20_000_000 };

/// Reads one trace from `data` (RMM CSV, or a PyTorch snapshot's JSON), named `name` in
/// errors; `device` picks a snapshot's GPU, as `TraceFile.parse` documents.
pub fn read_trace(data: &[u8], name: &str, device: Option<usize>, limits: &TraceLimits) -> Result<Trace, String> {
    let text = text(data, name, limits)?;
    parse_device_trace_within(text, device, limits).map_err(|e| match e.kind {
        TraceErrorKind::DeviceNotChosen { .. } => format!(
            "{name}: {e}: choose one with the device argument, or read each with parse_each_device \
             (with the CLI: cachalot replay \"{name}\" --device N)"
        ),
        TraceErrorKind::Limit(_) => limit_met(name, &e),
        TraceErrorKind::NoSuchDevice | TraceErrorKind::Invalid => format!("{name}: {e}"),
    })
}

/// Reads `data` as [`read_trace`] does, one trace per GPU of a snapshot with allocations.
pub fn read_each_device(data: &[u8], name: &str, limits: &TraceLimits) -> Result<Vec<Trace>, String> {
    let text = text(data, name, limits)?;
    parse_each_device_within(text, limits).map_err(|e| match e.kind {
        TraceErrorKind::Limit(_) => limit_met(name, &e),
        _ => format!("{name}: {e}"),
    })
}

/// `data` as UTF-8 text, refused first when longer than the limit on bytes.
fn text<'a>(data: &'a [u8], name: &str, limits: &TraceLimits) -> Result<&'a str, String> {
    if data.len() as u64 > limits.bytes {
        return Err(limit_met(name, &Limit::Bytes(limits.bytes)));
    }
    core::str::from_utf8(data).map_err(|e| format!("{name}: not UTF-8 text: {e}"))
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
        assert!(e.starts_with("bin: not UTF-8 text"), "{e}");
    }

    /// The page's own limit (`limits.textBytes` in `web-demo/js/trace_source.js`) is this one.
    #[test]
    fn the_browser_limit_is_the_pages() {
        let js = include_str!("../../web-demo/js/trace_source.js");
        assert!(js.contains("textBytes: 768 * 1024 * 1024"), "the page's limit changed; change BROWSER_LIMITS with it");
        assert_eq!(BROWSER_LIMITS.bytes, 768 * 1024 * 1024);
    }
}
