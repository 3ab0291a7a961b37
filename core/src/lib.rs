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

// The parts, and the one way their dependencies run (checked by `tests/layers.rs`): a part
// uses only the parts listed before it, never one after, and no two files import each other.
//
//   base    sizes and rounding, the Device trait, the config, errors
//   data    the block slab, the address map, the free index, streams, events      (base)
//   trace   trace readers                                                          (base)
//   sim     the simulated device                                                   (base, trace)
//   report  statistics, summary, snapshot, history, explain, layout types          (base, data)
//   engine  the allocator: PyTorch's rules; paged/ cachalot's policy; memo/        (all above)
//   replay  drives an allocator with a trace                                       (all above)
mod base;
mod data;
mod engine;
pub mod replay;
mod report;
pub mod sim;
pub mod trace;

pub use base::{config, device, pytorch_version, size};
pub use engine::vrange;
pub use report::{explain, history, layout, snapshot, stats, summary};

pub use base::config::{Config, ConfigError, Policy};
pub use base::device::{Device, DeviceError, Event, HeldChange, PhysHandle, Stream};
pub use base::error::{AllocError, FreeSpot, OomReport, SegmentUse};
pub use base::pytorch_version::PyTorchVersion;
pub use engine::allocator::Allocator;
pub use engine::memo::decision_memo::MemoCounts;
pub use engine::paged::paged_state::PlanCounts;
pub use replay::{PassFigures, ReplayOutcome, Replayer};
pub use report::explain::Decision;
pub use report::stats::DeviceStats;
pub use sim::SimDevice;
pub use trace::{
    parse_device_trace, parse_each_device, parse_snapshot_value, parse_trace, Position, Trace, TraceError,
    TraceErrorKind, TraceOp,
};
