//! The replay engine: drives an allocator with a trace, names what a pass measured, and
//! finds the smallest simulated device a trace fits on (`fit`).

mod figures;
pub mod fit;
pub(crate) mod replayer;

pub use figures::*;
pub use replayer::*;
