//! The native crate's integration tests as one test binary: every file named below is a module of
//! it. One binary, not one per file, because each binary compiled again the generic code it uses
//! (the engine over the simulated device) and was linked on its own: the core's twenty took 150 s
//! of the test build's processor time, one takes 29 s. Files that count the heap with a global
//! allocator of their own stay binaries of their own. Run one file's tests with `cargo test -p
//! cachalot --test suite private_pools::`.

mod fuzz_abi;
mod lock_per_stream;
mod private_pools;
mod stat_fields;
