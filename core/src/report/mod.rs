//! What the allocator reports: statistics, `memory_summary`, snapshots, the memory history,
//! explanations of decisions, the browser's memory map. Types and formatting only; reading them
//! from an allocator is the engine's (`engine/*_reader.rs`).

pub mod explain;
pub mod history;
pub mod layout;
pub mod snapshot;
pub(crate) mod stat;
pub mod stat_fields;
pub mod stats;
pub mod summary;
pub(crate) mod tally;
