//! A PyTorch snapshot as JSON, read with its stack frames interned as they are met. The
//! frames are most of a real snapshot's bytes (a stack of tens of frames on every event,
//! segment and block), and as a JSON value each frame costs several times its text; read this
//! way, every `frames` list becomes its stack id in a [`FrameTable`] the moment it is parsed,
//! and the value kept holds the events and segments alone. The core's snapshot reader then
//! reads that value as it reads any snapshot (a `frames` entry is never one of its fields).
//! The browser (`wasm/src/slim_snapshot.rs`) and the command-line tool read snapshots so.
//!
//! Invariants: the value read is the one `serde_json::from_str` gives, but for each `frames`
//! entry, which is its stack id (0 for an empty list or one that is not a list, [`NONE`] for
//! one the table did not keep); nothing here panics on input. The caller checks nesting
//! ([`crate::trace::nests_deeper`]) first: serde_json's own limit would stop deeper text with
//! a less helpful message.
//!
//! [`NONE`]: crate::trace::frame_table::NONE

use core::cell::RefCell;
use core::fmt;

use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::vec::Vec;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::frame_table::FrameTable;

/// A JSON value with every `frames` entry replaced by its stack id.
#[derive(Clone, Copy)]
pub(crate) struct Slim<'a>(pub(crate) &'a RefCell<FrameTable>);

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
                // One list's value at a time, dropped once interned.
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

/// The JSON value `de` reads, with its frames interned into `frames`.
pub fn read<'de, D: Deserializer<'de>>(de: D, frames: &mut FrameTable) -> Result<Value, D::Error> {
    let table = RefCell::new(core::mem::take(frames));
    let value = Slim(&table).deserialize(de);
    *frames = table.into_inner();
    value
}

/// `text` read as one JSON value (nothing but white space after it), with its frames
/// interned into `frames`; serde_json's error otherwise.
pub fn from_str(text: &str, frames: &mut FrameTable) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = read(&mut de, frames)?;
    de.end()?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_become_stack_ids_and_the_rest_stays() {
        let text = r#"{"segments": [{"address": 4096, "frames": [{"filename": "a.py", "line": 1, "name": "f"}]}],
            "device_traces": [[{"action": "alloc", "addr": 4096, "size": 512, "frames": [{"filename": "a.py", "line": 1, "name": "f"}]},
                               {"action": "free", "addr": 4096, "size": -1.5, "frames": []}]]}"#;
        let mut t = FrameTable::default();
        let v = from_str(text, &mut t).unwrap();
        let seg = &v["segments"][0];
        assert_eq!(seg["frames"], v["device_traces"][0][0]["frames"], "one stack, interned once");
        let id = t.stack_of(seg);
        assert_eq!(t.lines(id), ["f (a.py:1)"]);
        assert_eq!(v["device_traces"][0][1]["frames"], 0);
        assert_eq!(v["device_traces"][0][1]["size"], -1.5);
        assert_eq!(v["device_traces"][0][0]["addr"], 4096);
        // Beside the ids, the value is what serde_json reads.
        let mut whole: Value = serde_json::from_str(text).unwrap();
        t.slim(&mut whole);
        assert_eq!(whole, v);
    }

    /// If frames were held in the value again, the text of none would be missing from it.
    #[test]
    fn the_value_holds_no_frame_text() {
        let text = r#"{"device_traces": [[{"action": "alloc", "addr": 1, "size": 2,
            "frames": [{"filename": "/home/user/secret_model.py", "line": 9, "name": "forward"}]}]]}"#;
        let mut t = FrameTable::default();
        let v = from_str(text, &mut t).unwrap();
        let written = serde_json::to_string(&v).unwrap();
        assert!(!written.contains("secret_model") && !written.contains("forward"), "{written}");
    }

    #[test]
    fn what_is_not_one_json_value_is_an_error() {
        let mut t = FrameTable::default();
        for bad in ["{\"a\": ", "{\"a\": 1} x", "", "{\"frames\": [1,}"] {
            assert!(from_str(bad, &mut t).is_err(), "{bad:?}");
        }
        assert!(from_str(" {\"a\": 1} \n", &mut t).is_ok());
    }
}
