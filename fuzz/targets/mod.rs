//! The fuzz targets' logic, as plain functions of a byte string: each `run` panics on a crash
//! (a panic inside cachalot-core, or a broken check) and returns normally otherwise. Both the
//! libFuzzer binaries in `fuzz_targets/` and `core/tests/fuzz_corpus.rs` (which replays the
//! committed corpora on stable Rust) include this folder with `#[path]`, so a corpus input
//! means the same thing to both.
//!
//! Targets: `config` (the config-string parser), `trace` (the CSV and JSON trace parser),
//! `ops` (operation sequences driving an allocator under every policy, with injected device
//! faults, checked after every step against the shadow model `core/tests/property.rs` uses
//! too, `model`, which lives with the core's tests) and `memo` (the decision memo on against
//! off, over a loop of such operations: every answer, statistic, device call and block alike).

pub mod bytes;
pub mod config;
pub mod memo;
#[path = "../../core/tests/common/model.rs"]
pub mod model;
pub mod ops;
pub mod scenario;
pub mod trace;
