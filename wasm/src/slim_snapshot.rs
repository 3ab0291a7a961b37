//! A PyTorch snapshot as JSON, read with its stack frames interned as they are met, so that
//! a large snapshot fits in the page's memory. The frames are most of a real snapshot's bytes
//! (a stack of tens of frames on every event, segment and block), and as a JSON value each
//! frame costs several times its text; read this way, every `frames` list becomes its stack id
//! in a [`FrameTable`] (the same bounds) the moment it is parsed, and the value kept holds the
//! events and segments alone. The core's reader then reads that value as it reads any snapshot
//! (a `frames` entry is never one of its fields).
//!
//! Invariants: only a JSON snapshot within [`SNAPSHOT_JSON_BYTES`] and the reader's nesting
//! limit is read here; anything else (a pickle, a CSV, text that is no JSON) gives `None`, and
//! the caller reads it as before, with the same errors; nothing here panics on input.

use std::cell::RefCell;
use std::fmt;

use cachalot_core::trace::{format_of, nests_deeper, Format, TraceLimits};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::frame_table::FrameTable;

/// The most bytes of a JSON snapshot the page reads (the page's `limits.snapshotBytes` in
/// `web-demo/js/trace_source.js`): without its frames, a 1.5 GiB snapshot's value fits beside
/// its text in the module's 4 GiB; other text stays within `BROWSER_LIMITS`.
pub const SNAPSHOT_JSON_BYTES: u64 = 1536 << 20;

/// A JSON value with every `frames` entry replaced by its stack id.
#[derive(Clone, Copy)]
struct Slim<'a>(&'a RefCell<FrameTable>);

impl<'de> DeserializeSeed<'de> for Slim<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Slim<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = if key == "frames" {
                let frames: Value = map.next_value()?;
                Value::from(self.0.borrow_mut().stack_of_frames(&frames))
            } else {
                map.next_value_seed(self)?
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// `data` read as a JSON snapshot with its frames interned into `frames`; `None` when it is
/// not JSON, not UTF-8, past [`SNAPSHOT_JSON_BYTES`] or `limits`' nesting, or not valid JSON.
pub fn read(data: &[u8], limits: &TraceLimits, frames: &mut FrameTable) -> Option<Value> {
    if format_of(data) != Some(Format::Json) || data.len() as u64 > SNAPSHOT_JSON_BYTES {
        return None;
    }
    let text = std::str::from_utf8(data).ok()?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if nests_deeper(text, limits.depth) {
        return None;
    }
    let table = RefCell::new(std::mem::take(frames));
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Slim(&table).deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    *frames = table.into_inner();
    value.ok()
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
