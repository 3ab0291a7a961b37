//! `cachalot replay` reads a trace's operations back from its spool for each pass
//! (`native/cli/src/op_spool.rs`); its figures must be those of the same file read whole by
//! the library (`trace_file::parse`) and replayed by the core, for a CSV (spooled a line at a
//! time), a gzipped CSV whose rows' times go back, a snapshot, stdin, and a trace that runs
//! out of memory, whose first refusal is located on its own line.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::scratch::Scratch;

use cachalot_cli::trace_file::parse;
use cachalot_core::{Allocator, Config, Replayer, SimDevice};

const CAPACITY: u64 = 140 << 30;

/// `replay --json` of `path` (or of `stdin_bytes` as `-`) under `config`.
fn replay_json(path: &str, config: &str, capacity: u64, stdin_bytes: Option<&[u8]>) -> serde_json::Value {
    let capacity = capacity.to_string();
    let mut c = Command::new(env!("CARGO_BIN_EXE_cachalot"));
    c.args(["replay", path, "--config", config, "--json", "--passes", "3", "--capacity", &capacity])
        .env_remove("CACHALOT_ALLOC_CONF")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("run cachalot");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(stdin_bytes.unwrap_or_default()).expect("write stdin");
    drop(stdin);
    let out = child.wait_with_output().expect("run cachalot");
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// The cold pass's figures of `bytes` held whole and replayed by the core.
fn held_figures(bytes: &[u8], config: &str, capacity: u64) -> [u64; 6] {
    let trace = parse(bytes, "t", None).expect("a valid trace").trace;
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, &trace), Config::parse(config).unwrap());
    let out = Replayer::new(trace.slots).run_ops(&mut alloc, &trace.ops).expect("a replay");
    [
        out.ops as u64,
        out.peak_requested_bytes,
        out.peak_allocated_bytes,
        out.peak_reserved_bytes,
        out.device_allocs,
        out.ooms,
    ]
}

fn figures(v: &serde_json::Value) -> [u64; 6] {
    ["ops", "peak_requested_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "device_allocs", "ooms"]
        .map(|k| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}")))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn traces(name: &str) -> String {
    format!("{}/../../traces/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_spooled_replay_gives_the_figures_of_the_trace_held_whole() {
    // Frees logged after allocations of later times (as a log of two threads has them): the
    // order of rows, not of times, is what a reader keeps.
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for step in 0..300u64 {
        let t = 1000 + step * 100;
        let base = 0x7f00_0000_0000 + (step % 3) * (64 << 20);
        csv += &format!("0,{t},allocate,{base:#x},{},0x0\n", (8 << 20) + step * 4096);
        csv += &format!("1,{},allocate,{:#x},{},0x0\n", t + 50, base + (32 << 20), 3 << 20);
        csv += &format!("0,{},free,{base:#x},0,0x0\n", t + 10);
        csv += &format!("1,{},free,{:#x},0,0x0\n", t + 60, base + (32 << 20));
    }
    let gz = gzip(csv.as_bytes());
    let snapshot = std::fs::read(traces("recorded/mixed_fc_conv.policy_pytorch.snapshot.json.gz")).unwrap();
    let mixed = std::fs::read(traces("mixed_fc_conv.csv.gz")).unwrap();
    let cases: [(&str, &[u8], bool); 4] = [
        ("late.csv", csv.as_bytes(), false),
        ("late.csv.gz", &gz, false),
        ("snapshot.json.gz", &snapshot, false),
        ("mixed.csv.gz", &mixed, true),
    ];
    for (name, bytes, from_stdin) in cases {
        for config in ["policy:pytorch", "policy:cachalot"] {
            let v = if from_stdin {
                replay_json("-", config, CAPACITY, Some(bytes))
            } else {
                let dir = Scratch::new("spooled");
                replay_json(&dir.file(name, bytes), config, CAPACITY, None)
            };
            assert_eq!(figures(&v), held_figures(bytes, config, CAPACITY), "{name} under {config}");
        }
    }
}

#[test]
fn the_first_out_of_memory_of_a_spooled_replay_is_located_in_the_file() {
    let bytes = std::fs::read(traces("mixed_fc_conv.csv.gz")).unwrap();
    let dir = Scratch::new("spooled");
    let path = dir.file("mixed_fc_conv.csv.gz", &bytes);
    let capacity = 1 << 30;
    let v = replay_json(&path, "policy:pytorch", capacity, None);
    let held = held_figures(&bytes, "policy:pytorch", capacity);
    assert!(held[5] > 0, "the trace must run out of memory at this capacity");
    assert_eq!(figures(&v), held);
    let trace = parse(&bytes, "t", None).unwrap().trace;
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, &trace), Config::pytorch());
    let out = Replayer::new(trace.slots).run_ops(&mut alloc, &trace.ops).unwrap();
    let op = out.first_oom.as_ref().unwrap().0;
    let oom = &v["first_oom"];
    assert_eq!(oom["operation"].as_u64(), Some(op as u64));
    let cachalot_core::Position::Line(line) = trace.positions[op] else { panic!("a CSV's position is a line") };
    assert_eq!(oom["line"].as_u64(), Some(u64::from(line)));
    assert_eq!(oom["time_us"].as_u64(), Some(trace.times_us[op]));
    assert_eq!(oom["since_start_us"].as_u64(), Some(trace.times_us[op] - trace.times_us[0]));
}
