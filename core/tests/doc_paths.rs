//! Every path the docs and the code's comments name exists: a reader who follows
//! `core/src/engine/release.rs` from the README or a `//!` paragraph finds the file. Paths are
//! those under the repository's parts (core/, native/, wasm/, web-demo/, include/, traces/,
//! docs/, fuzz/), in every line of README.md and docs/*.md and in the comment lines of source
//! files; `name.*` and `name*` must match at least one file; a segment in capitals (`NAME`,
//! `TRACE`) is a placeholder. The dated log (docs/log/) keeps the paths of its day, and what a
//! build or a test run writes (`web-demo/pkg/`, `web-demo/test-results/`) is not in a clone.

use std::fs;
use std::path::{Path, PathBuf};

const PARTS: &[&str] = &["core/", "native/", "wasm/", "web-demo/", "include/", "traces/", "docs/", "fuzz/"];
const SKIP_DIRS: &[&str] = &["target", "node_modules", ".git", "log", "pkg", "test-results", "corpus", "seeds"];
const SOURCE_EXTS: &[&str] = &["rs", "py", "sh", "c", "h", "cpp", "js", "mjs", "toml"];
/// Folders that builds and test runs write, absent from a fresh clone.
const GENERATED: &[&str] = &["web-demo/pkg", "web-demo/test-results", "web-demo/node_modules"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !SKIP_DIRS.contains(&name.as_str()) {
                walk(&path, out);
            }
        } else {
            out.push(path);
        }
    }
}

/// The repository paths in `line`, each with whether it ends in a glob (`*` or `.*`).
fn paths_in(line: &str) -> Vec<(String, bool)> {
    let bytes = line.as_bytes();
    let mut found = Vec::new();
    for part in PARTS {
        let mut from = 0;
        while let Some(at) = line[from..].find(part) {
            let start = from + at;
            from = start + part.len();
            let before = if start == 0 { b' ' } else { bytes[start - 1] };
            if before.is_ascii_alphanumeric() || matches!(before, b'/' | b'.' | b'-' | b'_') {
                continue; // inside another path or word (e.g. `target/release/`, `native_core/`)
            }
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || b"./-_".contains(&bytes[end])) {
                end += 1;
            }
            let mut path = &line[start..end];
            let glob = line[end..].starts_with('*');
            while path.ends_with('.') || path.ends_with('-') {
                path = &path[..path.len() - 1]; // a sentence's full stop, or `name.` before `*`
            }
            found.push((path.to_string(), glob));
        }
    }
    found
}

fn is_generated(path: &str) -> bool {
    GENERATED.iter().any(|g| path.starts_with(g))
}

fn is_placeholder(path: &str) -> bool {
    path.split(['/', '.']).any(|s| s.len() > 1 && s.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
}

fn exists(root: &Path, path: &str, glob: bool) -> bool {
    if !glob {
        return root.join(path).exists();
    }
    let (dir, prefix) = path.rsplit_once('/').unwrap_or(("", path));
    fs::read_dir(root.join(dir))
        .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(prefix)))
        .unwrap_or(false)
}

#[test]
fn every_path_the_docs_and_comments_name_exists() {
    let root = root();
    let mut files = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut files);
    for part in ["core", "native", "wasm", "web-demo", "include", "fuzz", "Makefile"] {
        let p = root.join(part);
        if p.is_dir() {
            walk(&p, &mut files);
        } else {
            files.push(p);
        }
    }
    let mut missing = Vec::new();
    for file in files {
        let ext = file.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
        let is_doc = ext == "md";
        if !is_doc && !SOURCE_EXTS.contains(&ext.as_str()) && !file.ends_with("Makefile") {
            continue;
        }
        let Ok(text) = fs::read_to_string(&file) else { continue };
        for (n, line) in text.lines().enumerate() {
            let comment = ["//", "#", "/*", " * ", "\"\"\""].iter().any(|m| line.contains(m)) || !line.contains('"');
            if !is_doc && !comment {
                continue;
            }
            for (path, glob) in paths_in(line) {
                if !is_placeholder(&path) && !is_generated(&path) && !exists(&root, &path, glob) {
                    missing.push(format!("{}:{}: {path}", file.strip_prefix(&root).unwrap().display(), n + 1));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{} paths named but missing:\n{}", missing.len(), missing.join("\n"));
}

#[test]
fn the_checker_finds_paths_and_globs_and_skips_what_is_no_path() {
    assert_eq!(paths_in("see `core/src/engine/release.rs`."), vec![("core/src/engine/release.rs".into(), false)]);
    assert_eq!(paths_in("from `traces/recorded/two_stream.*`"), vec![("traces/recorded/two_stream".into(), true)]);
    assert!(paths_in("target/release/libcachalot.so and my_docs/x").is_empty());
    assert!(is_placeholder("traces/NAME.csv.gz"));
    assert!(is_generated("web-demo/pkg/traces/") && !is_generated("web-demo/tests/harness.mjs"));
    let root = root();
    assert!(exists(&root, "traces/recorded/two_stream", true));
    assert!(!exists(&root, "core/src/paging.rs", false), "a path that is gone is found missing");
}
