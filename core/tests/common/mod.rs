//! Helpers shared by the integration tests: reading the reference traces and PyTorch's
//! figures for them, and the shadow model random operation sequences are checked against
//! ([`model`]).
#![allow(dead_code)]

pub mod model;

use std::io::Read;
use std::path::PathBuf;

use cachalot_core::{parse_trace, Trace};

/// The repository's `traces/` folder.
pub fn traces_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces")
}

/// A reference trace by file name, gunzipped and parsed.
pub fn load_trace(name: &str) -> Trace {
    parse_trace(&load_text(name)).expect("reference trace parses")
}

/// A gzipped file under `traces/`, as text.
pub fn load_text(name: &str) -> String {
    let bytes = std::fs::read(traces_dir().join(name)).expect("reference trace present");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut text).expect("gzip");
    text
}

/// PyTorch's measured peak reserved bytes for a trace and config, from
/// `traces/pytorch_reference.jsonl`.
pub fn pytorch_peak_reserved(trace: &str, conf: &str) -> u64 {
    let text = std::fs::read_to_string(traces_dir().join("pytorch_reference.jsonl")).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["trace"] == trace && v["conf"] == conf {
            return v["peak_reserved"].as_u64().unwrap();
        }
    }
    panic!("no reference for {trace} {conf}");
}

pub const TRACES: [&str; 3] = ["gpt2_train.csv.gz", "resnet50_train.csv.gz", "mixed_fc_conv.csv.gz"];
