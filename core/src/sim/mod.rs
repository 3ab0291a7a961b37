//! The simulated device: a `Device` with no GPU behind it, for tests, replays and the browser.

pub(crate) mod device_calls;
pub(crate) mod faults;
pub(crate) mod placement_abandoned;
pub(crate) mod sim_device;

pub use device_calls::DeviceCalls;
pub use faults::{FaultSite, INJECTED_FAULT_CODE};
pub use placement_abandoned::{AbandonReason, PlacementAbandoned};
pub use sim_device::*;
