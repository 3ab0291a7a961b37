//! Block metadata and the slab that holds it, addressed by `u32` ids.
//!
//! A block is a contiguous piece of one segment. Blocks of a segment form a doubly linked
//! list by address through `prev`/`next` ids ([`NIL`] at the ends), so a segment is the
//! chain reachable from a block whose `prev` is NIL. Invariants: the chain of a segment
//! tiles it exactly (each block starts where the previous one ends); an id in a chain is
//! never vacant in the slab. In a virtual range (`in_vm`), `Unmapped` blocks cover whole
//! pages with no memory behind them; every other block there is mapped.
//!
//! A block record is 40 bytes: it names its stream by a 4-byte index (see `streams.rs`),
//! and the bytes a caller asked for and the stamp of a cached block share one field, since a
//! block only has the first while it is allocated or pending and only needs the second while
//! it is free or unmapped. The slab grows by an eighth at a
//! time and threads its vacant slots into a list through the slots themselves (one bit per
//! slot marks those in use), so it holds at most about an eighth more than the most blocks
//! ever alive at once.

use alloc::vec::Vec;

use crate::base::size::Pool;

/// The id that links to nothing.
pub const NIL: u32 = u32::MAX;

/// A block's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out to a caller.
    Allocated,
    /// Freed by the caller but still used on other streams: waiting for events.
    PendingFree,
    /// Cached: in the free index, ready for reuse, or parked in a followed plan's range.
    Free,
    /// Address space of a virtual range with no memory mapped behind it (whole pages).
    Unmapped,
}

/// One block's metadata (40 bytes; a test holds it to that).
#[derive(Clone, Debug)]
pub struct Block {
    /// Device address of the first byte.
    pub addr: u64,
    /// Size in bytes (a multiple of 512).
    pub size: u64,
    /// Allocated or pending: the bytes the caller asked for. Free or unmapped: the stamp
    /// (see [`Block::stamp`]). Read through [`Block::requested`] and [`Block::stamp`].
    requested_or_stamp: u64,
    /// The stream the block was allocated for, by its index in the allocator's stream table;
    /// the block is only reused on this stream.
    pub stream_index: u32,
    /// Previous block of the same segment, or [`NIL`].
    pub prev: u32,
    /// Next block of the same segment, or [`NIL`].
    pub next: u32,
    /// Events still to complete before a pending free finishes.
    pub event_count: u8,
    /// Allocated, pending, free or unmapped.
    pub state: BlockState,
    /// The pool the block's segment belongs to.
    pub pool: Pool,
    /// True when the block lies in a virtual range rather than a classic segment.
    pub in_vm: bool,
}

impl Block {
    /// A block of `size` bytes at `addr` with no neighbours, no events, and 0 requested bytes
    /// or stamp.
    #[inline]
    pub fn new(addr: u64, size: u64, stream_index: u32, state: BlockState, pool: Pool, in_vm: bool) -> Block {
        Block {
            addr,
            size,
            requested_or_stamp: 0,
            stream_index,
            prev: NIL,
            next: NIL,
            event_count: 0,
            state,
            pool,
            in_vm,
        }
    }

    /// Bytes the caller asked for (meaningful while allocated or pending).
    #[inline]
    pub fn requested(&self) -> u64 {
        self.requested_or_stamp
    }

    /// Records the bytes the caller asked for, replacing the stamp.
    #[inline]
    pub fn set_requested(&mut self, requested: u64) {
        self.requested_or_stamp = requested;
    }

    /// When the block was cached (meaningful while free or unmapped): the pool's lookup count
    /// (PyTorch's garbage-collection age) or, for a block of a paged virtual range, its
    /// stream's free epoch (see `epochs.rs`).
    #[inline]
    pub fn stamp(&self) -> u32 {
        self.requested_or_stamp as u32
    }

    /// The requested bytes or the stamp, whichever the block holds now.
    #[inline]
    pub fn raw_requested_or_stamp(&self) -> u64 {
        self.requested_or_stamp
    }

    /// Records when the block was cached, replacing the requested bytes.
    #[inline]
    pub fn set_stamp(&mut self, stamp: u32) {
        self.requested_or_stamp = stamp as u64;
    }

    /// True when the block shares its segment with other blocks.
    #[inline]
    pub fn is_split(&self) -> bool {
        // Both links are NIL (all ones) iff their AND is: one test, no data-dependent branch.
        self.prev & self.next != NIL
    }

    /// One past the last byte.
    #[inline]
    pub fn end(&self) -> u64 {
        self.addr + self.size
    }
}

/// Storage for blocks with stable `u32` ids and reuse of vacated ids, the most recently
/// vacated first. A vacant slot keeps a stale block whose `next` names the next vacant slot
/// ([`NIL`] ends the list); one bit per slot says which slots are in use. Indexing by id
/// trusts the invariant that no chain names a vacant id (debug builds check it), so the hot
/// path pays one bounds check per access and nothing more.
#[derive(Clone, Debug)]
pub struct Slab {
    slots: Vec<Block>,
    /// Bit `i % 64` of word `i / 64` is set iff slot `i` holds a live block.
    used: Vec<u64>,
    /// The most recently vacated slot, or [`NIL`].
    vacant: u32,
    len: usize,
}

impl Default for Slab {
    fn default() -> Self {
        Slab { slots: Vec::new(), used: Vec::new(), vacant: NIL, len: 0 }
    }
}

impl Slab {
    #[inline]
    fn is_used(&self, id: u32) -> bool {
        self.used.get(id as usize / 64).is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    #[inline]
    fn mark(&mut self, id: u32, used: bool) {
        let word = &mut self.used[id as usize / 64];
        if used {
            *word |= 1 << (id % 64);
        } else {
            *word &= !(1 << (id % 64));
        }
    }

    /// Stores a block and returns its id.
    #[inline(always)]
    pub fn insert(&mut self, block: Block) -> u32 {
        self.len += 1;
        let id = if self.vacant != NIL {
            let id = self.vacant;
            self.vacant = self.slots[id as usize].next;
            self.slots[id as usize] = block;
            id
        } else {
            if self.slots.len() == self.slots.capacity() {
                // Grow by an eighth, not double, so at most an eighth of the slab sits unused.
                self.slots.reserve_exact((self.slots.len() / 8).max(16));
            }
            self.slots.push(block);
            let id = (self.slots.len() - 1) as u32;
            if id as usize / 64 == self.used.len() {
                self.used.push(0);
            }
            id
        };
        self.mark(id, true);
        id
    }

    /// Removes a block, vacating its id.
    #[inline]
    pub fn remove(&mut self, id: u32) -> Block {
        let block = self.slots[id as usize].clone();
        self.vacate(id);
        block
    }

    /// Removes a block without handing it back (when the caller has read what it needs).
    #[inline]
    pub fn vacate(&mut self, id: u32) {
        assert!(self.is_used(id), "slab id in use");
        self.mark(id, false);
        self.slots[id as usize].next = self.vacant;
        self.vacant = id;
        self.len -= 1;
    }

    /// Stores a block under an id the caller chose, which must be vacant, leaving the list
    /// of vacant slots stale until [`Slab::relink_vacant`] (the decision memo's replay).
    #[inline(always)]
    pub fn occupy(&mut self, id: u32, block: Block) {
        assert!(!self.is_used(id), "slab id {id} vacant");
        self.slots[id as usize] = block;
        self.mark(id, true);
        self.len += 1;
    }

    /// Vacates an id without listing it, leaving the list stale as [`Slab::occupy`] does.
    #[inline(always)]
    pub fn release(&mut self, id: u32) {
        assert!(self.is_used(id), "slab id in use");
        self.mark(id, false);
        self.len -= 1;
    }

    /// Lists every vacant slot again, lowest id first, after [`Slab::occupy`] and
    /// [`Slab::release`] or [`Slab::rename`].
    pub fn relink_vacant(&mut self) {
        self.vacant = NIL;
        for id in (0..self.slots.len() as u32).rev() {
            if !self.is_used(id) {
                self.slots[id as usize].next = self.vacant;
                self.vacant = id;
            }
        }
    }

    /// Gives every live block a new id: `renames` pairs each live id with its new one (a
    /// permutation of ids below the slab's length), and every link follows. The list of
    /// vacant slots is left stale until [`Slab::relink_vacant`].
    pub fn rename(&mut self, renames: &[(u32, u32)]) {
        assert_eq!(renames.len(), self.len, "every live block is renamed");
        let mut new_id = alloc::vec![NIL; self.slots.len()];
        for &(old, new) in renames {
            new_id[old as usize] = new;
        }
        let relink = |id: u32| if id == NIL { NIL } else { new_id[id as usize] };
        let mut slots = self.slots.clone();
        self.used.iter_mut().for_each(|w| *w = 0);
        for &(old, new) in renames {
            let mut b = self.slots[old as usize].clone();
            (b.prev, b.next) = (relink(b.prev), relink(b.next));
            slots[new as usize] = b;
        }
        self.slots = slots;
        for &(_, new) in renames {
            self.mark(new, true);
        }
    }

    /// True when `id` names a slot that holds no block (one [`Slab::occupy`] may fill).
    #[inline]
    pub fn is_vacant(&self, id: u32) -> bool {
        (id as usize) < self.slots.len() && !self.is_used(id)
    }

    /// The block with this id, if any.
    #[inline]
    pub fn get(&self, id: u32) -> Option<&Block> {
        self.is_used(id).then(|| &self.slots[id as usize])
    }

    /// Every live block with its id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Block)> {
        self.slots.iter().enumerate().filter(|&(i, _)| self.is_used(i as u32)).map(|(i, b)| (i as u32, b))
    }

    /// Bytes of host memory the slab holds.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Block>() + self.used.capacity() * 8
    }

    /// Number of live blocks.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl core::ops::Index<u32> for Slab {
    type Output = Block;
    #[inline]
    fn index(&self, id: u32) -> &Block {
        debug_assert!(self.is_used(id), "slab id {id} in use");
        &self.slots[id as usize]
    }
}

impl core::ops::IndexMut<u32> for Slab {
    #[inline]
    fn index_mut(&mut self, id: u32) -> &mut Block {
        debug_assert!(self.is_used(id), "slab id {id} in use");
        &mut self.slots[id as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_metadata_stays_small() {
        assert_eq!(core::mem::size_of::<Block>(), 40);
    }

    #[test]
    fn vacated_ids_are_reused_latest_first_and_the_slab_grows_by_an_eighth() {
        let mut slab = Slab::default();
        let block = |addr| Block::new(addr, 512, 0, BlockState::Free, Pool::Small, false);
        let ids: Vec<u32> = (0..1000).map(|i| slab.insert(block(i << 9))).collect();
        assert_eq!(ids, (0..1000).collect::<Vec<u32>>());
        assert!(slab.heap_bytes() <= 1000 * 40 * 9 / 8 + 16 * 40 + 16 * 8, "{}", slab.heap_bytes());
        slab.vacate(7);
        assert_eq!(slab.remove(500).addr, 500 << 9);
        assert_eq!((slab.len(), slab.get(7).is_none(), slab.iter().count()), (998, true, 998));
        assert_eq!(slab.insert(block(1)), 500);
        assert_eq!(slab.insert(block(2)), 7);
        assert_eq!(slab.insert(block(3)), 1000);
        assert_eq!((slab[7].addr, slab.len()), (2, 1001));
    }

    #[test]
    fn renamed_blocks_keep_their_links_and_the_vacant_list_is_rebuilt_from_the_bits() {
        let mut slab = Slab::default();
        let ids: Vec<u32> =
            (0..4).map(|i| slab.insert(Block::new(i << 9, 512, 0, BlockState::Free, Pool::Small, false))).collect();
        slab.vacate(ids[3]);
        for w in ids[..3].windows(2) {
            slab[w[0]].next = w[1];
            slab[w[1]].prev = w[0];
        }
        // Blocks 0, 1, 2 become 2, 3, 0; slot 1 is vacant.
        slab.rename(&[(0, 2), (1, 3), (2, 0)]);
        assert_eq!((slab.len(), slab.get(1).is_none()), (3, true));
        let chain: Vec<(u64, u32, u32)> =
            [2, 3, 0].iter().map(|&id| (slab[id].addr, slab[id].prev, slab[id].next)).collect();
        assert_eq!(chain, alloc::vec![(0, NIL, 3), (512, 2, 0), (1024, 3, NIL)]);
        // Occupy and release leave the list stale; relinking lists exactly the vacant slots.
        slab.occupy(1, Block::new(4096, 512, 0, BlockState::Allocated, Pool::Small, false));
        slab.release(2);
        slab.relink_vacant();
        assert_eq!((slab.len(), slab.insert(Block::new(0, 512, 0, BlockState::Free, Pool::Small, false))), (3, 2));
        assert_eq!(slab.insert(Block::new(0, 512, 0, BlockState::Free, Pool::Small, false)), 4);
    }

    #[test]
    #[should_panic(expected = "vacant")]
    fn occupying_a_used_id_panics() {
        let mut slab = Slab::default();
        let id = slab.insert(Block::new(0, 512, 0, BlockState::Free, Pool::Small, false));
        slab.occupy(id, Block::new(0, 512, 0, BlockState::Free, Pool::Small, false));
    }
}
