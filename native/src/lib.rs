//! cachalot's native library: the core allocator over real CUDA memory, made thread-safe,
//! behind a C ABI (`include/cachalot.h`) and PyTorch's pluggable-allocator entry points.
//!
//! Layers, each in its own module: [`cuda`] implements the core's `Device` with the CUDA
//! driver API (loaded at run time, so machines without CUDA build and test everything else);
//! [`sharing`] shares it: [`SharedAllocator`] puts one core allocator behind a lock so many
//! threads can call it (or, with `lock_per_stream:True`, one per stream, [`stream_shards`],
//! over a [`device_hub`]), and [`registry`] keeps the process-wide allocator per device that
//! PyTorch's entry points use; [`ffi`] is the C ABI, where every call is a panic boundary
//! that turns errors into fixed status codes. Between layers imports go downwards only:
//! `ffi` → `sharing` → `cuda` → `error` (`config_env` sits beside `error`). Invariant: no
//! panic and no Rust error crosses the C ABI.
#![warn(missing_docs, unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks, clippy::or_fun_call)]

pub mod config_env;
pub mod cuda;
pub mod error;
pub mod ffi;
pub mod sharing;

// The sharing modules' paths from before they moved into `sharing/` (`cachalot::stream_shards`
// and the like), which programs and tests outside the crate use.
pub use sharing::{device_hub, held_peaks, registry, shard_lock, shared_allocator, stream_shards};

pub use error::Error;
pub use sharing::SharedAllocator;
