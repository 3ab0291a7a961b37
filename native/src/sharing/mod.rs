//! How one device's core allocator is shared: by many threads ([`SharedAllocator`], the
//! allocator behind its locks), by many streams (with `lock_per_stream:True`, one core
//! allocator and lock per stream, [`stream_shards`], over one device, [`device_hub`]), and by
//! the whole process (the allocator per device that PyTorch's entry points use,
//! [`registry`]); [`private_pools`] are its CUDA graph pools. [`shard_lock`] is the lock each shard sits behind; [`held_peaks`] adds up
//! the shards' segments and reserved bytes for exact peaks.
//!
//! Invariant: imports among these modules go one way only, from the top of this list to the
//! bottom: `registry` → `shared_allocator` → `stream_shards` → `device_hub` → `held_peaks`,
//! and `stream_shards` → `shard_lock`; `private_pools` adds the private-pool calls to
//! `shared_allocator`'s type and imports from it and below. What two of them share (the boxed device type) lives in
//! the lower one. Outside this folder they use only `error`, `config_env` and `cuda`, never
//! `ffi`.

pub mod device_hub;
pub mod held_peaks;
pub mod private_pools;
pub mod registry;
pub mod shard_lock;
pub mod shared_allocator;
pub mod stream_shards;

pub use shared_allocator::SharedAllocator;
