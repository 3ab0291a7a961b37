//! The replay engine: drives an allocator with a trace.

pub(crate) mod replayer;

pub use replayer::*;
