//! The replay engine: drives an allocator with a trace, and names what a pass measured.

mod figures;
pub(crate) mod replayer;

pub use figures::*;
pub use replayer::*;
