//! The `cachalot` tool end to end: parity of `replay --json` with PyTorch's figures, the
//! shape of its output, and one clear message with a non-zero exit for every bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

fn cachalot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cachalot")).args(args).output().expect("run cachalot")
}

fn traces() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON value")
}

fn pytorch(trace: &str, conf: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(traces().join("pytorch_reference.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["trace"] == trace && v["conf"] == conf)
        .expect("reference row")
}

/// Fails unless stderr is one `cachalot: error:` line that mentions `needle`.
fn fails_with(args: &[&str], needle: &str) {
    let out = cachalot(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(err.starts_with("cachalot: error: "), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: expected '{needle}' in: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

#[test]
fn replay_json_matches_pytorch_peak_reserved() {
    for trace in ["gpt2_train.csv.gz", "resnet50_train.csv.gz", "mixed_fc_conv.csv.gz"] {
        for (ours, theirs) in
            [("policy:pytorch", "default"), ("policy:pytorch,max_split_size_mb:128", "max_split_size_mb:128")]
        {
            let path = traces().join(trace);
            let v = json(&cachalot(&["replay", path.to_str().unwrap(), "--config", ours, "--json", "--passes", "3"]));
            let got = v["peak_reserved_bytes"].as_u64().unwrap();
            let want = pytorch(trace, theirs)["peak_reserved"].as_u64().unwrap();
            let err = (got as f64 / want as f64 - 1.0).abs();
            assert!(err <= 0.005, "{trace} {ours}: {got} vs PyTorch {want}");
            assert_eq!(v["peak_requested_bytes"], pytorch(trace, theirs)["peak_requested"], "{trace}");
        }
    }
}

#[test]
fn replay_json_has_the_documented_fields() {
    let v = json(&cachalot(&["replay", "mixed_fc_conv", "--json", "--passes", "3"]));
    for field in [
        "trace",
        "config",
        "ops",
        "peak_requested_bytes",
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "device_allocs",
        "device_frees",
        "ooms",
        "ns_per_op",
    ] {
        assert!(!v[field].is_null(), "missing {field} in {v}");
    }
    assert_eq!(v["trace"], "mixed_fc_conv.csv.gz");
    assert_eq!(v["ops"], 9545);
    assert_eq!(v["ns_per_op_passes"].as_array().unwrap().len(), 3);
    let all_passes = v["peak_reserved_bytes_all_passes"].as_u64().unwrap();
    assert!(all_passes >= v["peak_reserved_bytes"].as_u64().unwrap(), "the peak over all passes includes the first");
}

#[test]
fn replay_without_a_trace_uses_the_embedded_gpt2_trace() {
    let v = json(&cachalot(&["replay", "--json", "--passes", "3"]));
    assert_eq!(v["trace"], "gpt2_train.csv.gz");
    assert_eq!(v["ops"], 69203);
}

#[test]
fn small_capacity_replays_out_of_memory_and_summaries_show_it() {
    let out = cachalot(&["replay", "resnet50_train", "--capacity", "3GiB", "--summary", "--passes", "3"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("first OOM"), "{text}");
    assert!(text.contains("out of memory. Tried to allocate"), "{text}");
    assert!(text.contains("when reserved memory peaked"), "{text}");
    assert!(text.contains("| GPU reserved memory   |"), "{text}");
}

#[test]
fn snapshot_json_traces_replay() {
    let dir = std::env::temp_dir().join(format!("cachalot-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("snap.json");
    std::fs::write(
        &path,
        r#"{"segments": [], "device_traces": [[
            {"action": "alloc", "addr": 4096, "size": 3000000, "stream": 0},
            {"action": "alloc", "addr": 8192, "size": 100, "stream": 0},
            {"action": "free_requested", "addr": 4096, "size": 3000000, "stream": 0}]]}"#,
    )
    .unwrap();
    let v =
        json(&cachalot(&["replay", path.to_str().unwrap(), "--config", "policy:pytorch", "--json", "--passes", "3"]));
    assert_eq!(v["ops"], 3);
    assert_eq!(v["peak_reserved_bytes"], 22 << 20, "a 20 MiB and a 2 MiB segment");
    let v = json(&cachalot(&["replay", path.to_str().unwrap(), "--json", "--passes", "3"]));
    assert_eq!(v["peak_reserved_bytes"], 6 << 20, "cachalot maps two 2 MiB pages and one for the small pool");
}

#[test]
fn a_recorded_snapshot_replays_on_its_own_placements() {
    let snapshot = traces().join("recorded/mixed_fc_conv.policy_pytorch.snapshot.json.gz");
    let stats: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(traces().join("recorded/mixed_fc_conv.policy_pytorch.stats.json")).unwrap(),
    )
    .unwrap();
    let capacity = stats["capacity"].to_string();
    let args = ["replay", snapshot.to_str().unwrap(), "--config", "policy:pytorch", "--capacity", &capacity];
    let v = json(&cachalot(&[&args[..], &["--json", "--passes", "3"]].concat()));
    assert_eq!(v["segment_placements_recorded"], 38);
    assert_eq!(v["segment_placements_followed"], 38);
    assert_eq!(v["peak_reserved_bytes"], stats["stats"]["reserved_bytes.all.peak"]);
    let text = String::from_utf8_lossy(&cachalot(&[&args[..], &["--passes", "3"]].concat()).stdout).into_owned();
    assert!(text.contains("38 of the 38 segments the snapshot recorded placed where the run placed them"), "{text}");
}

#[test]
fn compare_shows_pytorch_beside_ours() {
    let out = cachalot(&["compare", "mixed_fc_conv", "--passes", "3"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for part in [
        "policy:pytorch",
        "max_split_size_mb:128",
        "expandable_segments:True",
        "policy:cachalot",
        "PyTorch (H200)",
        "(PyTorch backend:cudaMallocAsync)",
    ] {
        assert!(text.contains(part), "{part} missing:\n{text}");
    }
    let v = json(&cachalot(&["compare", "resnet50_train", "--config", "policy:pytorch", "--json", "--passes", "3"]));
    assert_eq!(v[0]["pytorch"]["conf"], "default");
}

#[test]
fn bad_input_gives_one_clear_message() {
    let dir = std::env::temp_dir().join(format!("cachalot-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let malformed = dir.join("bad.csv");
    std::fs::write(&malformed, "Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,lots,0x0\n").unwrap();
    let binary = dir.join("bin.csv.gz");
    std::fs::write(&binary, [0x1f, 0x8b, 0, 1, 2, 3]).unwrap();
    let unknown = dir.join("unknown.csv");
    std::fs::write(&unknown, "Thread,Time,Action,Pointer,Size,Stream\n0,1,free,0x10,5,0x0\n0,2,allocate,0x20,5,0x0\n")
        .unwrap();
    fails_with(&["replay", "/no/such/trace.csv"], "cannot read trace '/no/such/trace.csv'");
    fails_with(&["replay", malformed.to_str().unwrap()], "line 2: bad size 'lots'");
    fails_with(&["replay", binary.to_str().unwrap()], "cannot decompress");
    fails_with(&["replay", "--config", "max_split_size_mb:5"], "max_split_size_mb");
    fails_with(&["replay", "--config", "colour:blue"], "unknown key");
    fails_with(&["replay", "--capacity", "1MiB"], "capacity");
    fails_with(&["replay", "--capacity", "lots"], "not a size");
    fails_with(&["replay", "--capacity", "2TiB"], "too large");
    fails_with(&["replay", "--passes", "1"], "--passes");
    fails_with(&["replay", "--jsn"], "unknown option --jsn");
    fails_with(&["replay", "a", "b"], "unexpected argument 'b'");
    fails_with(&["frobnicate"], "unknown command");
    fails_with(&["replay", unknown.to_str().unwrap(), "--strict"], "1 free(s) of pointers the trace never allocated");
    // Without --strict, unknown frees are counted, reported on stderr, and skipped.
    let out = cachalot(&["replay", unknown.to_str().unwrap(), "--json", "--passes", "3"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 frees of unknown pointers skipped"));
    assert_eq!(json(&out)["trace_report"]["unknown_frees"], 1);
}
