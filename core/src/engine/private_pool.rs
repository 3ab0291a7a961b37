//! Private pools: memory set apart for one user, as PyTorch's CUDA graphs, torch.compile's
//! CUDA graph trees and `torch.cuda.MemPool` need. A graph replays into the addresses its
//! capture was given, so a pool's blocks are reused only by allocations made into it, and its
//! memory stays reserved, cached or not, while the pool is in use.
//!
//! A pool's blocks are ordinary blocks of the allocator: one slab, one address table and one
//! set of statistics, as PyTorch counts a pool's memory in the device's statistics. What sets
//! them apart is their lane (`streams.rs`), a (stream, pool) pair whose free blocks sit in the
//! pool's own free index (in the block heap, `block_heap.rs`). A pool's segments are classic segments under either policy, as
//! PyTorch's private pools take no expandable segments: a checkpoint puts blocks back at their
//! addresses (`placement.rs`), and a graph's addresses must not be unmapped under it.
//!
//! An allocation goes to a pool when asked for in it ([`Allocator::malloc_in_pool`]), or when
//! it is made on the stream the pool is routed from ([`Allocator::begin_allocate_to_pool`]);
//! inside the pool PyTorch's rules decide (best fit on the stream, the split rule, a new
//! segment, the pool's oversize segments released, every cached segment released and retry).
//! A free finds its pool from its block.
//!
//! Lifetime, as PyTorch's: a pool is made with one use; [`Allocator::retain_pool`] adds one
//! and [`Allocator::release_pool`] ends one. At no use it takes no allocation, and the next
//! release of cached memory (`empty_cache`, or a request the device cannot serve otherwise)
//! gives its unsplit cached segments back; it is forgotten once it holds no segment.
//!
//! This file holds the pools' state; `pooling.rs` the allocator's calls on them.
//!
//! Invariants: a block's pool is its lane's, and every pool a lane names exists while a block
//! is in that lane; a pool's free index holds exactly its free blocks; a pool is routed to
//! only while it has a use; no two pools share an id; `serving` is 0 but within
//! [`Allocator::malloc_in_pool`].

use alloc::vec::Vec;

use crate::base::device::Stream;

/// One private pool.
#[derive(Clone, Debug)]
pub(crate) struct PrivatePool {
    pub(crate) id: u32,
    /// Uses not yet ended: the pool takes allocations while above 0.
    pub(crate) uses: u32,
    /// The stream whose allocations go to this pool, while one does.
    pub(crate) routed: Option<Stream>,
}

/// Every private pool of an allocator.
#[derive(Clone, Debug, Default)]
pub struct PrivatePools {
    pub(crate) pools: Vec<PrivatePool>,
    pub(crate) last_id: u32,
    /// Pools routed to now: while 0, `malloc` looks no further.
    pub(crate) routes: u32,
    /// The pool the malloc under way serves; 0 for the allocator's own memory.
    pub(crate) serving: u32,
}

impl PrivatePools {
    /// True when no pool exists.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// The pool `malloc` on `stream` goes to now.
    #[inline(always)]
    pub(crate) fn route(&self, stream: Stream) -> Option<u32> {
        if self.routes == 0 {
            return None;
        }
        self.pools.iter().find(|p| p.routed == Some(stream)).map(|p| p.id)
    }

    pub(crate) fn get(&self, id: u32) -> Option<&PrivatePool> {
        self.pools.iter().find(|p| p.id == id)
    }

    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut PrivatePool> {
        self.pools.iter_mut().find(|p| p.id == id)
    }

    /// Every pool, for the invariant checker.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &PrivatePool> {
        self.pools.iter()
    }

    /// Stops routing to pool `id`.
    pub(crate) fn unroute(&mut self, id: u32) {
        if let Some(p) = self.get_mut(id) {
            if p.routed.take().is_some() {
                self.routes -= 1;
            }
        }
    }
}
