//! PyTorch users' own files end to end: a snapshot pickle replays as its JSON does, an out of
//! memory is located in the input (line or event, pointer, frames), `--snapshot` writes the
//! replay in PyTorch's schema, and trace errors say what happened and where.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::scratch::Scratch;

fn cachalot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cachalot")).args(args).output().expect("run cachalot")
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name).to_str().unwrap().into()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// stdout's JSON, the exit status being `code`.
fn json_with(out: &Output, code: i32) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(code), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON value")
}

/// A replay's figures without what differs from run to run (timing) or by file name.
fn figures(mut v: serde_json::Value) -> serde_json::Value {
    for k in
        ["trace", "ns_per_op", "ns_per_op_cold", "ns_per_op_passes", "ns_per_op_before_memo", "ns_per_op_with_memo"]
    {
        v.as_object_mut().unwrap().remove(k);
    }
    v
}

const SMALL: [&str; 8] = ["--config", "policy:pytorch", "--capacity", "4GiB", "--json", "--passes", "3", "--strict"];

#[test]
fn a_pickle_and_the_same_snapshot_as_json_replay_alike() {
    let pickle = json_with(&cachalot(&[&["replay", &fixture("pytorch_snapshot.pickle")][..], &SMALL].concat()), 3);
    let json = json_with(&cachalot(&[&["replay", &fixture("pytorch_snapshot.json")][..], &SMALL].concat()), 3);
    assert_eq!(pickle["trace"], "pytorch_snapshot.pickle");
    assert_eq!(pickle["ops"], 6);
    assert_eq!(figures(pickle), figures(json));
    // And under cachalot's policy, on a large device, with no out of memory refused.
    let a = json_with(&cachalot(&["replay", &fixture("pytorch_snapshot.pickle"), "--json", "--passes", "3"]), 0);
    let b = json_with(&cachalot(&["replay", &fixture("pytorch_snapshot.json"), "--json", "--passes", "3"]), 0);
    assert_eq!(figures(a), figures(b));
    let dir = Scratch::new("snap-bad");
    let bad = dir.join("bad.pickle");
    std::fs::write(&bad, [0x80, 4, 0x95, 1, 2]).unwrap();
    let out = cachalot(&["replay", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("cachalot: error: "), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("bad.pickle: not a readable pickle"), "{}", text(&out.stderr));
}

#[test]
fn an_out_of_memory_is_located_by_event_pointer_and_frames() {
    let v = json_with(&cachalot(&[&["replay", &fixture("pytorch_snapshot.pickle")][..], &SMALL].concat()), 3);
    let oom = &v["first_oom"];
    assert!(oom.is_object(), "first_oom is an object: {oom}");
    assert_eq!((oom["operation"].as_u64(), oom["event"].as_u64()), (Some(4), Some(6)), "{oom}");
    assert!(oom["line"].is_null());
    assert_eq!(oom["pointer"].as_u64(), Some(0x7F0000000000 + (1 << 33)));
    assert_eq!(oom["size"].as_u64(), Some(6 << 30));
    assert_eq!(oom["since_start_us"].as_u64(), Some(4), "from the first operation, the allocation at time 1");
    assert_eq!(oom["frames"][0]["name"], "huge_activation");
    assert_eq!(oom["frames"][0]["line"], 42);
    assert!(oom["explanation"].as_str().unwrap().contains("Tried to allocate 6.00 GiB"), "{oom}");
    let report = text(&cachalot(&["replay", &fixture("pytorch_snapshot.json"), "--capacity", "4GiB"]).stdout);
    assert!(report.contains("first OOM       operation 4, event 6, 0.000004 s into the trace: 6.00 GiB"), "{report}");
    assert!(report.contains("at /home/user/train.py:42 in huge_activation"), "{report}");
}

/// In a CSV the line named is the row of the refused allocation: its pointer and size.
#[test]
fn a_csv_out_of_memory_names_the_line_of_its_row() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces/mixed_fc_conv.csv.gz");
    let v =
        json_with(&cachalot(&["replay", path.to_str().unwrap(), "--capacity", "1GiB", "--json", "--passes", "3"]), 3);
    let oom = &v["first_oom"];
    let line = oom["line"].as_u64().expect("a line") as usize;
    let mut csv = String::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(&std::fs::read(&path).unwrap()[..]).read_to_string(&mut csv).unwrap();
    let row: Vec<&str> = csv.lines().nth(line - 1).unwrap().split(',').collect();
    assert_eq!(row[2], "allocate", "line {line}: {row:?}");
    assert_eq!(u64::from_str_radix(row[3].trim_start_matches("0x"), 16).ok(), oom["pointer"].as_u64());
    assert_eq!(row[4].parse::<u64>().ok(), oom["size"].as_u64());
    assert!(oom["frames"].is_null(), "a CSV records no frames");
}

#[test]
fn the_replays_snapshot_is_written_in_pytorchs_schema_with_the_inputs_frames() {
    let dir = Scratch::new("snap-out");
    let (as_json, as_pickle) = (dir.join("replayed.json"), dir.join("replayed.pickle"));
    for path in [&as_json, &as_pickle] {
        let args = ["replay", &fixture("pytorch_snapshot.pickle"), "--capacity", "4GiB", "--config", "policy:pytorch"];
        let out = cachalot(&[&args[..], &["--passes", "3", "--snapshot", path.to_str().unwrap()]].concat());
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(&format!("cachalot: wrote {}", path.display())), "{}", text(&out.stderr));
    }
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&as_json).unwrap()).unwrap();
    let pickled = cachalot_cli::pickle_snapshot::to_json(&std::fs::read(&as_pickle).unwrap(), "p").unwrap();
    assert_eq!(written, pickled, "the pickle holds what the JSON does");
    let entries = written["device_traces"][0].as_array().unwrap();
    let actions: Vec<&str> = entries.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions.iter().filter(|a| **a == "alloc").count(), 3, "{actions:?}");
    for e in entries {
        for (k, is) in [("addr", e["addr"].is_u64()), ("size", e["size"].is_u64()), ("stream", e["stream"].is_u64())] {
            assert!(is, "{k} of {e}");
        }
        assert!(e["frames"].is_array() && e["time_us"].is_u64(), "{e}");
    }
    let oom = entries.iter().find(|e| e["action"] == "oom").expect("the oom entry");
    assert!(oom["device_free"].is_u64(), "PyTorch's viewer reads device_free: {oom}");
    assert_eq!(oom["frames"][0]["name"], "huge_activation");
    assert_eq!(oom["time_us"].as_u64(), Some(1_700_000_000_000_005));
    let first_alloc = entries.iter().find(|e| e["action"] == "alloc").unwrap();
    assert_eq!(first_alloc["frames"][0]["name"], "forward");
    let segment = &written["segments"][0];
    for k in ["device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream"] {
        assert!(segment[k].is_u64() || segment[k].is_i64(), "{k} of {segment}");
    }
    assert!(segment["segment_type"].is_string() && segment["is_expandable"].is_boolean());
    let live: Vec<&serde_json::Value> =
        segment["blocks"].as_array().unwrap().iter().filter(|b| b["state"] == "active_allocated").collect();
    assert_eq!(live.len(), 1, "{segment}");
    assert_eq!(live[0]["frames"][0]["name"], "step", "a live block carries its allocation's frames");
    // The written snapshot is itself a trace: replayed, it asks for what the replay that
    // wrote it got (the refused allocation is not in its history).
    let again = json_with(&cachalot(&["replay", as_json.to_str().unwrap(), "--json", "--passes", "3"]), 0);
    let replay = json_with(&cachalot(&[&["replay", &fixture("pytorch_snapshot.json")][..], &SMALL].concat()), 3);
    assert_eq!(again["peak_requested_bytes"], replay["peak_requested_bytes"]);
    assert_eq!(again["ops"].as_u64(), Some(replay["ops"].as_u64().unwrap() - 1));
    let out = cachalot(&["replay", "mixed_fc_conv", "--snapshot", "x.txt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("name a file ending in .json or .pickle"), "{}", text(&out.stderr));
}

#[test]
fn trace_errors_say_what_happened_and_where() {
    let dir = Scratch::new("snap-errors");
    let csv = |name: &str, rows: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("Thread,Time,Action,Pointer,Size,Stream\n{rows}")).unwrap();
        p.to_str().unwrap().to_string()
    };
    let double = csv("double.csv", "0,1,allocate,0x10,5,0x0\n0,2,free,0x10,5,0x0\n0,3,free,0x10,5,0x0\n");
    let out = cachalot(&["replay", &double, "--strict"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("1 double free(s) of a pointer already freed (the first at line 4)"),
        "{}",
        text(&out.stderr)
    );
    let out = cachalot(&["replay", &double, "--json", "--passes", "3"]);
    assert!(text(&out.stderr).contains("cachalot: note: double.csv: 1 double free(s)"), "{}", text(&out.stderr));
    assert_eq!(json_with(&out, 0)["trace_report"]["first_double_free"]["line"], 4);
    let live = csv("live.csv", "0,1,allocate,0x10,5,0x0\n0,2,allocate,0x10,7,0x0\n");
    let out = cachalot(&["replay", &live, "--strict"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("1 allocation(s) at a pointer still live, its free never logged (the first at line 3)"),
        "{}",
        text(&out.stderr)
    );
    let out = cachalot(&["replay", &live, "--passes", "3"]);
    assert!(out.status.success() && text(&out.stderr).contains("pointer still live"), "{}", text(&out.stderr));
    let unknown = dir.join("unknown.json");
    std::fs::write(&unknown, r#"{"device_traces": [[{"action": "allocate", "addr": 4096, "size": 512}]]}"#).unwrap();
    let out = cachalot(&["replay", unknown.to_str().unwrap()]);
    assert!(
        text(&out.stderr).contains("holds no allocation events")
            && text(&out.stderr).contains("the first 'allocate' at event 0"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(
        &unknown,
        r#"{"device_traces": [[{"action": "alloc", "addr": 4096, "size": 512}, {"action": "steal", "addr": 4096, "size": 512}]]}"#,
    )
    .unwrap();
    let out = cachalot(&["replay", unknown.to_str().unwrap(), "--passes", "3"]);
    assert!(text(&out.stderr).contains("(the first, action 'steal', at event 1)"), "{}", text(&out.stderr));
    assert_eq!(cachalot(&["replay", unknown.to_str().unwrap(), "--strict"]).status.code(), Some(1));
}

/// The frames a replay shows are the input's, whole and in order: the reader keeps them in a
/// frame table beside a value that holds stack ids (issue 41), and the first out of memory's
/// frames, the report's lines and `--snapshot`'s entries must not tell the difference.
#[test]
fn the_frames_shown_are_the_inputs_exactly() {
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("pytorch_snapshot.json")).unwrap()).unwrap();
    let events = input["device_traces"][0].as_array().unwrap();
    let recorded = &events[6]["frames"];
    assert!(recorded.as_array().is_some_and(|f| !f.is_empty()), "the refused allocation has frames: {recorded}");
    for file in ["pytorch_snapshot.json", "pytorch_snapshot.pickle"] {
        let v = json_with(&cachalot(&[&["replay", &fixture(file)][..], &SMALL].concat()), 3);
        assert_eq!(&v["first_oom"]["frames"], recorded, "{file}");
        let report = text(&cachalot(&["replay", &fixture(file), "--capacity", "4GiB"]).stdout);
        for f in recorded.as_array().unwrap() {
            let line =
                format!("at {}:{} in {}", f["filename"].as_str().unwrap(), f["line"], f["name"].as_str().unwrap());
            assert!(report.contains(&line), "{file}: {line} in {report}");
        }
        let dir = Scratch::new("snap-frames");
        let out = dir.join(format!("{file}.json"));
        let args = ["replay", &fixture(file), "--capacity", "4GiB", "--snapshot", out.to_str().unwrap()];
        assert_eq!(cachalot(&args).status.code(), Some(3));
        let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let entries = written["device_traces"][0].as_array().unwrap();
        let oom = entries.iter().find(|e| e["action"] == "oom").unwrap();
        assert_eq!(&oom["frames"], recorded, "{file}");
        let input_stacks: Vec<&serde_json::Value> = events.iter().map(|e| &e["frames"]).collect();
        for e in entries.iter().filter(|e| e["frames"].as_array().is_some_and(|f| !f.is_empty())) {
            assert!(input_stacks.contains(&&e["frames"]), "{file}: {e} has frames the input never listed");
        }
    }
}
