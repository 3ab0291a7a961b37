//! The simulated device: a `Device` with no GPU behind it, for tests, replays and the browser.

pub(crate) mod sim_device;

pub use sim_device::*;
