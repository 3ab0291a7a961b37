//! The core's parts and the one way their dependencies run, as `src/lib.rs` states them:
//! every `crate::` or `super::` path in a file's code (its tests aside) names a part the file's
//! own part may use, and no chain of imports between files comes back to where it started. The
//! engine's block heap (`engine/heap`) sits below the rest of the engine: it may use the data
//! structures, the statistics and the base, and nothing of the engine above it, so no call
//! from the heap reaches the allocator, the policies or the memo.
//!
//! The check reads the source, so it holds for code that compiles either way; its own test
//! (`a_violation_is_found`) shows that it finds a part used against the rule and a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each part and the parts its files may import (a part may always import itself).
const RULE: [(&str, &[&str]); 10] = [
    ("base", &[]),
    ("data", &["base"]),
    ("trace", &["base"]),
    ("sim", &["base", "trace"]),
    ("report", &["base", "data"]),
    // The block heap: blocks, free index, live map, stream lanes and statistics. Nothing of
    // the engine above it.
    ("engine/heap", &["base", "data", "report"]),
    ("engine", &["base", "data", "report"]),
    // cachalot's policy and the memo are the engine's: they may use its root (the allocator)
    // and its heap, never each other.
    ("engine/paged", &["base", "data", "report", "engine", "engine/heap"]),
    ("engine/memo", &["base", "data", "report", "engine", "engine/heap"]),
    // The fit search replays on simulated devices of chosen sizes.
    ("replay", &["base", "data", "report", "engine", "trace", "sim"]),
];

/// The part a file belongs to: its folder under `src/` (`engine/paged` for a file there).
fn part_of(file: &str) -> String {
    let folder = file.rsplit_once('/').map_or("", |(dir, _)| dir);
    folder.to_string()
}

/// May a file of `from` import from `to`?
fn allowed(from: &str, to: &str) -> bool {
    if from == to || to.is_empty() {
        return true;
    }
    // The engine's root may use its own sub-parts (the allocator holds their state).
    if from == "engine" && to.starts_with("engine/") {
        return true;
    }
    RULE.iter().find(|(p, _)| *p == from).is_some_and(|(_, ok)| ok.contains(&to))
}

/// A file's code without its tests and comments.
fn code(text: &str) -> String {
    let body = text.split("#[cfg(test)]").next().unwrap_or("");
    body.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The module path (`engine::heap::block_heap`) of a file (`engine/heap/block_heap.rs`).
fn module_of(file: &str) -> Vec<String> {
    let stem = file.strip_suffix("mod.rs").map_or(file.trim_end_matches(".rs"), |d| d.trim_end_matches('/'));
    stem.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// The files (relative to `src/`, `a/b.rs` or `a/mod.rs`) that `crate::` and `super::` paths in
/// `code` (the code of `file`) name, resolved against the files that exist; a grouped
/// `use crate::{..}` is named as it is.
fn imports(file: &str, code: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    // (where the path starts, where its names start, the module its names are relative to)
    let mut paths: Vec<(usize, usize, Vec<String>)> =
        code.match_indices("crate::").map(|(i, _)| (i, i + "crate::".len(), Vec::new())).collect();
    // `super::super::x` from `a/b/c.rs` is `crate::a::x`; a `super::` run is read once, whole.
    for (i, _) in code.match_indices("super::") {
        if code[..i].ends_with("super::") {
            continue;
        }
        let mut base = module_of(file);
        let mut at = i;
        while code[at..].starts_with("super::") {
            base.pop();
            at += "super::".len();
        }
        paths.push((i, at, base));
    }
    for (start, at, base) in paths {
        if code[..start].ends_with("in ") {
            continue; // `pub(in crate::engine)` is a visibility, not an import
        }
        let rest = &code[at..];
        if rest.starts_with('{') {
            out.insert("{grouped}".to_string());
            continue;
        }
        let tail = rest.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).next().unwrap_or("");
        let path: Vec<&str> =
            base.iter().map(String::as_str).chain(tail.split("::")).filter(|s| !s.is_empty()).collect();
        // The longest prefix of the path that is a module file.
        for n in (1..=path.len()).rev() {
            let stem = path[..n].join("/");
            let hit = [format!("{stem}.rs"), format!("{stem}/mod.rs")].into_iter().find(|f| files.contains(f));
            if let Some(f) = hit {
                out.insert(f);
                break;
            }
        }
    }
    out
}

/// Every violation of the rule, and every import cycle, in the files given as (path, text).
fn violations(sources: &BTreeMap<String, String>) -> Vec<String> {
    let files: BTreeSet<String> = sources.keys().cloned().collect();
    let mut graph: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut found = Vec::new();
    for (file, text) in sources {
        if file == "lib.rs" || file.ends_with("mod.rs") {
            continue; // declarations and re-exports of the part's own files
        }
        let from = part_of(file);
        if !RULE.iter().any(|(p, _)| *p == from) {
            found.push(format!("{file}: in no part of the rule"));
        }
        let deps = imports(file, &code(text), &files);
        for dep in &deps {
            if dep == "{grouped}" {
                found.push(format!("{file}: a grouped `use crate::{{..}}` (name each path)"));
            } else if dep == "lib.rs" || dep.ends_with("mod.rs") {
                found.push(format!("{file}: imports {dep}, a part's re-export, not the file"));
            } else if !allowed(&from, &part_of(dep)) {
                found.push(format!("{file} ({from}) imports {dep} ({})", part_of(dep)));
            }
        }
        graph.insert(file, deps.into_iter().filter(|d| d != file).collect());
    }
    found.extend(cycles(&graph));
    found
}

/// One message for each import cycle found by a depth-first walk.
fn cycles(graph: &BTreeMap<&str, BTreeSet<String>>) -> Vec<String> {
    fn walk<'a>(
        at: &'a str,
        graph: &'a BTreeMap<&str, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
        found: &mut Vec<String>,
    ) {
        if let Some(i) = path.iter().position(|p| *p == at) {
            found.push(format!("import cycle: {} -> {at}", path[i..].join(" -> ")));
            return;
        }
        if !done.insert(at) {
            return;
        }
        path.push(at);
        for next in graph.get(at).into_iter().flatten() {
            walk(next, graph, path, done, found);
        }
        path.pop();
    }
    let (mut done, mut found) = (BTreeSet::new(), Vec::new());
    for start in graph.keys() {
        walk(start, graph, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

fn read_tree(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path: PathBuf = entry.unwrap().path();
        if path.is_dir() {
            read_tree(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            out.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
}

#[test]
fn the_core_s_parts_depend_one_way_without_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = BTreeMap::new();
    read_tree(&root, &root, &mut sources);
    assert!(sources.len() > 30, "read {} files", sources.len());
    let found = violations(&sources);
    assert!(found.is_empty(), "{} violation(s):\n{}", found.len(), found.join("\n"));
}

#[test]
fn a_violation_is_found() {
    let sources: BTreeMap<String, String> = [
        ("base/size.rs", "use crate::data::block::Block;\n"),
        ("data/block.rs", "use crate::base::size::Pool; // fine\n#[cfg(test)]\nuse crate::engine::x::Y;"),
        ("engine/a.rs", "use crate::engine::b::B;\npub(in crate::engine) struct A;\n"),
        ("engine/b.rs", "fn f() { crate::engine::a::g() }\n"),
        ("engine/memo/m.rs", "use crate::engine::paged::p::P;\n"),
        ("engine/paged/p.rs", "use crate::{base::size::Pool};\n"),
        ("engine/allocator.rs", "pub struct Allocator;\n"),
        ("engine/heap/h.rs", "use crate::data::block::Block;\nfn f() { crate::engine::allocator::Allocator::g() }\n"),
        ("engine/heap/s.rs", "use super::super::allocator::Allocator;\nuse super::h::H;\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let found = violations(&sources);
    assert!(found.contains(&"base/size.rs (base) imports data/block.rs (data)".to_string()), "{found:?}");
    assert!(found.contains(&"engine/memo/m.rs (engine/memo) imports engine/paged/p.rs (engine/paged)".to_string()));
    assert!(found.iter().any(|f| f.starts_with("engine/paged/p.rs: a grouped")), "{found:?}");
    assert!(
        found.iter().any(|f| f.starts_with("import cycle: engine/a.rs -> engine/b.rs -> engine/a.rs")),
        "{found:?}"
    );
    // base/size.rs and data/block.rs import each other, so the wrong-way import is a cycle too.
    assert!(found.iter().any(|f| f.starts_with("import cycle: base/size.rs -> data/block.rs")), "{found:?}");
    assert!(!found.iter().any(|f| f.starts_with("data/block.rs")), "tests and comments are not code: {found:?}");
    // The heap may not call up into the engine, by a `crate::` path or a `super::` one.
    let heap_up = "engine/heap/h.rs (engine/heap) imports engine/allocator.rs (engine)";
    assert!(found.contains(&heap_up.to_string()), "{found:?}");
    let heap_super = "engine/heap/s.rs (engine/heap) imports engine/allocator.rs (engine)";
    assert!(found.contains(&heap_super.to_string()), "{found:?}");
    assert_eq!(found.len(), 7, "{found:?}");
}
