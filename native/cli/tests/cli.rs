//! The `cachalot` tool end to end: parity of `replay --json` with PyTorch's figures, the
//! shape of its output, and one clear message with a non-zero exit for every bad input.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::scratch::Scratch;

fn cachalot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cachalot")).args(args).output().expect("run cachalot")
}

fn traces() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON value")
}

/// The exit status `replay` gives after a replay that ran out of memory, its report complete.
const RAN_OUT_OF_MEMORY: i32 = 3;

/// The JSON of a replay that ran out of memory: exit status 3, the report on stdout.
fn json_after_oom(out: &Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(RAN_OUT_OF_MEMORY), "{}", String::from_utf8_lossy(&out.stderr));
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

/// `driver_calls_passes` gives each warm pass's driver calls, the last being
/// `device_calls_warm`'s: on mixed_fc_conv the passes before the learned layout is followed
/// still map and unmap pages, the last calls the device no more, and the report names the
/// warm pass that made most, which the last pass alone would hide.
#[test]
fn replay_reports_each_warm_pass_s_driver_calls_and_names_the_busiest() {
    let passes_of = |n: &str| -> (Vec<u64>, u64) {
        let v = json(&cachalot(&["replay", "mixed_fc_conv", "--json", "--passes", n]));
        let passes = v["driver_calls_passes"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
        let w = &v["device_calls_warm"];
        (passes, driver_calls(w))
    };
    let (four, last) = passes_of("4");
    assert_eq!(four.len(), 4, "{four:?}");
    // The same passes in the same order, whatever comes after them: three passes are the first
    // three of four, and the third is then the last.
    let (three, last_of_three) = passes_of("3");
    assert_eq!((&four[..3], four[2]), (&three[..], last_of_three), "{four:?} against {three:?}");
    assert_eq!(four[3], last, "{four:?}");
    let (busiest, most) = four.iter().enumerate().max_by_key(|&(i, n)| (*n, std::cmp::Reverse(i))).unwrap();
    assert!(*most > last, "no warm pass made more calls than the last: {four:?}");
    let text = cachalot(&["replay", "mixed_fc_conv", "--passes", "4"]);
    let text = String::from_utf8_lossy(&text.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    let named = format!("{last} in the last warm pass (the most, {most}, in warm pass {} of 4)", busiest + 1);
    assert!(text.contains(&named), "{named:?} not in {text}");
    // No pass busier than the last (PyTorch's default, settled after its first pass): nothing
    // added.
    let calm = cachalot(&["replay", "mixed_fc_conv", "--passes", "3", "--config", "policy:pytorch"]);
    let calm = String::from_utf8_lossy(&calm.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(calm.contains("0 in the last warm pass (memory"), "{calm}");
}

/// `learned_layout` counts what the layout cachalot's policy learns did: a training loop's
/// steps repeat, so one plan is made and followed; PyTorch's policies learn none.
#[test]
fn replay_json_counts_what_the_learned_layout_did() {
    let ours = json(&cachalot(&["replay", "gpt2_train", "--json", "--passes", "3"]));
    let plan = &ours["learned_layout"];
    assert_eq!((plan["made"].as_u64(), plan["dropped"].as_u64()), (Some(1), Some(0)), "{plan}");
    assert!(plan["placed"].as_u64().unwrap() > 10_000, "{plan}");
    let theirs = json(&cachalot(&["replay", "gpt2_train", "--json", "--passes", "3", "--config", "policy:pytorch"]));
    assert_eq!(theirs["learned_layout"]["made"].as_u64(), Some(0));
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
    assert_eq!(out.status.code(), Some(RAN_OUT_OF_MEMORY), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("first OOM"), "{text}");
    assert!(text.contains("out of memory. Tried to allocate"), "{text}");
    assert!(text.contains("when reserved memory peaked"), "{text}");
    assert!(text.contains("| GPU reserved memory   |"), "{text}");
}

#[test]
fn snapshot_json_traces_replay() {
    let dir = Scratch::new("cli");
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

/// A CSV's pointers place the replay's segments where the run's were, so gpt2_train reaches
/// its run's own peak allocated (run_figures.json) unless told not to; under another config
/// than the run's, the report says at which operation the placements were given up, and why.
#[test]
fn a_csv_replays_on_its_runs_addresses_unless_told_not_to() {
    let base = ["replay", "gpt2_train", "--json", "--passes", "3", "--config"];
    let v = json(&cachalot(&[&base[..], &["pytorch_version:2.11,policy:pytorch"]].concat()));
    assert_eq!(
        (v["peak_allocated_bytes"].as_u64(), v["peak_reserved_bytes"].as_u64()),
        (Some(15_073_086_464), Some(21_850_226_688))
    );
    assert_eq!((v["device_allocs"].as_u64(), v["segment_placements_followed"].as_u64()), (Some(182), Some(182)));
    assert_eq!(
        (v["segment_placements_recorded"].as_u64(), v["segment_placements_inferred"].as_bool()),
        (Some(182), Some(true))
    );
    assert!(v.get("segment_placements_abandoned").is_none(), "{v}");
    let own = json(&cachalot(&[&base[..], &["pytorch_version:2.11,policy:pytorch", "--no-follow-addresses"]].concat()));
    assert_eq!(
        own["peak_allocated_bytes"].as_u64(),
        Some(15_072_037_888),
        "the device's own addresses break a tie otherwise"
    );
    assert_eq!(
        (own["segment_placements_followed"].as_u64(), own["segment_placements_recorded"].as_u64()),
        (Some(0), Some(0))
    );
    let split = json(&cachalot(&[&base[..], &["pytorch_version:2.11,policy:pytorch,max_split_size_mb:128"]].concat()));
    assert_eq!(split["peak_allocated_bytes"].as_u64(), Some(15_077_393_408));
    let gave_up = &split["segment_placements_abandoned"];
    assert_eq!((gave_up["operation"].as_u64(), gave_up["line"].as_u64()), (Some(907), Some(909)), "{split}");
    assert_eq!(
        (gave_up["reason"].as_str(), split["segment_placements_followed"].as_u64()),
        (Some("size_differs"), Some(145))
    );
    let text = cachalot(&[
        "replay",
        "gpt2_train",
        "--passes",
        "3",
        "--config",
        "pytorch_version:2.11,policy:pytorch,max_split_size_mb:128",
    ]);
    let text = String::from_utf8_lossy(&text.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("145 of the 182 segments the trace's pointers place"), "{text}");
    assert!(text.contains("given up at operation 907 (line 909): segment 145 asked for 77594624 bytes"), "{text}");
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
    let dir = Scratch::new("bad");
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
    let appended = dir.join("appended.csv.gz");
    let mut bytes = std::fs::read(traces().join("mixed_fc_conv.csv.gz")).unwrap();
    bytes.extend(b"garbage\n");
    std::fs::write(&appended, bytes).unwrap();
    fails_with(&["replay", appended.to_str().unwrap()], "8 bytes after the end of the gzip data are not gzip");
    let truncated = dir.join("truncated.csv.gz");
    let bytes = std::fs::read(traces().join("mixed_fc_conv.csv.gz")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    fails_with(&["replay", truncated.to_str().unwrap()], "cannot decompress: incomplete deflate stream");
    fails_with(&["replay", "--config", "max_split_size_mb:5"], "max_split_size_mb");
    fails_with(&["replay", "--config", "colour:blue"], "unknown key");
    fails_with(&["replay", "--capacity", "1MiB"], "capacity");
    fails_with(&["replay", "--capacity", "lots"], "not a size");
    fails_with(&["replay", "--capacity", "2TiB"], "too large");
    fails_with(&["replay", "--passes", "1"], "--passes");
    fails_with(&["replay", "--jsn"], "unexpected argument '--jsn' found; did you mean '--json'?");
    fails_with(&["replay", "a", "b"], "unexpected argument 'b' found");
    fails_with(&["frobnicate"], "unrecognized subcommand 'frobnicate'");
    let twice = "cannot be used multiple times";
    fails_with(&["replay", "--config", "policy:pytorch", "--config", "policy:cachalot"], twice);
    fails_with(&["replay", "--capacity=1GiB", "--capacity", "2GiB"], twice);
    fails_with(&["advise", "--capacity", "2GiB", "--capacity", "3GiB"], twice);
    fails_with(&["compare", "--passes", "3", "--passes=4"], twice);
    assert!(cachalot(&["help", "replay"]).status.success());
    fails_with(&["replay", unknown.to_str().unwrap(), "--strict"], "1 free(s) of pointers the trace never allocated");
    // Without --strict, unknown frees are counted, reported on stderr, and skipped.
    let out = cachalot(&["replay", unknown.to_str().unwrap(), "--json", "--passes", "3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 free(s) of pointers the trace never allocated (the first at line 2)"), "{err}");
    assert_eq!(json(&out)["trace_report"]["unknown_frees"], 1);
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs cachalot with stdout going to `stdout`, the reading end closed at once when piped.
fn cachalot_into(args: &[&str], stdout: Stdio) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachalot"))
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cachalot");
    drop(child.stdout.take());
    child.wait_with_output().expect("wait for cachalot")
}

#[test]
fn a_closed_stdout_ends_quietly_and_a_full_one_is_one_error() {
    for args in [
        &["compare", "mixed_fc_conv", "--passes", "3"][..],
        &["advise", "mixed_fc_conv"],
        &["replay", "mixed_fc_conv", "--json", "--passes", "3"],
        &["replay", "mixed_fc_conv", "--passes", "3"],
        &["--help"],
    ] {
        let out = cachalot_into(args, Stdio::piped());
        let err = text(&out.stderr);
        assert!(err.is_empty(), "{args:?} with stdout closed wrote to stderr: {err}");
        // 141 once a write meets the closed pipe; 0 if the child wrote everything before it closed.
        assert!(matches!(out.status.code(), Some(141) | Some(0)), "{args:?}: {:?}", out.status);
        if std::path::Path::new("/dev/full").exists() {
            let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
            let out = cachalot_into(args, Stdio::from(full));
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?} into /dev/full: {err}");
            assert!(err.starts_with("cachalot: error: cannot write output: "), "{args:?}: {err}");
            assert!(!err.contains("panicked"), "{args:?}: {err}");
        }
    }
}

#[test]
fn the_readme_out_of_memory_example_runs_out_of_memory_and_explains_it() {
    let readme = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    let line = readme.lines().find(|l| l.contains("# out of memory, explained")).expect("the README's example");
    let command = line.split('#').next().unwrap();
    let args: Vec<&str> = command.split_whitespace().skip(1).chain(["--passes", "3"]).collect();
    let out = cachalot(&args);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(RAN_OUT_OF_MEMORY), "{args:?}: {}", text(&out.stderr));
    assert!(!report.contains("out of memory   0"), "{line}: no out-of-memory\n{report}");
    assert!(report.contains("first OOM       operation"), "{report}");
    assert!(report.contains("Tried to allocate"), "{report}");
    assert!(report.contains("avoided by"), "{report}");
    assert!(report.contains("when reserved memory peaked"), "--summary: {report}");
}

/// When no config avoids out of memory, `replay` says why as `advise` does: the trace needs
/// more than the device, or it fits live but no config packs it.
#[test]
fn replay_tells_a_trace_too_large_from_one_no_config_packs() {
    for (capacity, why) in [
        ("1.3GiB", "the trace needs more memory than this capacity (it holds 1.36 GiB live at once)"),
        ("1.36GiB", "none fits 1.36 GiB (the trace holds at most 1.36 GiB live at once)"),
    ] {
        let out = cachalot(&["replay", "mixed_fc_conv", "--capacity", capacity, "--passes", "3"]);
        let report = text(&out.stdout);
        assert!(report.contains(&format!("avoided by     no config tried: {why}")), "{capacity}: {report}");
    }
}

#[test]
fn compare_divides_pytorchs_reserved_by_pytorchs_requested_even_when_ours_ran_out() {
    let out =
        cachalot(&["compare", "gpt2_train", "--capacity", "15GiB", "--config", "policy:pytorch", "--passes", "3"]);
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let requested = pytorch("gpt2_train.csv.gz", "default")["peak_requested"].as_u64().unwrap() as f64;
    for (row, conf) in
        [("policy:pytorch ", "default"), ("(PyTorch backend:cudaMallocAsync)", "backend:cudaMallocAsync")]
    {
        let reserved = pytorch("gpt2_train.csv.gz", conf)["peak_reserved"].as_u64().unwrap() as f64;
        let want = format!("{:.3}", reserved / requested);
        // PyTorch's figures are in the table after its heading.
        let theirs = table.split("PyTorch (H200)").nth(1).unwrap_or_else(|| panic!("no PyTorch table:\n{table}"));
        let line = theirs.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("{row} missing:\n{table}"));
        assert!(line.contains(&want), "{conf}: expected {want} in '{line}'");
    }
    assert!(table.contains("1.450") && table.contains("1.044"), "{table}");
}

#[test]
fn a_users_trace_named_like_a_reference_trace_gets_no_pytorch_figures() {
    let dir = Scratch::new("cli-namesake");
    let namesake = dir.join("mixed_fc_conv.csv.gz");
    std::fs::write(
        &namesake,
        "Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,3000000,0x0\n0,2,free,0x10,3000000,0x0\n",
    )
    .unwrap();
    let path = namesake.to_str().unwrap();
    let v = json(&cachalot(&["compare", path, "--config", "policy:pytorch", "--json", "--passes", "3"]));
    assert!(v[0]["pytorch"].is_null(), "reference figures for another trace: {}", v[0]["pytorch"]);
    let table = text(&cachalot(&["compare", path, "--passes", "3"]).stdout);
    assert!(!table.contains("(PyTorch backend:cudaMallocAsync)"), "{table}");
    assert!(!table.contains("1.187"), "{table}");
    // The reference trace itself, under any folder, keeps them.
    let reference = Scratch::new("cli-reference");
    let copy = reference.join("mixed_fc_conv.csv.gz");
    std::fs::copy(traces().join("mixed_fc_conv.csv.gz"), &copy).unwrap();
    let v =
        json(&cachalot(&["compare", copy.to_str().unwrap(), "--config", "policy:pytorch", "--json", "--passes", "3"]));
    assert_eq!(v[0]["pytorch"]["conf"], "default");
}

#[test]
fn pytorch_keys_cachalots_policy_ignores_are_noted() {
    let note = "cachalot: note: max_split_size_mb has no effect under policy:cachalot, which maps pages";
    let out = cachalot(&["replay", "mixed_fc_conv", "--config", "max_split_size_mb:128", "--json", "--passes", "3"]);
    let err = text(&out.stderr);
    assert!(err.contains(note), "{err}");
    assert!(err.contains("add policy:pytorch for PyTorch's rules"), "{err}");
    let out = cachalot(&[
        "compare",
        "mixed_fc_conv",
        "--config",
        "expandable_segments:True,max_non_split_rounding_mb:64",
        "--config",
        "policy:pytorch,max_split_size_mb:128",
        "--json",
        "--passes",
        "3",
    ]);
    let err = text(&out.stderr);
    assert!(err.contains("cachalot: note: expandable_segments has no effect"), "{err}");
    assert!(err.contains("cachalot: note: max_non_split_rounding_mb has no effect"), "{err}");
    assert!(!err.contains("max_split_size_mb has no effect"), "policy:pytorch uses it: {err}");
    let out =
        cachalot(&["replay", "mixed_fc_conv", "--config", "policy:pytorch,max_split_size_mb:128", "--passes", "3"]);
    assert!(!text(&out.stderr).contains("note:"), "{}", text(&out.stderr));
}

#[test]
fn a_trace_with_no_events_is_an_error() {
    let dir = Scratch::new("cli-empty");
    let header = dir.join("header.csv");
    std::fs::write(&header, "Thread,Time,Action,Pointer,Size,Stream\n").unwrap();
    let snapshot = dir.join("nohistory.json");
    std::fs::write(&snapshot, r#"{"segments": [], "device_traces": [[]]}"#).unwrap();
    for path in [&header, &snapshot] {
        let name = path.file_name().unwrap().to_str().unwrap();
        for command in ["replay", "compare", "advise"] {
            fails_with(&[command, path.to_str().unwrap()], &format!("{name} holds no allocation events"));
        }
    }
    fails_with(&["replay", snapshot.to_str().unwrap()], "was record_history on when it was taken?");
}

fn two_device_snapshot(dir: &std::path::Path, device0: &str, device1: &str) -> PathBuf {
    let path = dir.join(format!("twodev-{}-{}.json", device0.len(), device1.len()));
    std::fs::write(&path, format!(r#"{{"segments": [], "device_traces": [[{device0}], [{device1}]]}}"#)).unwrap();
    path
}

#[test]
fn a_snapshot_of_several_devices_is_replayed_one_device_at_a_time() {
    let dir = Scratch::new("cli-devices");
    let one = r#"{"action": "alloc", "addr": 4096, "size": 3000000, "stream": 0}"#;
    let three = r#"{"action": "alloc", "addr": 4096, "size": 3000000, "stream": 0},
        {"action": "alloc", "addr": 8192, "size": 100, "stream": 0},
        {"action": "free_requested", "addr": 4096, "size": 3000000, "stream": 0}"#;
    let both = two_device_snapshot(&dir, one, three);
    let both = both.to_str().unwrap();
    for command in ["replay", "compare", "advise"] {
        fails_with(&[command, both], "holds allocation events of devices 0 and 1");
        fails_with(&[command, both], "--device N");
    }
    let v = json(&cachalot(&["replay", both, "--device", "1", "--json", "--passes", "3"]));
    assert_eq!(v["ops"], 3, "device 1's events alone");
    let v = json(&cachalot(&["replay", both, "--device", "0", "--json", "--passes", "3"]));
    assert_eq!(v["ops"], 1, "device 0's events alone");
    let text_report = text(&cachalot(&["replay", both, "--device", "1", "--passes", "3"]).stdout);
    assert!(text_report.contains(", device 1 (3 operations"), "{text_report}");
    assert!(json(&cachalot(&["advise", both, "--device", "1", "--json"])).is_array());
    fails_with(&["replay", both, "--device", "2"], "records devices 0 to 1");
    fails_with(&["replay", both, "--device", "x"], "invalid value 'x' for '--device <N>'");
    fails_with(&["replay", "mixed_fc_conv", "--device", "0"], "RMM CSV");
    // Events on one device only: that device, without asking.
    let second_only = two_device_snapshot(&dir, "", three);
    let v = json(&cachalot(&["replay", second_only.to_str().unwrap(), "--json", "--passes", "3"]));
    assert_eq!(v["ops"], 3);
    fails_with(&["replay", second_only.to_str().unwrap(), "--device", "0"], "no allocation events of device 0");
}

#[test]
fn advise_recommends_nothing_when_every_config_runs_out_of_memory() {
    let out = cachalot(&["advise", "mixed_fc_conv", "--capacity", "1GiB"]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(report.contains("no config tried avoids out of memory"), "{report}");
    assert!(report.contains("the trace needs more memory than this capacity"), "{report}");
    assert!(!report.contains("_ALLOC_CONF="), "recommended a config that runs out:\n{report}");
    let report = text(&cachalot(&["advise", "mixed_fc_conv"]).stdout);
    assert!(report.contains("CACHALOT_ALLOC_CONF=policy:cachalot"), "{report}");
    assert!(!report.contains("no config tried avoids"), "{report}");
}

/// `advise` ranks a config whose first pass fits but whose next passes run out of memory (the
/// trace run again, as a loop runs it) after every config that holds it run again, and does not
/// recommend it: on the device PyTorch's default needs for one run of mixed_fc_conv, the default
/// runs out in the passes after, and the PyTorch line recommends a config that does not, saying
/// why.
#[test]
fn advise_ranks_a_config_that_runs_out_of_memory_when_run_again_after_those_that_do_not() {
    let fit = json(&cachalot(&["fit", "mixed_fc_conv", "--json"]));
    let capacity = fit["fits"][0]["capacity_bytes"].as_u64().unwrap().to_string();
    let ranked = json(&cachalot(&["advise", "mixed_fc_conv", "--capacity", &capacity, "--json"]));
    let ranked = ranked.as_array().unwrap();
    let failures = |c: &serde_json::Value| (c["ooms"].as_u64().unwrap(), c["warm_pass_ooms"].as_u64().unwrap());
    let default = ranked.iter().find(|c| c["config"] == "policy:pytorch").unwrap();
    let (first, again) = failures(default);
    assert_eq!(first, 0, "the default's first pass fits on its own fit: {default}");
    assert!(again > 0, "the default holds the trace run again: {default}");
    let last_holding = ranked.iter().rposition(|c| failures(c) == (0, 0)).unwrap();
    let default_rank = ranked.iter().position(|c| c["config"] == "policy:pytorch").unwrap();
    assert!(default_rank > last_holding, "the default ranked {default_rank}, before a config that holds it");
    let report = text(&cachalot(&["advise", "mixed_fc_conv", "--capacity", &capacity]).stdout);
    let report = report.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = report.split("PYTORCH_CUDA_ALLOC_CONF=").nth(1).unwrap().split_whitespace().next().unwrap();
    let chosen = ranked.iter().find(|c| c["config"] == format!("policy:pytorch,{line}")).unwrap();
    assert_eq!(failures(chosen), (0, 0), "recommended {line}, which runs out of memory");
    let why = format!("the default's first pass fits too, but the passes after it run out of memory {again} times");
    assert!(report.contains(&why), "{report}");
    // On the device cachalot's policy needs for one run of resnet50_train, every config whose
    // first pass fits runs out when run again: advise says so and recommends none.
    let fit = json(&cachalot(&["fit", "resnet50_train", "--json"]));
    let ours = fit["fits"].as_array().unwrap().iter().find(|f| f["config"] == "policy:cachalot").unwrap();
    let capacity = ours["capacity_bytes"].as_u64().unwrap().to_string();
    let report = text(&cachalot(&["advise", "resnet50_train", "--capacity", &capacity]).stdout);
    let report = report.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(report.contains("no config tried holds the trace run again"), "{report}");
    assert!(!report.contains("_ALLOC_CONF="), "recommended a config that runs out when run again: {report}");
}

/// Each command's help is its own: its options, not another command's, with what they
/// mean, the exit statuses, and where configs come from; any position of --help gives it.
#[test]
fn each_command_has_its_own_help() {
    let help = |args: &[&str]| {
        let out = cachalot(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let replay = help(&["replay", "--help"]);
    assert!(replay.contains("Usage: cachalot replay [OPTIONS] [TRACE]"), "{replay}");
    for option in ["--summary", "--strict", "--passes <N>", "--capacity <SIZE>", "3 to", "--device <N>"] {
        assert!(replay.contains(option), "replay --help lacks {option}: {replay}");
    }
    let compare = help(&["compare", "x", "--help"]);
    assert!(compare.contains("Usage: cachalot compare") && compare.contains("repeat it for several"), "{compare}");
    assert!(!compare.contains("--summary"), "compare takes no --summary: {compare}");
    let advise = help(&["advise", "-h"]);
    assert!(advise.contains("Usage: cachalot advise") && !advise.contains("--passes"), "{advise}");
    assert_ne!(replay, compare);
    assert_eq!(help(&["help", "replay"]), replay);
    for page in [&replay, &compare, &advise, &help(&["--help"])] {
        assert!(page.contains("Exit status: 0 done") && page.contains("3 (replay only) the replay ran out of memory"));
        assert!(page.contains("CACHALOT_ALLOC_CONF is read") && page.contains("--config wins"), "{page}");
        assert!(page.lines().all(|l| l.chars().count() <= 100), "a help line is wider than 100 columns: {page}");
    }
}

/// A usage error is two lines: what is wrong (with the option a typo meant) and where the help is.
#[test]
fn a_usage_error_is_short_and_suggests_what_a_typo_meant() {
    let out = cachalot(&["replay", "--capcity", "1GiB"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "cachalot: error: unexpected argument '--capcity' found; did you mean '--capacity'?\n\
         see 'cachalot replay --help'\n"
    );
}

/// `-` reads the trace from stdin.
#[test]
fn a_dash_reads_the_trace_from_stdin() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachalot"))
        .args(["replay", "-", "--json", "--passes", "3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let gz = std::fs::read(traces().join("mixed_fc_conv.csv.gz")).unwrap();
    child.stdin.take().unwrap().write_all(&gz).unwrap();
    let v = json(&child.wait_with_output().unwrap());
    assert_eq!((v["trace"].as_str(), v["ops"].as_u64()), (Some("stdin"), Some(9545)));
}

/// `CACHALOT_ALLOC_CONF` is the config when no `--config` is given; `--config` wins; a bad
/// one is named as the environment's.
#[test]
fn the_environments_config_is_read_and_the_command_line_wins() {
    let run = |env: &str, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cachalot")).args(args).env("CACHALOT_ALLOC_CONF", env).output().unwrap()
    };
    let replay = ["replay", "mixed_fc_conv", "--json", "--passes", "3"];
    assert_eq!(json(&run("policy:pytorch", &replay))["config"], "policy:pytorch");
    let given = [&replay[..], &["--config", "policy:cachalot"]].concat();
    assert_eq!(json(&run("policy:pytorch", &given))["config"], "policy:cachalot");
    let out = run("colour:blue", &replay);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("cachalot: error: CACHALOT_ALLOC_CONF 'colour:blue': "),
        "{}",
        text(&out.stderr)
    );
    let rows =
        json(&run("policy:pytorch,max_split_size_mb:256", &["compare", "mixed_fc_conv", "--json", "--passes", "3"]));
    let configs: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["config"].as_str().unwrap()).collect();
    assert_eq!(configs.len(), 5, "{configs:?}");
    assert!(configs.contains(&"policy:pytorch,max_split_size_mb:256"), "{configs:?}");
    let rows = json(&run("policy:pytorch", &["compare", "mixed_fc_conv", "--json", "--passes", "3"]));
    assert_eq!(rows.as_array().unwrap().len(), 4, "the environment's config is a default one: one row");
}

#[test]
fn an_option_a_command_does_not_take_is_refused() {
    for (args, needle) in [
        (&["advise", "mixed_fc_conv", "--passes", "10"][..], "unexpected argument '--passes' found"),
        (&["advise", "--config", "policy:pytorch"], "unexpected argument '--config' found"),
        (&["compare", "--summary"], "unexpected argument '--summary' found"),
        (&["replay", "--json=yes"], "unexpected value 'yes' for '--json'"),
        (&["replay", "-x"], "unexpected argument '-x' found (a trace whose name starts with '-' can be given as ./-x)"),
    ] {
        fails_with(args, needle);
        assert_eq!(cachalot(args).status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn the_plot_path_is_checked_before_the_replay() {
    let out = cachalot(&["replay", "mixed_fc_conv", "--json", "--plot", "/nonexistent/x.svg", "--passes", "3"]);
    assert!(out.stdout.is_empty(), "ran before checking the plot path: {}", text(&out.stdout));
    fails_with(&["replay", "mixed_fc_conv", "--plot", "/nonexistent/x.svg"], "folder /nonexistent does not exist");
    fails_with(&["compare", "mixed_fc_conv", "--plot", "/nonexistent/x.svg"], "folder /nonexistent does not exist");
    fails_with(&["replay", "mixed_fc_conv", "--plot", "plot.png"], "ending in .svg");
    assert_eq!(cachalot(&["replay", "--plot", "plot.png"]).status.code(), Some(2));
    let dir = Scratch::new("cli-plot");
    let svg = dir.join("replay.svg");
    let out = cachalot(&["replay", "mixed_fc_conv", "--plot", svg.to_str().unwrap(), "--passes", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    // A run that fails leaves no file it created.
    let unwritten = dir.join("failed.svg");
    fails_with(&["replay", "/no/such/trace.csv", "--plot", unwritten.to_str().unwrap()], "cannot read trace");
    assert!(!unwritten.exists());
}

/// The sum `replay`, `advise` and `fit` call driver calls.
pub(crate) fn driver_calls(c: &serde_json::Value) -> u64 {
    ["allocations", "frees", "vm_creates", "vm_maps", "vm_unmaps", "vm_destroys"]
        .iter()
        .map(|k| c[k].as_u64().unwrap())
        .sum()
}

#[test]
fn replay_compare_and_advise_count_driver_calls_alike() {
    let r = json(&cachalot(&["replay", "mixed_fc_conv", "--json", "--passes", "3"]));
    let ranked = json(&cachalot(&["advise", "mixed_fc_conv", "--json"]));
    let advised = ranked.as_array().unwrap().iter().find(|c| c["config"] == "policy:cachalot").unwrap();
    let calls = driver_calls(&r["device_calls_cold"]);
    assert_eq!(advised["device_calls"], calls);
    let report = text(&cachalot(&["replay", "mixed_fc_conv", "--passes", "3"]).stdout);
    assert!(report.contains(&format!("driver calls    {calls} in the first pass")), "{report}");
    assert!(report.contains(&format!("segments+maps   {} obtained", r["device_allocs"])), "{report}");
    let table = text(&cachalot(&["compare", "mixed_fc_conv", "--config", "", "--passes", "3"]).stdout);
    let row = table.lines().find(|l| l.starts_with("policy:cachalot")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[4], r["device_allocs"].to_string(), "segs+maps: {row}");
    assert_eq!(cells[5], calls.to_string(), "driver calls: {row}");
    let advice = text(&cachalot(&["advise", "mixed_fc_conv"]).stdout);
    for out in [&report, &table, &advice] {
        assert!(!out.contains("device calls"), "an unqualified count: {out}");
    }
}

#[test]
fn compare_columns_line_up_whatever_the_labels() {
    let out = cachalot(&[
        "compare",
        "mixed_fc_conv",
        "--config",
        "policy:pytorch,roundup_power2_divisions:4",
        "--config",
        "policy:pytorch",
        "--passes",
        "3",
    ]);
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Each table: a header starting "config", then its rows, each as long as the header
    // but for the lines a long config wraps onto (the config alone, no column gap).
    let tables: Vec<Vec<&str>> =
        table.split("\n\n").filter_map(|t| t.find("\nconfig ").map(|at| t[at + 1..].lines().collect())).collect();
    assert_eq!(tables.len(), 2, "{table}");
    for t in &tables {
        let rows: Vec<&&str> = t.iter().filter(|l| l.contains("  ")).collect();
        assert!(rows.len() >= 3 && rows.iter().all(|l| l.len() == t[0].len()), "columns do not line up:\n{table}");
    }
}

#[test]
fn usage_errors_exit_2_and_name_the_option() {
    for (args, needle) in [
        (&["replay", "--config", "colour:blue"][..], "--config 'colour:blue'"),
        (&["compare", "--config", "max_split_size_mb:5"], "max_split_size_mb"),
        (&["replay", "--capacity", "1.5"], "'1.5' is not a whole number of bytes"),
        (&["replay", "--capacity", "0"], "--capacity"),
        (&["replay", "--capacity", "1.5MiB"], "for '--capacity <SIZE>': 1.5MiB (1572864 bytes) is too small"),
    ] {
        fails_with(args, needle);
        assert_eq!(cachalot(args).status.code(), Some(2), "{args:?}");
    }
    let v = json(&cachalot(&["replay", "mixed_fc_conv", "--capacity", "1.5GiB", "--json", "--passes", "3"]));
    assert_eq!(v["capacity_bytes"], 3u64 << 29);
}

/// A snapshot's replay puts segments where the recorded run's driver put them, in every
/// figure the tool gives: the report, the plot and `advise` make the same decisions.
#[test]
fn a_snapshot_replays_alike_in_the_report_the_plot_and_advise() {
    let snapshot = traces().join("recorded/resnet50_train.policy_pytorch.snapshot.json.gz");
    let s = snapshot.to_str().unwrap();
    let dir = Scratch::new("cli");
    let plot = dir.join("oom.svg");
    let mut args = vec!["replay", s, "--capacity", "2GiB", "--config", "policy:pytorch", "--json"];
    let report = json_after_oom(&cachalot(&args));
    args.extend(["--plot", plot.to_str().unwrap()]);
    json_after_oom(&cachalot(&args));
    let ooms = report["ooms"].as_u64().unwrap();
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.contains(&format!("{ooms} out-of-memory events")), "the plot's count differs from {ooms}");
    let advice = json(&cachalot(&["advise", s, "--capacity", "2GiB", "--json"]));
    let row = advice.as_array().unwrap().iter().find(|c| c["config"] == "policy:pytorch").expect("policy:pytorch row");
    assert_eq!(row["ooms"].as_u64(), Some(ooms));
    let calls = report["device_allocs"].as_u64().unwrap() + report["device_frees"].as_u64().unwrap();
    assert_eq!(row["device_calls"].as_u64(), Some(calls));
}

/// A folder named like a built-in trace does not hide it; a file of that name is read instead.
#[test]
fn a_folder_named_like_a_built_in_trace_does_not_hide_it() {
    let dir = Scratch::new("named");
    std::fs::create_dir_all(dir.join("mixed_fc_conv")).unwrap();
    let run = |dir: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_cachalot"))
            .args(["replay", "mixed_fc_conv", "--json", "--passes", "3"])
            .current_dir(dir)
            .output()
            .unwrap()
    };
    assert_eq!(json(&run(&dir))["trace"], "mixed_fc_conv.csv.gz");
    std::fs::remove_dir(dir.join("mixed_fc_conv")).unwrap();
    std::fs::write(dir.join("mixed_fc_conv"), "Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,4096,0x0\n")
        .unwrap();
    let v = json(&run(&dir));
    assert_eq!((v["trace"].as_str(), v["peak_requested_bytes"].as_u64()), (Some("mixed_fc_conv"), Some(4096)));
}

/// A config pasted from a PyTorch run is accepted: its keys that change nothing on a simulated
/// device are noted, each once; a bad value is said to be one, of that key.
#[test]
fn pytorchs_keys_are_accepted_with_notes_and_bad_values_named() {
    let conf =
        "backend:cudaMallocAsync,pinned_use_cuda_host_register:True,release_lock_on_cudamalloc:True,policy:pytorch";
    let out = cachalot(&["replay", "mixed_fc_conv", "--config", conf, "--json", "--passes", "3"]);
    let err = text(&out.stderr);
    assert_eq!(json(&out)["config"], "policy:pytorch");
    for key in ["backend:cudaMallocAsync", "pinned_use_cuda_host_register:True", "release_lock_on_cudamalloc:True"] {
        assert_eq!(err.matches(&format!("cachalot: note: {key}")).count(), 1, "{key}: {err}");
    }
    assert!(err.contains("does not simulate: this run replays policy:pytorch"), "{err}");
    fails_with(
        &["replay", "--config", "backend:jemalloc"],
        "--config 'backend:jemalloc': key 'backend': bad value 'jemalloc'",
    );
    fails_with(&["replay", "--config", "pinned_num_register_threads:3"], "bad value '3'; expected a power of two");
    fails_with(&["replay", "--config", "colour:blue"], "key 'colour': unknown key");
}

/// The warm CPU cost is split where the decision memo engaged, not one median that moves with
/// --passes; and it is labelled as the host's over a simulated device.
#[test]
fn the_warm_cost_says_where_the_decision_memo_engaged() {
    let args = ["replay", "mixed_fc_conv", "--config", "policy:pytorch,decision_memo:True", "--passes", "10"];
    let v = json(&cachalot(&[&args[..], &["--json"]].concat()));
    let answered: Vec<bool> =
        v["memo_answered_passes"].as_array().unwrap().iter().map(|b| b.as_bool().unwrap()).collect();
    assert_eq!(answered.len(), 10);
    assert!(!answered[0] && answered[9], "the memo engages after a few passes: {answered:?}");
    let (before, with) = (v["ns_per_op_before_memo"].as_f64().unwrap(), v["ns_per_op_with_memo"].as_f64().unwrap());
    assert!(with < before, "{with} vs {before}");
    let report = text(&cachalot(&args).stdout);
    assert!(report.contains("ns/op warm before the decision memo engaged (median of"), "{report}");
    assert!(report.contains("ns/op once it answered (median of"), "{report}");
    let plain = text(&cachalot(&["replay", "mixed_fc_conv", "--passes", "3"]).stdout);
    assert!(
        plain.contains("(median of 3, decision memo off)") && plain.contains("host CPU, simulated device"),
        "{plain}"
    );
    let table = text(&cachalot(&["compare", "mixed_fc_conv", "--passes", "3"]).stdout);
    assert!(table.contains("sim ns/op") && table.contains("measured on an NVIDIA H200"), "{table}");
}
