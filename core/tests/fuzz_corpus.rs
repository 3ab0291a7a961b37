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
