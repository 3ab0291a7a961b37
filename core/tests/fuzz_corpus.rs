//! Replays the fuzz targets' committed inputs on stable Rust: every file under
//! `fuzz/seeds/<target>/` and `fuzz/corpus/<target>/` goes through the same `run` function
//! the libFuzzer binary calls (the target logic is included from `fuzz/targets/`), so
//! `cargo test` catches a regression on any input the fuzzer ever found interesting.
//!
//! Invariant: each target's folders hold at least one input, and no input panics.

#[path = "../../fuzz/targets/mod.rs"]
mod targets;

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The committed inputs of `target`, seeds first, by file name.
fn inputs(target: &str) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for folder in ["seeds", "corpus"] {
        let dir = fuzz_dir().join(folder).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
        files.sort();
        all.extend(files);
    }
    all
}

/// Runs every input of `target`, naming the first one that panics.
fn replay(target: &str, run: fn(&[u8])) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no committed inputs for fuzz target {target}");
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
            let msg = panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied());
            panic!("fuzz input {} crashes: {}", display(file), msg.unwrap_or("(non-string panic)"));
        }
    }
}

fn display(p: &Path) -> String {
    p.strip_prefix(fuzz_dir()).unwrap_or(p).display().to_string()
}

#[test]
fn config_corpus_replays() {
    replay("config", targets::config::run);
}

#[test]
fn trace_corpus_replays() {
    replay("trace", targets::trace::run);
}

#[test]
fn ops_corpus_replays() {
    replay("ops", targets::ops::run);
}

#[test]
fn memo_corpus_replays() {
    replay("memo", targets::memo::run);
}

/// The memo target proves something only where the memo replays: some committed inputs
/// must reach a replay.
#[test]
fn memo_corpus_reaches_replays() {
    let replayed = inputs("memo")
        .iter()
        .filter(|f| targets::memo::execute(&targets::scenario::Scenario::decode(&std::fs::read(f).unwrap())).unwrap())
        .count();
    assert!(replayed >= 1, "no memo input replays a period");
}

/// Found by the `trace` fuzzer: a clock time with huge hours overflows in `parse_time`
/// (trace.rs: `h * 3600`, then `whole * 1_000_000`): a panic with overflow checks, and a
/// wrapped, wrong time without. Expected: an error naming the line ("bad time").
#[test]
fn a_huge_clock_time_is_an_error() {
    for time in ["5124095576030432:00:00", "10000000000:00:00", "0:0:18446744073709551615"] {
        let text = format!("Action,Pointer,Size,Time\nallocate,0x10,512,{time}\n");
        let e = cachalot_core::parse_trace(&text).unwrap_err();
        assert_eq!(e.line, 2, "{time}: {e}");
        assert!(e.message.contains("time"), "{time}: {e}");
    }
}

/// Found while fuzzing the `trace` target: `Trace::peak_requested` sums live sizes with `+`,
/// so two live allocations whose sizes add past `u64::MAX` panic with overflow checks (and
/// wrap to a tiny peak without). Expected: no panic; the peak saturates at `u64::MAX` (or the
/// parser refuses sizes no device could hold).
#[test]
fn peak_requested_of_huge_sizes_does_not_overflow() {
    let text = "Time,Action,Pointer,Size\n1,allocate,0x10,18446744073709551615\n2,allocate,0x20,1\n";
    match cachalot_core::parse_trace(text) {
        Ok(t) => assert_eq!(t.peak_requested(), u64::MAX),
        Err(e) => assert_eq!(e.line, 2, "{e}"),
    }
}

/// Found by fuzzing the parsers and the replay: one allocation over 1 TiB aborted a replay and
/// left what the pass had allocated live with no slot to free it by. Expected: the parser
/// refuses the size, naming the line; a hand-made trace that holds one still frees what it
/// allocated when its replay fails.
#[test]
fn a_size_no_device_holds_is_refused_and_a_failed_replay_frees_its_allocations() {
    let csv = "Time,Action,Pointer,Size\n1,allocate,0x1000,4096\n2,allocate,0x2000,1099511627777\n";
    let e = cachalot_core::parse_trace(csv).unwrap_err();
    assert!(e.line == 3 && e.message.contains("more than 1 TiB"), "{e}");
    let json = r#"{"device_traces":[[{"action":"alloc","addr":4096,"size":1099511627777}]]}"#;
    assert!(cachalot_core::parse_trace(json).unwrap_err().message.contains("more than 1 TiB"));

    use cachalot_core::{Allocator, Config, Replayer, SimDevice, Trace, TraceOp};
    let ops = vec![
        TraceOp::Alloc { slot: 0, size: 4096, stream: 0 },
        TraceOp::Alloc { slot: 1, size: (1 << 40) + 1, stream: 0 },
    ];
    let trace = Trace { slots: 2, times_us: vec![0, 0], ops, ..Default::default() };
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
    assert_eq!(Replayer::replay(&mut a, &trace).unwrap_err().op, 1);
    assert_eq!(a.stats().allocated_bytes.all.current, 0);
}

/// Found by fuzzing: a hand-made trace naming a slot past its `slots`, or a replayer reused for
/// a larger trace, panicked on an index. Expected: the slot table grows.
#[test]
fn slots_past_the_count_are_served() {
    use cachalot_core::{Allocator, Config, Replayer, SimDevice, Trace, TraceOp};
    let ops =
        vec![TraceOp::Alloc { slot: 3, size: 512, stream: 0 }, TraceOp::Free { slot: 3 }, TraceOp::Free { slot: 9 }];
    let trace = Trace { slots: 1, times_us: vec![0; 3], ops, ..Default::default() };
    assert_eq!(trace.peak_requested(), 512);
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
    let out = Replayer::new(1).run_pass(&mut a, &trace.ops).unwrap();
    assert_eq!((out.peak_requested_bytes, a.stats().allocated_bytes.all.current), (512, 0));
}

/// Found by fuzzing: a byte-order mark made a snapshot read as CSV and a CSV's first column
/// go unrecognised. Expected: the mark is skipped.
#[test]
fn a_byte_order_mark_is_skipped() {
    let csv = "\u{feff}Time,Action,Pointer,Size\n1,allocate,0x1000,4096\n";
    let json = "\u{feff}{\"device_traces\":[[{\"action\":\"alloc\",\"addr\":4096,\"size\":4096}]]}";
    for text in [csv, json] {
        assert_eq!(cachalot_core::parse_trace(text).unwrap().report.allocs, 1, "{text}");
    }
}

/// Found by fuzzing: a snapshot entry's stream of -1 or "0x7", or a time that is not a whole
/// number, silently became 0. Expected: an error naming the entry and the field.
#[test]
fn a_snapshot_field_of_the_wrong_kind_is_an_error() {
    for (field, value) in [("stream", "-1"), ("stream", "\"0x7\""), ("time_us", "1.5")] {
        let json = format!(
            "{{\"device_traces\":[[{{\"action\":\"alloc\",\"addr\":4096,\"size\":512,\"{field}\":{value}}}]]}}"
        );
        let e = cachalot_core::parse_trace(&json).unwrap_err();
        assert!(e.message.contains(&format!("'{field}'")) && e.message.contains("device_traces[0][0]"), "{e}");
    }
}

/// Found by fuzzing: malloc_after_release skipped malloc's checks (a 0-byte request got 512
/// bytes; u64::MAX overflowed), a huge simulated device overflowed its range size, and a
/// max_split_size_mb past 2^43 read back negative. Expected: errors, no panic, and the limit
/// PyTorch reports: negative is right after all, since PyTorch casts the bytes to a signed
/// integer (measured on an H200, `native/gpu/stats_parity.py`).
#[test]
fn the_edges_of_the_allocator_api_are_errors_not_panics() {
    use cachalot_core::{AllocError, Allocator, Config, SimDevice};
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
    assert!(matches!(a.malloc_after_release(0, 0), Err(AllocError::ZeroSize)));
    assert!(matches!(a.malloc_after_release(u64::MAX, 0), Err(AllocError::TooLarge { .. })));
    assert_eq!(a.stats().allocated_bytes.all.current, 0);
    assert_eq!(a.segment_size_for(u64::MAX), u64::MAX);
    // A device of 2^64 bytes has no address range to match: out of memory, not a panic.
    let mut huge = Allocator::new(SimDevice::new(u64::MAX), Config::default());
    match huge.malloc(1, 0) {
        Ok(p) => huge.free(p).unwrap(),
        Err(e) => assert!(matches!(e, AllocError::OutOfMemory(_)), "{e}"),
    }
    huge.check_invariants().unwrap();
    let split = Allocator::new(
        SimDevice::new(1 << 30),
        Config::parse("policy:pytorch,max_split_size_mb:9007199254740991").unwrap(),
    );
    // 2^53 - 1 MiB is held at u64::MAX / 1 MiB MiB, as PyTorch's parser holds it.
    assert_eq!(split.stats().max_split_size, (u64::MAX / (1 << 20) * (1 << 20)) as i64);
}

/// Found by fuzzing: each stream a program ever used kept an index per pool (a table of 8 KiB)
/// for the allocator's lifetime, and every malloc and free scanned them all. Expected: lookups
/// stay right in any stream order, and `empty_cache` drops the indexes of streams that cache
/// nothing.
#[test]
fn streams_that_cache_nothing_keep_no_index_after_empty_cache() {
    use cachalot_core::{Allocator, Config, SimDevice};
    let mut a = Allocator::new(SimDevice::new(64 << 30), Config::pytorch());
    let baseline = a.metadata_bytes().1;
    // Streams in descending order: each new one sorts first.
    let mut blocks = Vec::new();
    for s in (1..=2000u64).rev() {
        blocks.push((s, a.malloc(4096, s).unwrap()));
    }
    for &(_, p) in &blocks {
        a.free(p).unwrap();
    }
    // Each stream's cached block serves that stream again, and only that one.
    for &(s, p) in blocks.iter().step_by(97) {
        assert_eq!(a.malloc(4096, s).unwrap(), p, "stream {s}");
        a.free(p).unwrap();
    }
    assert!(a.metadata_bytes().1 > 1000 * 8192);
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.metadata_bytes().1, baseline, "indexes of empty streams were kept");
    let p = a.malloc(4096, 7).unwrap();
    a.free(p).unwrap();
}

/// The `ops` inputs again, each injected fault moved to a site the inputs cannot name (their
/// bytes name the first five, so that the corpus keeps its meaning): page destruction,
/// segment free, range release, access grant, event query.
#[test]
fn ops_corpus_replays_with_faults_at_later_sites() {
    use cachalot_core::sim::FaultSite;
    use targets::scenario::{Op, Scenario};
    for later in FaultSite::ALL.into_iter().skip(5) {
        let mut replayed = 0;
        for file in inputs("ops") {
            let mut s = Scenario::decode(&std::fs::read(&file).unwrap());
            let mut faults = 0;
            for op in &mut s.ops {
                if let Op::Fail { site, .. } = op {
                    *site = later;
                    faults += 1;
                }
            }
            if faults == 0 {
                continue;
            }
            replayed += 1;
            let result = std::panic::catch_unwind(|| targets::ops::execute(&s));
            match result {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    panic!("fuzz input {} with {later:?} faults: {e}\nscenario: {}", display(&file), s.config)
                }
                Err(_) => panic!("fuzz input {} with {later:?} faults panicked", display(&file)),
            }
        }
        assert!(replayed > 50, "only {replayed} inputs inject faults");
    }
}
