//! The tool's integration tests as one test binary: every file named below is a module of it, for
//! the reason `core/tests/suite.rs` gives. The tests that count the heap with a global allocator of
//! their own stay binaries of their own. Run one file's tests with `cargo test -p cachalot-cli
//! --test suite fit::`.

mod cli;
mod csv_lines;
mod fit;
mod fuzz_doors;
mod insight;
mod plot_axes;
mod pytorch_snapshot;
mod report_layout;
mod scratch;
mod spooled_replay;
mod untrusted;
