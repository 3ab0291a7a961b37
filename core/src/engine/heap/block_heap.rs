//! The block heap: the blocks of every segment (a slab addressed by `u32` ids), the free
//! index of cached blocks by (stream, size, address), the live map from an allocation's
//! address to its block, the stream lanes blocks are reused on, and the statistics that
//! count them. It knows nothing of how segments are got (classic, expandable or paged), of
//! explaining, the history or the decision memo: the allocator above decides, the heap keeps
//! the books.
//!
//! Its fields are private: the allocator reads and changes them only through the methods
//! here. Invariants (checked by `invariants.rs`): the blocks of each segment tile it exactly;
//! a block is in its lane's free index iff it is free and cached; an address is in the live
//! map iff an allocated block starts there; the statistics equal a recount of the blocks.

use alloc::vec::Vec;

use crate::base::device::Stream;
use crate::base::size::Pool;
use crate::data::addr_map::AddrTable;
use crate::data::block::{Block, BlockState, Slab, NIL};
use crate::data::free_index::{Found, FreeIndex};
use crate::data::streams::StreamTable;
use crate::report::stats::Counters;

/// The blocks and their indexes; see the file's opening.
#[derive(Clone)]
pub(crate) struct BlockHeap {
    blocks: Slab,
    streams: StreamTable,
    /// The allocator's own cached blocks, small pool then large.
    free: [FreeIndex; 2],
    /// Each private pool's cached blocks, by the pool's id, in the order the pools were made.
    pooled: Vec<(u32, [FreeIndex; 2])>,
    live: AddrTable,
    stats: Counters,
}

/// How [`BlockHeap::hand_out`] cuts a block.
#[derive(Clone, Copy)]
pub(crate) struct Cut {
    /// The bytes handed out, from the block's front.
    pub(crate) rounded: u64,
    /// The split rule's decision: the rest becomes a block of its own.
    pub(crate) split: bool,
    /// The id the front gets, when the decision memo chose one (else a new one).
    pub(crate) front: Option<u32>,
    /// The block lies in a virtual range: it counts in no split statistic, as PyTorch's
    /// expandable segments count none.
    pub(crate) in_vm: bool,
    /// The stamp the rest gets (its age for garbage collection), unless `in_vm`.
    pub(crate) stamp: u32,
}

/// What [`BlockHeap::hand_out`] did: the facts explain, the history and the policies use.
#[derive(Clone, Copy)]
pub(crate) struct HandedOut {
    /// The block handed out, now allocated.
    pub(crate) id: u32,
    pub(crate) addr: u64,
    pub(crate) size: u64,
    /// Its lane (the stream it is reused on).
    pub(crate) lane: u32,
    /// The rest split off behind it: free and in no index yet (the caller caches it).
    pub(crate) rest: Option<u32>,
    /// The block handed out starts its segment (or range) after a split.
    pub(crate) head: bool,
}

/// What [`BlockHeap::absorb`] merged.
#[derive(Clone, Copy)]
pub(crate) struct Absorbed {
    /// Bytes gained.
    pub(crate) bytes: u64,
    /// The neighbour's address.
    pub(crate) addr: u64,
    /// The neighbour lay in a virtual range.
    pub(crate) in_vm: bool,
    /// The block now starts its segment (or range): the neighbour was its first block.
    pub(crate) head: bool,
}

impl BlockHeap {
    /// An empty heap whose statistics start as `stats`.
    pub(crate) fn new(stats: Counters) -> BlockHeap {
        BlockHeap {
            blocks: Slab::default(),
            streams: StreamTable::default(),
            free: [FreeIndex::default(), FreeIndex::default()],
            pooled: Vec::new(),
            live: AddrTable::default(),
            stats,
        }
    }

    // ---- blocks

    /// The block with id `id`, if it is live.
    #[inline]
    pub(crate) fn block(&self, id: u32) -> Option<&Block> {
        self.blocks.get(id)
    }

    /// Every live block with its id.
    #[inline]
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (u32, &Block)> {
        self.blocks.iter()
    }

    /// Number of live blocks.
    #[inline]
    pub(crate) fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// True when `id` names a slot that holds no block.
    #[inline]
    pub(crate) fn is_vacant(&self, id: u32) -> bool {
        self.blocks.is_vacant(id)
    }

    /// Stores a new block (a fresh segment or a piece of a range) and returns its id.
    #[inline(always)]
    pub(crate) fn insert_block(&mut self, block: Block) -> u32 {
        self.blocks.insert(block)
    }

    /// Removes block `id` (a segment returned to the device, or a piece merged away).
    #[inline]
    pub(crate) fn remove_block(&mut self, id: u32) -> Block {
        self.blocks.remove(id)
    }

    /// Gives every live block the id `renames` pairs it with (the decision memo's period end).
    pub(crate) fn rename_blocks(&mut self, renames: &[(u32, u32)]) {
        self.blocks.rename(renames)
    }

    /// The slab and the statistics, for the decision memo's recording.
    #[inline(always)]
    pub(crate) fn memo_view(&mut self) -> (&mut Slab, &Counters) {
        (&mut self.blocks, &self.stats)
    }

    // ---- stream lanes

    /// The stream table: each lane's stream and owner.
    #[inline(always)]
    pub(crate) fn lanes(&self) -> &StreamTable {
        &self.streams
    }

    /// The stream of lane `lane`.
    #[inline(always)]
    pub(crate) fn stream_of_lane(&self, lane: u32) -> Stream {
        self.streams.handle(lane)
    }

    /// The lane of `stream` in `owner`'s memory (0: the allocator's own), made if new.
    #[inline]
    pub(crate) fn lane_in(&mut self, stream: Stream, owner: u32) -> u32 {
        self.streams.index_in(stream, owner)
    }

    /// The lane of `stream` in the allocator's own memory, made if new.
    #[inline]
    pub(crate) fn lane_of(&mut self, stream: Stream) -> u32 {
        self.streams.index_of(stream)
    }

    // ---- the free index

    /// The allocator's own free index of `pool`.
    #[inline(always)]
    pub(crate) fn free_index(&self, pool: Pool) -> &FreeIndex {
        &self.free[pool.index()]
    }

    /// The free index of `owner`'s memory for `pool`: a private pool's, or (0) the
    /// allocator's own. A pool has indexes from [`BlockHeap::add_owner`] until
    /// [`BlockHeap::remove_owner`].
    #[inline(always)]
    pub(crate) fn owner_index(&self, owner: u32, pool: Pool) -> &FreeIndex {
        match owner {
            0 => &self.free[pool.index()],
            owner => &self.pooled.iter().find(|p| p.0 == owner).expect("a pool with blocks exists").1[pool.index()],
        }
    }

    /// [`BlockHeap::owner_index`], mutably.
    #[inline(always)]
    fn owner_index_mut(&mut self, owner: u32, pool: Pool) -> &mut FreeIndex {
        match owner {
            0 => &mut self.free[pool.index()],
            owner => {
                &mut self.pooled.iter_mut().find(|p| p.0 == owner).expect("a pool with blocks exists").1[pool.index()]
            }
        }
    }

    /// The free index a block of lane `lane` is cached in.
    #[inline(always)]
    fn lane_index_mut(&mut self, lane: u32, pool: Pool) -> &mut FreeIndex {
        // While no pool exists, every lane is the allocator's own: no look-up on the hot path.
        let owner = if self.pooled.is_empty() { 0 } else { self.streams.owner(lane) };
        self.owner_index_mut(owner, pool)
    }

    /// Every free index with its owner and pool: the allocator's own, then each pool's.
    pub(crate) fn indexes(&self) -> impl Iterator<Item = (u32, Pool, &FreeIndex)> {
        let pools = [Pool::Small, Pool::Large];
        let own = self.free.iter().zip(pools).map(|(index, pool)| (0, pool, index));
        let pooled = self.pooled.iter().flat_map(move |(id, f)| f.iter().zip(pools).map(move |(i, p)| (*id, p, i)));
        own.chain(pooled)
    }

    /// Gives private pool `owner` free indexes of its own.
    pub(crate) fn add_owner(&mut self, owner: u32) {
        self.pooled.push((owner, Default::default()));
    }

    /// Forgets private pool `owner`, which holds no block: its indexes and its lanes.
    pub(crate) fn remove_owner(&mut self, owner: u32) {
        self.pooled.retain(|p| p.0 != owner);
        self.streams.retire(owner);
    }

    /// The best-fitting cached block of `stream` for `rounded` bytes in `owner`'s free index
    /// of `pool`, without taking it.
    #[inline(always)]
    pub(crate) fn best_fit(&self, owner: u32, pool: Pool, stream: Stream, rounded: u64) -> Option<Found> {
        self.owner_index(owner, pool).find(stream, rounded)
    }

    /// Takes the block [`BlockHeap::best_fit`] found out of the free index.
    #[inline(always)]
    pub(crate) fn take_found(&mut self, owner: u32, pool: Pool, found: &Found) {
        self.owner_index_mut(owner, pool).take(found)
    }

    /// Puts free block `id` in its lane's free index.
    #[inline(always)]
    pub(crate) fn cache(&mut self, id: u32) {
        let b = &self.blocks[id];
        let (lane, pool, size, addr) = (b.stream_index, b.pool, b.size, b.addr);
        let stream = self.streams.handle(lane);
        self.lane_index_mut(lane, pool).insert(stream, size, addr, id);
    }

    /// Takes free block `id` out of its lane's free index.
    #[inline(always)]
    pub(crate) fn uncache(&mut self, id: u32) {
        let b = &self.blocks[id];
        let (lane, pool, size, addr) = (b.stream_index, b.pool, b.size, b.addr);
        let stream = self.streams.handle(lane);
        let removed = self.lane_index_mut(lane, pool).remove(stream, size, addr);
        debug_assert!(removed, "uncached block was in the free index");
    }

    // ---- handing out and freeing

    /// Hands out free block `id`, in no index, for a request of `requested` bytes cut as `cut`
    /// says: on a split the front becomes a block of its own and the rest stays block `id`,
    /// free and stamped, for the caller to cache. The block handed out is allocated and
    /// counted in the split statistics, not yet in the allocation ones
    /// ([`BlockHeap::count_allocation`]); `index_live` enters it in the live map.
    #[inline(always)]
    pub(crate) fn hand_out(&mut self, id: u32, requested: u64, cut: Cut, index_live: bool) -> HandedOut {
        let (pool, already_split) = (self.blocks[id].pool, self.blocks[id].is_split());
        let (handed, rest, head) = if cut.split {
            let rest = &mut self.blocks[id];
            let mut front =
                Block::new(rest.addr, cut.rounded, rest.stream_index, BlockState::Allocated, pool, cut.in_vm);
            front.prev = rest.prev;
            front.next = id;
            rest.addr += cut.rounded;
            rest.size -= cut.rounded;
            let rest_size = rest.size;
            let front_id = match cut.front {
                Some(front_id) => {
                    self.blocks.occupy(front_id, front);
                    front_id
                }
                None => self.blocks.insert(front),
            };
            let rest = &mut self.blocks[id];
            let before = rest.prev;
            rest.prev = front_id;
            if !cut.in_vm {
                rest.set_stamp(cut.stamp);
            }
            if before != NIL {
                self.blocks[before].next = front_id;
            }
            if cut.in_vm {
                // Like PyTorch's expandable segments, virtual memory counts no split blocks.
            } else if already_split {
                self.stats.inactive_split_bytes.decrease(pool, cut.rounded);
            } else {
                self.stats.inactive_split_bytes.increase(pool, rest_size);
                self.stats.inactive_split.increase(pool, 1);
            }
            (front_id, Some(id), before == NIL)
        } else {
            if already_split && !cut.in_vm {
                let size = self.blocks[id].size;
                self.stats.inactive_split_bytes.decrease(pool, size);
                self.stats.inactive_split.decrease(pool, 1);
            }
            (id, None, false)
        };
        let b = &mut self.blocks[handed];
        b.state = BlockState::Allocated;
        b.set_requested(requested);
        let (addr, size, lane) = (b.addr, b.size, b.stream_index);
        if index_live {
            self.live.insert(addr, handed, &self.blocks);
        }
        HandedOut { id: handed, addr, size, lane, rest, head }
    }

    /// Counts an allocation of `size` bytes (`requested` asked for) in `pool`; `oversize`
    /// when it is `max_split_size` or more.
    #[inline(always)]
    pub(crate) fn count_allocation(&mut self, pool: Pool, size: u64, requested: u64, oversize: bool) {
        let s = &mut self.stats;
        s.allocation.increase(pool, 1);
        s.allocated_bytes.increase(pool, size);
        s.allocation_rose(pool);
        s.requested_bytes.increase(pool, requested);
        if oversize {
            s.oversize_allocations.increase(1);
        }
    }

    /// Merges the neighbour `other` into block `id`; the caller has taken `other` out of
    /// whatever index held it. `listed`: its id goes back on the slab's list of vacant ids
    /// (the decision memo's replay leaves that list alone).
    #[inline(always)]
    pub(crate) fn absorb(&mut self, id: u32, other: u32, listed: bool) -> Absorbed {
        let o = &self.blocks[other];
        let (o_addr, o_size, o_prev, o_next, o_stamp, o_in_vm) = (o.addr, o.size, o.prev, o.next, o.stamp(), o.in_vm);
        if listed {
            self.blocks.vacate(other);
        } else {
            self.blocks.release(other);
        }
        let b = &mut self.blocks[id];
        b.size += o_size;
        // A block being freed still holds its requested bytes here; its caller stamps it next.
        b.set_stamp(b.stamp().max(o_stamp));
        let mut head = false;
        if b.prev == other {
            b.addr = o_addr;
            b.prev = o_prev;
            if o_prev != NIL {
                self.blocks[o_prev].next = id;
            } else {
                head = true;
            }
        } else {
            b.next = o_next;
            if o_next != NIL {
                self.blocks[o_next].prev = id;
            }
        }
        Absorbed { bytes: o_size, addr: o_addr, in_vm: o_in_vm, head }
    }

    /// Marks block `id`, just merged with `before` and `after` bytes of its neighbours, free
    /// and stamped `stamp`, and counts the free of `requested` bytes and the split blocks it
    /// leaves (none in a virtual range, `in_vm`). Returns its address, size and whether it is
    /// part of a split segment.
    #[inline(always)]
    pub(crate) fn mark_free(
        &mut self,
        id: u32,
        merged: (u64, u64),
        requested: u64,
        in_vm: bool,
        stamp: u32,
    ) -> (u64, u64, bool) {
        let (before, after) = merged;
        let mut net_blocks = -((before > 0) as i64) - ((after > 0) as i64);
        let mut net_bytes = -((before + after) as i64);
        let b = &mut self.blocks[id];
        b.state = BlockState::Free;
        b.set_stamp(stamp);
        let (split, size, addr, pool) = (b.is_split(), b.size, b.addr, b.pool);
        if split {
            net_blocks += 1;
            net_bytes += size as i64;
        }
        let s = &mut self.stats;
        if !in_vm {
            match net_blocks {
                n if n > 0 => s.inactive_split.increase(pool, n as u64),
                n if n < 0 => s.inactive_split.decrease(pool, n.unsigned_abs()),
                _ => {}
            }
            match net_bytes {
                n if n > 0 => s.inactive_split_bytes.increase(pool, n as u64),
                n if n < 0 => s.inactive_split_bytes.decrease(pool, n.unsigned_abs()),
                _ => {}
            }
        }
        s.requested_bytes.decrease(pool, requested);
        (addr, size, split)
    }

    // ---- the live map

    /// The block of the allocation at `addr`, if one starts there.
    #[inline(always)]
    pub(crate) fn live_block(&self, addr: u64) -> Option<u32> {
        self.live.get(addr, &self.blocks)
    }

    /// Records that the allocation at `addr` is block `id`.
    #[inline(always)]
    pub(crate) fn insert_live(&mut self, addr: u64, id: u32) {
        self.live.insert(addr, id, &self.blocks)
    }

    /// Forgets the allocation at `addr` and returns its block.
    #[inline(always)]
    pub(crate) fn remove_live(&mut self, addr: u64) -> Option<u32> {
        self.live.remove(addr, &self.blocks)
    }

    /// Forgets the free index's empty streams.
    pub(crate) fn drop_empty_streams(&mut self) {
        for index in &mut self.free {
            index.drop_empty_streams();
        }
    }

    /// The slab, read-only (the invariant checker and the memo's rebuild read links by it).
    pub(crate) fn slab(&self) -> &Slab {
        &self.blocks
    }

    /// The live map.
    pub(crate) fn live(&self) -> &AddrTable {
        &self.live
    }

    /// Sets the free index and the live map rebuilt from the blocks (after a memo replay,
    /// which leaves them alone) and relinks the slab's vacant ids.
    pub(crate) fn set_indexes(&mut self, free: [FreeIndex; 2], live: AddrTable) {
        (self.free, self.live) = (free, live);
        self.blocks.relink_vacant();
    }

    // ---- statistics

    /// The statistics.
    #[inline(always)]
    pub(crate) fn stats(&self) -> &Counters {
        &self.stats
    }

    /// The statistics, to count what the heap does not see (device calls, retries, OOMs).
    #[inline(always)]
    pub(crate) fn stats_mut(&mut self) -> &mut Counters {
        &mut self.stats
    }

    /// Host memory of the blocks' metadata: (grows with blocks, fixed per pool and stream).
    pub(crate) fn metadata_bytes(&self) -> (usize, usize) {
        let (small, large) = (self.free[0].heap_bytes(), self.free[1].heap_bytes());
        (self.blocks.heap_bytes() + self.live.heap_bytes() + small.0 + large.0, small.1 + large.1)
    }
}

impl core::ops::Index<u32> for BlockHeap {
    type Output = Block;
    #[inline(always)]
    fn index(&self, id: u32) -> &Block {
        &self.blocks[id]
    }
}

impl core::ops::IndexMut<u32> for BlockHeap {
    #[inline(always)]
    fn index_mut(&mut self, id: u32) -> &mut Block {
        &mut self.blocks[id]
    }
}
