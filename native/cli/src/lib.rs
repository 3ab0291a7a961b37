//! What the `cachalot` tool shares with the programs beside it (`examples/trace_ops.rs`,
//! `examples/thread_scaling.rs`): reading a trace file, plain or gzipped ([`trace_file`]),
//! and PyTorch's pickled snapshots ([`pickle_snapshot`], read by the core's own pickle machine,
//! `cachalot_core::trace::pickle`, which the browser uses too), within the core's `TraceLimits`;
//! a trace's operations kept out of memory while it is replayed ([`op_spool`]).
//!
//! Invariant: nothing here is linked into libcachalot.so; the native library knows no file
//! formats and no gzip, and this crate reaches it only through its public Rust API.
#![warn(missing_docs)]

pub mod event_spool;
pub mod gzip_members;
pub mod nesting_guard;
pub mod op_spool;
pub mod pickle_snapshot;
pub mod temp_store;
pub mod trace_file;
