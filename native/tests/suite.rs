//! The native crate's integration tests as one test binary: every file named below is a module of
//! it, for the reason `core/tests/suite.rs` gives. The tests that count the heap with a global
//! allocator of their own stay binaries of their own. Run one file's tests with `cargo test -p
//! cachalot --test suite private_pools::`.

mod fuzz_abi;
mod lock_per_stream;
mod private_pools;
mod stat_fields;
