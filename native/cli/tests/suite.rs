//! The tool's integration tests as one test binary: every file named below is a module of it. One
//! binary, not one per file, because each binary compiled again the generic code it uses (the
//! engine over the simulated device) and was linked on its own: the core's twenty took 150 s of the
//! test build's processor time, one takes 29 s. Files that count the heap with a global allocator
//! of their own stay binaries of their own. Run one file's tests with `cargo test -p cachalot-cli
//! --test suite fit::`.

mod cli;
mod csv_lines;
mod fit;
mod fuzz_doors;
mod insight;
mod plot_axes;
mod pytorch_snapshot;
mod report_layout;
mod spooled_replay;
mod untrusted;
