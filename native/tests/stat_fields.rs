//! The statistics' fields are spelled out in one list, the core's `STAT_FIELDS`
//! (`core/src/report/stat_fields.rs`); this test fails when a spelling elsewhere drifts from
//! it: the C struct `cachalot_stats` in the header cbindgen writes from `native/src/ffi/stats.rs`
//! (names, C types and order; `make header-check` ties the header to the Rust struct), the
//! Python module's `STATS_FIELDS` and `STATS_VERSION` (`native/python/cachalot_torch.py`), and
//! the PyTorch extension's `add()`, which copies each field into PyTorch's `DeviceStats`
//! (`native/torch/cachalot_allocator.cpp`). The files are read as text, so no compiler for C++
//! or Python is needed.

use std::mem::size_of;
use std::path::Path;

use cachalot::ffi::stats::{Stats, CACHALOT_STATS_VERSION};
use cachalot_core::stats::{StatKind, STAT_FIELDS};

fn source(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The core's list as (name, kind name) pairs.
fn listed() -> Vec<(String, String)> {
    STAT_FIELDS.iter().map(|f| (f.name.to_string(), f.kind.name().to_string())).collect()
}

/// The C type a field of each kind has in `cachalot_stats`.
fn c_type(kind: StatKind) -> &'static str {
    match kind {
        StatKind::PerPool => "cachalot_stat_array",
        StatKind::Single => "cachalot_stat",
        StatKind::Count => "uint64_t",
        StatKind::OptionalCount | StatKind::Setting => "int64_t",
    }
}

/// The bytes a field of each kind takes in `cachalot_stats`.
fn c_size(kind: StatKind) -> usize {
    match kind {
        StatKind::PerPool => 3 * 4 * 8,
        StatKind::Single => 4 * 8,
        StatKind::Count | StatKind::OptionalCount | StatKind::Setting => 8,
    }
}

/// The (type, name) declarations of `typedef struct { ... } cachalot_stats;`, comments left out.
fn header_fields(header: &str) -> Vec<(String, String)> {
    let end = header.find("} cachalot_stats;").expect("the header declares cachalot_stats");
    let start = header[..end].rfind("typedef struct {").expect("cachalot_stats is a typedef struct");
    header[start + "typedef struct {".len()..end]
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("/*") && !line.starts_with('*'))
        .map(|line| {
            let declaration = line.strip_suffix(';').unwrap_or_else(|| panic!("not a field: {line:?}"));
            let (ty, name) = declaration.rsplit_once(' ').unwrap_or_else(|| panic!("not a field: {line:?}"));
            (ty.trim().to_string(), name.to_string())
        })
        .collect()
}

/// The strings between double quotes on one line.
fn quoted(line: &str) -> Vec<String> {
    line.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

/// The Python module's `STATS_FIELDS` as (name, kind) pairs.
fn python_fields(module: &str) -> Vec<(String, String)> {
    let start = module.find("\nSTATS_FIELDS = (\n").expect("cachalot_torch.py defines STATS_FIELDS");
    let body = &module[start + "\nSTATS_FIELDS = (\n".len()..];
    let body = &body[..body.find("\n)").expect("STATS_FIELDS ends with a line ')'")];
    body.lines()
        .map(|line| match quoted(line).as_slice() {
            [name, kind] => (name.clone(), kind.clone()),
            _ => panic!("STATS_FIELDS: not a (name, kind) line: {line:?}"),
        })
        .collect()
}

/// The name after `prefix` (`d.` or `s.`) in `text`, up to the first character that cannot
/// be in a name.
fn name_after(text: &str, prefix: &str) -> Option<String> {
    let at = text.find(prefix)? + prefix.len();
    Some(text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect())
}

/// What the extension's `add()` copies: (PyTorch's field, cachalot's field, the kinds the way
/// of copying fits).
fn extension_copies(extension: &str) -> Vec<(String, String, Vec<&'static str>)> {
    let signature = "static void add(c10::CachingDeviceAllocator::DeviceStats& d, const cachalot_stats& s) {";
    let start = extension.find(signature).expect("cachalot_allocator.cpp has add(DeviceStats&, cachalot_stats)");
    let body = &extension[start + signature.len()..];
    let body = &body[..body.find("\n  }\n").expect("add() ends with a line '  }'")];
    body.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with("//"))
        .map(|line| {
            let kinds = if line.starts_with("add_array(") {
                vec!["per_pool"]
            } else if line.starts_with("add_stat(") {
                vec!["single"]
            } else if line.starts_with("d.") && line.contains("+=") {
                vec!["count", "optional_count"]
            } else {
                panic!("add(): a line that copies no statistic: {line:?}")
            };
            let theirs = name_after(line, "d.").expect("a PyTorch field");
            let ours = name_after(line, "s.").unwrap_or_else(|| panic!("add(): reads no cachalot field: {line:?}"));
            (theirs, ours, kinds)
        })
        .collect()
}

#[test]
fn the_header_lays_out_the_listed_fields_in_order_with_their_c_types() {
    let fields = header_fields(&source("include/cachalot.h"));
    let (head, rest) = fields.split_at(2);
    assert_eq!(
        head,
        [("uint32_t".to_string(), "struct_size".to_string()), ("uint32_t".to_string(), "version".to_string())]
    );
    let expected: Vec<(String, String)> =
        STAT_FIELDS.iter().map(|f| (c_type(f.kind).to_string(), f.name.to_string())).collect();
    assert_eq!(rest, expected, "cachalot_stats in include/cachalot.h differs from STAT_FIELDS");
}

#[test]
fn the_rust_struct_has_the_size_the_list_gives() {
    let listed: usize = STAT_FIELDS.iter().map(|f| c_size(f.kind)).sum();
    assert_eq!(size_of::<Stats>(), 8 + listed, "native/src/ffi/stats.rs's Stats and STAT_FIELDS differ");
}

#[test]
fn the_python_module_lists_the_same_fields_and_reads_this_layout_version() {
    let module = source("native/python/cachalot_torch.py");
    assert_eq!(python_fields(&module), listed(), "STATS_FIELDS in cachalot_torch.py differs from STAT_FIELDS");
    let version = format!("\nSTATS_VERSION = {CACHALOT_STATS_VERSION}\n");
    assert!(module.contains(&version), "cachalot_torch.py should read layout version {CACHALOT_STATS_VERSION}");
    let header = source("include/cachalot.h");
    assert!(header.contains(&format!("#define CACHALOT_STATS_VERSION {CACHALOT_STATS_VERSION}\n")));
}

#[test]
fn the_extension_copies_every_figure_into_pytorchs_field_of_the_same_name() {
    let extension = source("native/torch/cachalot_allocator.cpp");
    let copies = extension_copies(&extension);
    for (theirs, ours, _) in &copies {
        assert_eq!(theirs, ours, "add() copies cachalot's {ours} into PyTorch's {theirs}");
    }
    for field in STAT_FIELDS.iter().filter(|f| f.kind != StatKind::Setting) {
        let copied: Vec<_> = copies.iter().filter(|(_, ours, _)| ours == field.name).collect();
        assert_eq!(copied.len(), 1, "add() should copy {} once", field.name);
        assert!(copied[0].2.contains(&field.kind.name()), "add() copies {} as another kind", field.name);
    }
    for (_, ours, _) in &copies {
        assert!(STAT_FIELDS.iter().any(|f| f.name == ours), "add() reads {ours}, which STAT_FIELDS lacks");
    }
    for field in STAT_FIELDS.iter().filter(|f| f.kind == StatKind::Setting) {
        let assignment = format!("d.{0} = s.{0};", field.name);
        assert!(extension.contains(&assignment), "the extension should set {assignment}");
    }
}

#[test]
fn the_readers_of_the_text_see_a_drift() {
    // The checks above can fail: a field renamed, reordered or left out is seen.
    let header = source("include/cachalot.h");
    let renamed = header.replacen("uint64_t num_ooms;", "uint64_t num_oom;", 1);
    assert_ne!(header_fields(&renamed)[2..].iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>(), {
        STAT_FIELDS.iter().map(|f| f.name).collect::<Vec<_>>()
    });
    let module = source("native/python/cachalot_torch.py");
    let dropped = module.replacen("    (\"num_ooms\", \"count\"),\n", "", 1);
    assert_eq!(python_fields(&dropped).len(), STAT_FIELDS.len() - 1);
    let extension = source("native/torch/cachalot_allocator.cpp");
    let missing = extension.replacen("add_array(d.segment, s.segment);", "", 1);
    assert!(!extension_copies(&missing).iter().any(|(_, ours, _)| ours == "segment"));
}
