//! The allocator's calls on its private pools (`private_pool.rs`): making, using and
//! releasing a pool, routing allocations to one, PyTorch's malloc within a pool, and giving
//! unused pools' memory back as part of releasing the cache.
//!
//! Invariants: those of `private_pool.rs`; a failing call changes nothing but what PyTorch's
//! out-of-memory recovery releases.

use alloc::vec::Vec;

use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::base::size::{round_size, Pool};
use crate::data::block::NIL;
use crate::data::streams::RETIRED;
use crate::engine::allocator::Allocator;
use crate::engine::malloc_chain::check_request;
use crate::engine::private_pool::PrivatePool;

impl<D: Device> Allocator<D> {
    /// Makes a private pool, with one use, and returns its id: never 0, and given again only
    /// after every other id (about 4 billion pools later), to a pool made once the first is gone.
    pub fn create_pool(&mut self) -> u32 {
        // The decision memo records no pool's decisions: none may be replaying from here on.
        self.settle();
        let mut id = self.pools.last_id;
        loop {
            id = id.wrapping_add(1);
            if id != 0 && id != RETIRED && self.pools.get(id).is_none() {
                break;
            }
        }
        self.pools.last_id = id;
        self.pools.pools.push(PrivatePool { id, uses: 1, routed: None });
        self.heap.add_owner(id);
        id
    }

    /// Adds a use to pool `pool` (one that had none takes allocations again).
    pub fn retain_pool(&mut self, pool: u32) -> Result<(), AllocError> {
        let p = self.pools.get_mut(pool).ok_or(AllocError::UnknownPool { pool })?;
        p.uses = p.uses.saturating_add(1);
        Ok(())
    }

    /// Ends a use of pool `pool`. At no use left it takes no allocation, and the next release
    /// of cached memory gives its cached segments back; allocations still live in it stay
    /// valid, and their frees cache their blocks in it until then.
    pub fn release_pool(&mut self, pool: u32) -> Result<(), AllocError> {
        let p = self.pools.get_mut(pool).ok_or(AllocError::UnknownPool { pool })?;
        p.uses = p.uses.saturating_sub(1);
        if p.uses == 0 {
            self.pools.unroute(pool);
            self.forget_pool_if_done(pool);
        }
        Ok(())
    }

    /// Uses of pool `pool` not yet ended; `None` when no such pool exists (any more).
    pub fn pool_use_count(&self, pool: u32) -> Option<u32> {
        self.pools.get(pool).map(|p| p.uses)
    }

    /// Pool `pool` exists and has a use left, or the error that says which it lacks.
    fn pool_in_use(&self, pool: u32) -> Result<(), AllocError> {
        match self.pools.get(pool) {
            None => Err(AllocError::UnknownPool { pool }),
            Some(p) if p.uses == 0 => Err(AllocError::PoolNotInUse { pool }),
            Some(_) => Ok(()),
        }
    }

    /// Ids of the pools that exist, in the order they were made.
    pub fn pool_ids(&self) -> Vec<u32> {
        self.pools.iter().map(|p| p.id).collect()
    }

    /// Sends every later [`Allocator::malloc`] on `stream` to pool `pool`, until
    /// [`Allocator::end_allocate_to_pool`] or the pool's last use ends (a pool takes one
    /// stream at a time: routing it again moves it to the new stream).
    pub fn begin_allocate_to_pool(&mut self, pool: u32, stream: Stream) -> Result<(), AllocError> {
        self.pool_in_use(pool)?;
        let p = self.pools.get_mut(pool).ok_or(AllocError::UnknownPool { pool })?;
        if p.routed.replace(stream).is_none() {
            self.pools.routes += 1;
        }
        Ok(())
    }

    /// Ends the routing [`Allocator::begin_allocate_to_pool`] began.
    pub fn end_allocate_to_pool(&mut self, pool: u32) -> Result<(), AllocError> {
        self.pools.get(pool).ok_or(AllocError::UnknownPool { pool })?;
        self.pools.unroute(pool);
        Ok(())
    }

    /// Allocates `size` bytes for use on `stream` out of pool `pool`'s memory, by PyTorch's
    /// rules within the pool; out of memory as [`Allocator::malloc`].
    pub fn malloc_in_pool(&mut self, pool: u32, size: u64, stream: Stream) -> Result<u64, AllocError> {
        self.pool_in_use(pool)?;
        self.settle();
        self.pools.serving = pool;
        let served = self.malloc_served_in_pool(size, stream);
        self.pools.serving = 0;
        served
    }

    /// Returns the unsplit cached segments of pool `pool` to the device (after waiting for
    /// pending frees) once the pool has no use left, as PyTorch's `emptyCache` of a pool does
    /// (`torch.cuda.MemPool`'s destructor calls it after releasing the pool). A pool still in
    /// use keeps its cache: a CUDA graph replays into it.
    pub fn empty_pool_cache(&mut self, pool: u32) -> Result<(), AllocError> {
        let p = self.pools.get(pool).ok_or(AllocError::UnknownPool { pool })?;
        if p.uses > 0 {
            return Ok(());
        }
        self.settle();
        self.synchronize_and_free_events()?;
        self.release_pool_segments(pool)?;
        self.forget_pool_if_done(pool);
        Ok(())
    }

    /// [`Allocator::malloc_in_pool`]'s work, with `serving` set: PyTorch's `malloc` within a
    /// private pool. The steps are the allocator's own (`release.rs`), which take classic
    /// segments while a pool is served.
    fn malloc_served_in_pool(&mut self, size: u64, stream: Stream) -> Result<u64, AllocError> {
        check_request(size)?;
        if !self.events.is_empty() {
            self.process_events()?;
        }
        let rounded = round_size(size, &self.config.roundup_power2_divisions);
        let pool = Pool::for_size(rounded);
        let found = match self.take_free_block::<false>(pool, stream, rounded) {
            Some(id) => Some(id),
            None if self.beyond_reach(rounded) => None,
            None => match self.grow(pool, stream, rounded)? {
                Some(id) => Some(id),
                None => self.grow_after_release(pool, stream, rounded)?,
            },
        };
        match found {
            Some(id) => Ok(self.hand_out::<false, false>(id, rounded, size, NIL).0),
            None => Err(self.out_of_memory(size, rounded, stream)),
        }
    }

    /// Gives back the cached segments of every pool no longer in use, and forgets the pools
    /// that then hold none: part of PyTorch's release of every cached block.
    pub(crate) fn release_unused_pools(&mut self) -> Result<(), AllocError> {
        let unused: Vec<u32> = self.pools.iter().filter(|p| p.uses == 0).map(|p| p.id).collect();
        for id in unused {
            self.release_pool_segments(id)?;
            self.forget_pool_if_done(id);
        }
        Ok(())
    }

    /// Returns every unsplit cached segment of pool `id` to the device.
    fn release_pool_segments(&mut self, id: u32) -> Result<(), AllocError> {
        for pool in [Pool::Large, Pool::Small] {
            let cached = self.heap.owner_index(id, pool).ids();
            for block in cached {
                if !self.heap[block].is_split() {
                    self.release_block(block)?;
                }
            }
        }
        Ok(())
    }

    /// Forgets pool `id` once it has no use and holds no segment.
    fn forget_pool_if_done(&mut self, id: u32) {
        let unused = self.pools.get(id).is_some_and(|p| p.uses == 0);
        if unused && !self.heap.blocks().any(|(_, b)| self.heap.lanes().owner(b.stream_index) == id) {
            self.pools.pools.retain(|p| p.id != id);
            self.heap.remove_owner(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Allocator, Config, SimDevice};

    #[test]
    fn ids_wrap_past_the_reserved_ones_and_skip_those_in_use() {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
        let live = a.create_pool();
        a.pools.last_id = u32::MAX - 2;
        let ids: [u32; 3] = [a.create_pool(), a.create_pool(), a.create_pool()];
        assert_eq!(ids, [u32::MAX - 1, 2, 3], "0, u32::MAX (a retired lane's) and {live} (in use) skipped");
        assert_eq!(live, 1);
    }
}
