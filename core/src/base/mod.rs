//! The base types every part uses: sizes and rounding, the `Device` trait, the config, errors.

pub mod config;
pub mod device;
pub(crate) mod error;
pub(crate) mod oom_report;
pub mod pytorch_version;
pub mod size;
pub(crate) mod unsimulated_keys;
