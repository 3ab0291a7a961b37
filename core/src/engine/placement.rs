//! Placing an allocation at a given address: the block of `size` bytes at `addr`, cut out of the
//! cached free block that holds it, as it was when a checkpoint was taken.
//!
//! PyTorch's CUDA graph trees (torch.compile's `mode="reduce-overhead"`) checkpoint a private
//! pool's live allocations and later set the pool back to them: every allocation then live is
//! freed and each checkpointed one is allocated again at its own address, because recorded
//! graphs replay into those addresses. Rounding, pools and the split rule do not decide here;
//! the checkpoint does, so the block is split off at exactly its old bounds.
//!
//! Invariants: on success the allocator's invariants hold (the free remainders before and after
//! the block are cached, the split statistics recounted), and the block is live and counted as
//! an allocation of `requested` bytes; on error nothing changed.

use crate::base::device::Device;
use crate::base::error::AllocError;
use crate::base::size::{Pool, MIN_BLOCK};
use crate::data::block::{Block, BlockState, NIL};
use crate::engine::allocator::Allocator;
use crate::engine::vrange::VmMode;

impl<D: Device> Allocator<D> {
    /// Allocates exactly the `size` bytes at `addr`, asked for as `requested` bytes, out of the
    /// cached free block that holds them (waiting for pending frees first if none does). The
    /// block keeps the stream of the segment it lies in. Classic segments only: under virtual
    /// memory the answer is [`AllocError::NotCached`].
    pub fn allocate_at(&mut self, addr: u64, size: u64, requested: u64) -> Result<u64, AllocError> {
        self.place(0, addr, size, requested)
    }

    /// [`Allocator::allocate_at`] in private pool `pool`: the range must lie in a cached block
    /// of that pool, as it does when the pool is set back to its own checkpoint.
    pub fn allocate_in_pool_at(&mut self, pool: u32, addr: u64, size: u64, requested: u64) -> Result<u64, AllocError> {
        self.pools.get(pool).ok_or(AllocError::UnknownPool { pool })?;
        self.place(pool, addr, size, requested)
    }

    /// [`Allocator::allocate_at`] in the memory of `owner`: a private pool, or 0 for the
    /// allocator's own.
    fn place(&mut self, owner: u32, addr: u64, size: u64, requested: u64) -> Result<u64, AllocError> {
        self.settle();
        if size == 0 || requested == 0 {
            return Err(AllocError::ZeroSize);
        }
        if size % MIN_BLOCK != 0 || addr % MIN_BLOCK != 0 || requested > size {
            return Err(AllocError::NotCached { addr, size });
        }
        let id = match self.free_block_holding(owner, addr, size) {
            Some(id) => id,
            None if !self.events.is_empty() => {
                self.synchronize_and_free_events()?;
                self.free_block_holding(owner, addr, size).ok_or(AllocError::NotCached { addr, size })?
            }
            None => return Err(AllocError::NotCached { addr, size }),
        };
        self.uncache(id);
        let (start, end, pool, was_split) = {
            let b = &self.heap[id];
            (b.addr, b.end(), b.pool, b.is_split())
        };
        let before = self.split_off(id, start, addr);
        let after = self.split_off(id, addr + size, end);
        let stats = self.heap.stats_mut();
        if was_split {
            stats.inactive_split.decrease(pool, 1);
            stats.inactive_split_bytes.decrease(pool, end - start);
        }
        let remainders = [before, after].into_iter().flatten();
        for (_, bytes) in remainders.clone() {
            stats.inactive_split.increase(pool, 1);
            stats.inactive_split_bytes.increase(pool, bytes);
        }
        for (rest, _) in remainders {
            self.cache(rest);
        }
        let b = &mut self.heap[id];
        b.state = BlockState::Allocated;
        b.set_requested(requested);
        let lane = self.heap[id].stream_index;
        self.heap.insert_live(addr, id);
        self.count_allocation::<false>(pool, addr, size, requested, lane);
        Ok(addr)
    }

    /// The cached free block of a classic segment of `owner`'s memory that holds
    /// `[addr, addr + size)`.
    fn free_block_holding(&self, owner: u32, addr: u64, size: u64) -> Option<u32> {
        if owner == 0 && self.vm.mode != VmMode::Off {
            return None;
        }
        let end = addr.checked_add(size)?;
        [Pool::Small, Pool::Large].into_iter().find_map(|pool| {
            self.heap.owner_index(owner, pool).iter().find_map(|(_, id)| {
                let b = &self.heap[id];
                (b.state == BlockState::Free && !b.in_vm && b.addr <= addr && end <= b.end()).then_some(id)
            })
        })
    }

    /// Cuts `[from, to)` off free block `id` (not in the free index), at its front when `from`
    /// is its start, else at its back, as a free block of its own: that block's id and bytes,
    /// or None when the range is empty.
    fn split_off(&mut self, id: u32, from: u64, to: u64) -> Option<(u32, u64)> {
        if from >= to {
            return None;
        }
        let b = &self.heap[id];
        let at_front = from == b.addr;
        let mut rest = Block::new(from, to - from, b.stream_index, BlockState::Free, b.pool, false);
        rest.set_stamp(b.stamp());
        let (prev, next) = (b.prev, b.next);
        if at_front {
            rest.prev = prev;
            rest.next = id;
        } else {
            rest.prev = id;
            rest.next = next;
        }
        let rest_id = self.heap.insert_block(rest);
        let b = &mut self.heap[id];
        if at_front {
            b.addr = to;
            b.size -= to - from;
            b.prev = rest_id;
            if prev != NIL {
                self.heap[prev].next = rest_id;
            }
        } else {
            b.size -= to - from;
            b.next = rest_id;
            if next != NIL {
                self.heap[next].prev = rest_id;
            }
        }
        Some((rest_id, to - from))
    }
}
