//! No Rust source file of the core, the native library, the command-line tool or the wasm
//! adapter holds more than 700 lines before its unit tests (`#[cfg(test)]` at the start of a
//! line): a file past that has grown a second concept, which goes into a file of its own,
//! named for it. Integration tests (`tests/`) and benchmarks are not counted.

use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;
const SOURCE_DIRS: &[&str] = &["core/src", "native/src", "native/cli/src", "wasm/src"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Lines of `text` before its unit tests.
fn lines_before_tests(text: &str) -> usize {
    text.lines().take_while(|line| !line.starts_with("#[cfg(test)]")).count()
}

#[test]
fn no_source_file_is_over_700_lines_before_its_tests() {
    let root = root();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "the source folders were found ({} files)", files.len());
    let mut long: Vec<String> = files
        .iter()
        .map(|f| (lines_before_tests(&fs::read_to_string(f).unwrap()), f))
        .filter(|(n, _)| *n > MAX_LINES)
        .map(|(n, f)| format!("{} ({n} lines)", f.strip_prefix(&root).unwrap().display()))
        .collect();
    long.sort();
    assert!(long.is_empty(), "over {MAX_LINES} lines before the tests: {}", long.join(", "));
}

#[test]
fn the_count_stops_at_the_unit_tests() {
    let text = "//! a\nfn f() {}\n\n#[cfg(test)]\nmod tests {\n}\n";
    assert_eq!(lines_before_tests(text), 3);
    assert_eq!(lines_before_tests("fn f() {}\n"), 1);
}
