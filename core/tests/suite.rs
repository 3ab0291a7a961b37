//! The core's integration tests as one test binary: every file named below is a module of it, and
//! `common/` holds what they share. One binary, not one per file, because each binary compiled
//! again the generic code it uses (the engine over the simulated device) and was linked on its own:
//! the core's twenty took 150 s of the test build's processor time, one takes 29 s. Files that
//! count the heap with a global allocator of their own stay binaries of their own. Run one file's
//! tests with `cargo test -p cachalot-core --test suite policy::`.

mod beyond_device;
mod cache_info;
mod captures;
mod common;
mod decision_memo;
mod doc_paths;
mod faults;
mod file_length;
// The fuzz targets bring the shadow model in by its path too, as the fuzz crate needs them to.
#[allow(clippy::duplicate_mod)]
mod fuzz_corpus;
mod layers;
mod learned_layout;
mod memo_pressure;
mod parity;
mod placement;
mod policy;
mod private_pools;
mod property;
mod pytorch_versions;
mod recorded;
mod regrowth;
mod rules;
mod run_figures;
