//! Allocation traces read from text (RAPIDS RMM CSV, PyTorch snapshot JSON) into operations on
//! slots.

pub(crate) mod position;
pub(crate) mod reader;
pub(crate) mod snapshot_device;
pub(crate) mod trace_error;

pub use reader::*;
