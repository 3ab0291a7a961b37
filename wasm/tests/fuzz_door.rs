//! Replays the committed inputs of the `browser` fuzz target (`fuzz/doors/browser.rs`: any
//! bytes through the page's file reader) on stable Rust: every file under
//! `fuzz/seeds/browser/` and `fuzz/corpus/browser/` goes through the `run` function the
//! libFuzzer binary calls.
//!
//! Invariant: the folders hold at least one input, and no input panics.

#[path = "../../fuzz/doors/browser.rs"]
mod browser;

use std::path::PathBuf;

#[test]
fn browser_corpus_replays() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for folder in ["seeds", "corpus"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(folder).join("browser")) else { continue };
        let mut found: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
        found.sort();
        files.extend(found);
    }
    assert!(files.len() >= 5, "too few committed inputs for fuzz target browser: {}", files.len());
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if std::panic::catch_unwind(|| browser::run(&data)).is_err() {
            panic!("fuzz input {} crashes", file.display());
        }
    }
}

/// The target's checks can fail: an error naming another file, or a trace past the limit
/// on events, is caught.
#[test]
fn the_checks_catch_what_they_are_for() {
    let e = cachalot_wasm::reader::read_trace(b"\xff", "other.csv", None, &browser::LIMITS).unwrap_err();
    assert!(std::panic::catch_unwind(|| browser::check_error(&e)).is_err(), "{e}");
    let rows: String =
        (0..2 * browser::LIMITS.events + 1).map(|i| format!("{i},allocate,0x{:x},512\n", i * 512 + 512)).collect();
    let csv = format!("Time,Action,Pointer,Size\n{rows}");
    let limits = cachalot_core::trace::TraceLimits { bytes: 1 << 30, events: 1 << 30, ..browser::LIMITS };
    let big = cachalot_wasm::reader::read_trace(csv.as_bytes(), "fuzz.json", None, &limits).unwrap();
    assert!(std::panic::catch_unwind(|| browser::check(&big)).is_err());
}
