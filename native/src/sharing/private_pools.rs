//! A device's private pools (CUDA graphs, torch.compile's CUDA graph trees,
//! `torch.cuda.MemPool`), held by the core allocator (`cachalot_core`'s `private_pool.rs`),
//! and the CUDA graph captures underway (`capture.rs` there), which go with them:
//! each call takes the allocator's one lock, as malloc does, and a free needs nothing more
//! than a plain free, since the core finds a block's pool from the block.
//!
//! Invariant: pools live in the allocator of the device's one lock; with `lock_per_stream:True`
//! a graph's streams would land in different shards, so every pool call is refused there,
//! naming the key, and nothing changes.

use cachalot_core::{AllocError, Allocator, Stream};

use super::device_hub::BoxedDevice;
use super::shared_allocator::SharedAllocator;
use super::stream_shards::lock;
use crate::error::Error;

impl SharedAllocator {
    /// Runs `f` on the allocator that holds the private pools.
    fn with_pools<T>(&self, f: impl FnOnce(&mut Allocator<BoxedDevice>) -> Result<T, AllocError>) -> Result<T, Error> {
        if self.shards.per_stream() {
            return Err(Error::InvalidArgument(
                "private pools need the device's allocator behind one lock: drop lock_per_stream:True".into(),
            ));
        }
        let (_, shard) = self.shards.for_stream(0)?;
        Ok(f(&mut *lock(shard)?)?)
    }

    /// Makes a private pool with one use; its id.
    pub fn create_pool(&self) -> Result<u32, Error> {
        self.with_pools(|a| Ok(a.create_pool()))
    }

    /// Adds a use to pool `pool`.
    pub fn retain_pool(&self, pool: u32) -> Result<(), Error> {
        self.with_pools(|a| a.retain_pool(pool))
    }

    /// Ends a use of pool `pool`.
    pub fn release_pool(&self, pool: u32) -> Result<(), Error> {
        self.with_pools(|a| a.release_pool(pool))
    }

    /// Uses of pool `pool` not yet ended.
    pub fn pool_use_count(&self, pool: u32) -> Result<u32, Error> {
        self.with_pools(|a| a.pool_use_count(pool).ok_or(AllocError::UnknownPool { pool }))
    }

    /// Routes later mallocs on `stream` to pool `pool`.
    pub fn begin_allocate_to_pool(&self, pool: u32, stream: Stream) -> Result<(), Error> {
        self.with_pools(|a| a.begin_allocate_to_pool(pool, stream))
    }

    /// Ends the routing to pool `pool`.
    pub fn end_allocate_to_pool(&self, pool: u32) -> Result<(), Error> {
        self.with_pools(|a| a.end_allocate_to_pool(pool))
    }

    /// Allocates `size` bytes on `stream` out of pool `pool`.
    pub fn malloc_in_pool(&self, pool: u32, size: u64, stream: Stream) -> Result<u64, Error> {
        self.with_pools(|a| a.malloc_in_pool(pool, size, stream))
    }

    /// Returns pool `pool`'s unsplit cached segments to the device once it has no use left.
    pub fn empty_pool_cache(&self, pool: u32) -> Result<(), Error> {
        self.with_pools(|a| a.empty_pool_cache(pool))
    }

    /// A CUDA graph capture begins: no event is processed or recorded until it ends.
    pub fn begin_capture(&self) -> Result<(), Error> {
        self.with_pools(|a| a.begin_capture())
    }

    /// A capture ends; the last one records the events deferred during the captures.
    pub fn end_capture(&self) -> Result<(), Error> {
        self.with_pools(|a| a.end_capture())
    }

    /// Allocates exactly the `size` bytes at `addr` out of a cached block of pool `pool`.
    pub fn allocate_in_pool_at(&self, pool: u32, addr: u64, size: u64, requested: u64) -> Result<u64, Error> {
        self.with_pools(|a| a.allocate_in_pool_at(pool, addr, size, requested))
    }
}
