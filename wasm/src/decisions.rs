//! The allocator's explained decisions as JSON for the page: each decision's serde form
//! (with its `kind` tag and figures) plus `text`, the core's English sentence for it. The
//! explanations are the core's own; nothing here re-derives a decision.

use cachalot_core::Decision;
use serde_json::Value;

/// `[{kind, ..., text}, ...]` for `decisions`, in the order they were taken.
pub fn to_json(decisions: &[Decision]) -> String {
    let items: Vec<Value> = decisions
        .iter()
        .map(|d| {
            let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut v {
                map.insert("text".into(), Value::String(d.to_string()));
            }
            v
        })
        .collect();
    Value::Array(items).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::{Allocator, Config, SimDevice};

    #[test]
    fn each_decision_has_its_kind_and_sentence() {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
        a.set_explain(true);
        a.malloc(1000, 0).unwrap();
        let v: Value = serde_json::from_str(&to_json(&a.take_decisions())).unwrap();
        let kinds: Vec<&str> = v.as_array().unwrap().iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["rounded", "pool", "best_fit", "new_segment", "split"]);
        assert_eq!(v[0]["rounded"], 1024);
        assert!(v[0]["text"].as_str().unwrap().starts_with("Round 1000 bytes up to 1024 bytes"), "{}", v[0]["text"]);
    }
}
