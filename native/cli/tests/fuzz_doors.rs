//! Replays the committed inputs of the fuzz targets at the doors (`fuzz/doors/`) on stable
//! Rust: every file under `fuzz/seeds/<target>/` and `fuzz/corpus/<target>/` goes through the
//! `run` function the libFuzzer binary calls.
//!
//! Invariant: each target's folders hold at least one input, and no input panics.

#[path = "../../../fuzz/doors/mod.rs"]
mod doors;

use std::path::PathBuf;

fn replay(target: &str, run: fn(&[u8])) {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = Vec::new();
    for folder in ["seeds", "corpus"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(folder).join(target)) else { continue };
        let mut found: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
        found.sort();
        files.extend(found);
    }
    assert!(!files.is_empty(), "no committed inputs for fuzz target {target}");
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if std::panic::catch_unwind(|| run(&data)).is_err() {
            panic!("fuzz input {} crashes", file.display());
        }
    }
}

#[test]
fn file_corpus_replays() {
    replay("file", doors::file::run);
}
