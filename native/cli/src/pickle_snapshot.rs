//! PyTorch's memory snapshots as pickles (`torch.cuda.memory._dump_snapshot("x.pickle")`
//! writes `pickle.dump(snapshot, f)`), to and from the JSON value model the core's snapshot
//! reader takes, so a pickle and the same data as JSON give one trace.
//!
//! Invariants: reading never imports or calls anything (serde-pickle refuses globals), and
//! every pickle value becomes the JSON value Python's `json.dumps` would write for it
//! (tuples and sets as lists, dict keys as strings, integers past 64 bits as floats); written
//! pickles hold only dicts, lists, strings, numbers, booleans and None, which any Python
//! `pickle.load` reads back.

use serde_json::{Map, Number, Value as Json};
use serde_pickle::{DeOptions, HashableValue, SerOptions, Value as Pickle};

/// True when `bytes` start as a pickle of protocol 2 or later does (the PROTO opcode): what
/// `pickle.dump` writes by default.
pub fn is_pickle(bytes: &[u8]) -> bool {
    bytes.len() >= 2 && bytes[0] == 0x80 && (2..=5).contains(&bytes[1])
}

/// The JSON value of the pickle `bytes`; `what` names the file in messages.
pub fn to_json(bytes: &[u8], what: &str) -> Result<Json, String> {
    let value = serde_pickle::value_from_slice(bytes, DeOptions::new().decode_strings())
        .map_err(|e| format!("{what}: not a readable pickle: {e}"))?;
    Ok(json_of(value))
}

/// `value` as a pickle (protocol 3, which every Python 3 reads).
pub fn from_json(value: &Json) -> Result<Vec<u8>, String> {
    serde_pickle::to_vec(value, SerOptions::new()).map_err(|e| format!("cannot write the snapshot as a pickle: {e}"))
}

fn json_of(value: Pickle) -> Json {
    match value {
        Pickle::None => Json::Null,
        Pickle::Bool(b) => Json::Bool(b),
        Pickle::I64(i) => Json::from(i),
        Pickle::Int(big) => {
            let text = big.to_string();
            text.parse::<u64>()
                .map(Json::from)
                .ok()
                .or_else(|| text.parse::<f64>().ok().and_then(Number::from_f64).map(Json::Number))
                .unwrap_or(Json::Null)
        }
        Pickle::F64(f) => Number::from_f64(f).map_or(Json::Null, Json::Number),
        Pickle::Bytes(b) => Json::String(String::from_utf8_lossy(&b).into_owned()),
        Pickle::String(s) => Json::String(s),
        Pickle::List(items) | Pickle::Tuple(items) => Json::Array(items.into_iter().map(json_of).collect()),
        Pickle::Set(items) | Pickle::FrozenSet(items) => {
            Json::Array(items.into_iter().map(|h| json_of(h.into_value())).collect())
        }
        Pickle::Dict(entries) => {
            let mut map = Map::new();
            for (k, v) in entries {
                map.insert(key_of(k), json_of(v));
            }
            Json::Object(map)
        }
    }
}

/// A dict key as JSON's object keys are: strings (numbers and others as Python prints them).
fn key_of(key: HashableValue) -> String {
    match key {
        HashableValue::String(s) => s,
        HashableValue::None => "null".into(),
        HashableValue::Bool(b) => if b { "true" } else { "false" }.into(),
        HashableValue::I64(i) => i.to_string(),
        HashableValue::Int(big) => big.to_string(),
        HashableValue::F64(f) => f.to_string(),
        other => json_of(other.into_value()).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pickle written here reads back as the same value, and is told from text.
    #[test]
    fn a_snapshot_round_trips_through_a_pickle() {
        let v: Json = serde_json::from_str(
            r#"{"segments": [], "device_traces": [[{"action": "alloc", "addr": 18446744073709551615,
                "size": 512, "frames": [{"filename": "a.py", "line": 3, "name": "f"}], "x": null, "t": 1.5}]]}"#,
        )
        .unwrap();
        let bytes = from_json(&v).unwrap();
        assert!(is_pickle(&bytes));
        assert!(!is_pickle(b"{\"segments\": []}") && !is_pickle(b"Thread,Time"));
        assert_eq!(to_json(&bytes, "t").unwrap(), v);
        assert!(to_json(&[0x80, 4, 0xff], "t").unwrap_err().starts_with("t: not a readable pickle"));
    }
}
