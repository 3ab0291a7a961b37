//! cachalot-core: the whole caching-allocator algorithm, with no I/O, no `std` and no
//! `unsafe`, so the same code runs natively over CUDA and in the browser over a simulated
//! device.
//!
//! Start with [`Allocator`]: `Allocator::new(SimDevice::new(capacity), Config::parse(..)?)`,
//! then `malloc`, `free`, `record_stream`, `empty_cache`, `stats`, `memory_summary`,
//! `snapshot`. [`trace`] reads allocation traces and [`replay`] drives an allocator with
//! them. Every effect on memory goes through the [`Device`] trait.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

mod addr_map;
mod allocator;
mod block;
mod cell_hints;
mod class_store;
pub mod config;
mod decision_memo;
pub mod device;
mod epochs;
mod error;
mod events;
mod expandable;
pub mod explain;
mod free_index;
pub mod history;
mod invariants;
pub mod layout;
mod layout_plan;
mod oom;
mod paging;
mod planned_range;
mod recall;
mod recurrence;
mod release;
pub mod replay;
pub mod sim;
pub mod size;
pub mod snapshot;
mod snapshot_device;
pub mod stats;
mod streams;
pub mod summary;
mod tally;
pub mod trace;
mod vm;
pub mod vrange;

pub use allocator::Allocator;
pub use config::{Config, ConfigError, Policy};
pub use decision_memo::MemoCounts;
pub use device::{Device, DeviceError, Event, HeldChange, PhysHandle, Stream};
pub use error::{AllocError, FreeSpot, OomReport, SegmentUse};
pub use explain::Decision;
pub use replay::{ReplayOutcome, Replayer};
pub use sim::SimDevice;
pub use stats::DeviceStats;
pub use trace::{parse_device_trace, parse_each_device, parse_trace, Trace, TraceError, TraceErrorKind, TraceOp};
