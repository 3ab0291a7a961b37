//! A PyTorch snapshot as JSON, read with its stack frames interned as they are met, so that
//! a large snapshot fits in the page's memory: the core's reader
//! (`cachalot_core::trace::slim_json`, which the command-line tool uses too) turns every
//! `frames` list into its stack id in a [`FrameTable`] (the page's bounds,
//! `FrameBounds::BROWSER`) the moment it is parsed, so the value kept holds the events and
//! segments alone. Here: which bytes the page reads so, and its limit on them.
//!
//! Invariants: only a JSON or pickle snapshot within [`SNAPSHOT_JSON_BYTES`] and the reader's
//! limits is read here; anything else (a CSV, text that is no JSON, a refused pickle) gives `None`, and
//! the caller reads it as before, with the same errors; nothing here panics on input.

use cachalot_core::trace::frame_table::FrameTable;
use cachalot_core::trace::{format_of, nests_deeper, pickle, slim_json, Format, TraceLimits};
use serde_json::Value;

/// The most bytes of a JSON snapshot the page reads (the page's `limits.snapshotBytes` in
/// `web-demo/js/trace_source.js`): without its frames, a 1.5 GiB snapshot's value fits beside
/// its text in the module's 4 GiB; other text stays within `BROWSER_LIMITS`.
pub const SNAPSHOT_JSON_BYTES: u64 = 1536 << 20;

/// `data` read as a JSON snapshot with its frames interned into `frames`; `None` when it is
/// not JSON, not UTF-8, past [`SNAPSHOT_JSON_BYTES`] or `limits`' nesting, or not valid JSON.
pub fn read(data: &[u8], limits: &TraceLimits, frames: &mut FrameTable) -> Option<Value> {
    if data.len() as u64 > SNAPSHOT_JSON_BYTES {
        return None;
    }
    match format_of(data) {
        Some(Format::Json) => {}
        // `torch.cuda.memory._dump_snapshot("x.pickle")`: the core's pickle machine interns
        // each `frames` list as it is set (`pickle::read_slim`). A pickle it refuses is read
        // again whole, for the reader's own message (within the byte limit, so bounded).
        // The limit on bytes is this file's: the pickle's length, and the value it makes
        // without its frames, are within what the page holds of a snapshot.
        Some(Format::Pickle) => {
            let limits = TraceLimits { bytes: SNAPSHOT_JSON_BYTES, ..*limits };
            return pickle::read_slim(data, &limits, frames).ok();
        }
        _ => return None,
    }
    let text = std::str::from_utf8(data).ok()?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if nests_deeper(text, limits.depth) {
        return None;
    }
    slim_json::from_str(text, frames).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::BROWSER_LIMITS;

    #[test]
    fn frames_become_stack_ids_and_the_rest_stays() {
        let text = r#"{"segments": [{"address": 4096, "frames": [{"filename": "a.py", "line": 1, "name": "f"}]}],
            "device_traces": [[{"action": "alloc", "addr": 4096, "size": 512, "frames": [{"filename": "a.py", "line": 1, "name": "f"}]},
                               {"action": "free", "addr": 4096, "size": -1.5, "frames": []}]]}"#;
        let mut t = FrameTable::default();
        let v = read(text.as_bytes(), &BROWSER_LIMITS, &mut t).unwrap();
        let seg = &v["segments"][0];
        assert_eq!(seg["frames"], v["device_traces"][0][0]["frames"], "one stack, interned once");
        let id = t.stack_of(seg);
        assert_eq!(t.lines(id), ["f (a.py:1)"]);
        assert_eq!(v["device_traces"][0][1]["frames"], 0);
        assert_eq!(v["device_traces"][0][1]["size"], -1.5);
        assert_eq!(v["device_traces"][0][0]["addr"], 4096);
    }

    /// The page's own limit (`limits.snapshotBytes` in `web-demo/js/trace_source.js`) is this one.
    #[test]
    fn the_json_limit_is_the_pages() {
        let js = include_str!("../../web-demo/js/trace_source.js");
        assert!(
            js.contains("snapshotBytes: 1536 * 1024 * 1024"),
            "the page's limit changed; change SNAPSHOT_JSON_BYTES"
        );
        assert_eq!(SNAPSHOT_JSON_BYTES, 1536 * 1024 * 1024);
    }

    #[test]
    fn what_is_not_a_json_snapshot_is_left_to_the_reader() {
        let mut t = FrameTable::default();
        for bad in [&b"Time,Action,Pointer,Size\n"[..], b"\x80\x04.", b"{\"a\": ", b"{\"a\": 1} x", b"\xff{"] {
            assert!(read(bad, &BROWSER_LIMITS, &mut t).is_none(), "{bad:?}");
        }
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(read(deep.as_bytes(), &BROWSER_LIMITS, &mut t).is_none());
    }
}
