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
//! time and threads its vacant slots into a list through the slots themselves, so it holds
//! at most about an eighth more than the most blocks ever alive at once.

use alloc::vec::Vec;

use crate::size::Pool;

/// The id that links to nothing.
pub const NIL: u32 = u32::MAX;

/// A block's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out to a caller.
    Allocated,
    /// Freed by the caller but still used on other streams: waiting for events.
    PendingFree,
    /// Cached and in the free index, ready for reuse.
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

    /// Records when the block was cached, replacing the requested bytes.
    #[inline]
    pub fn set_stamp(&mut self, stamp: u32) {
        self.requested_or_stamp = stamp as u64;
    }

    /// True when the block shares its segment with other blocks.
    #[inline]
    pub fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }

    /// One past the last byte.
    #[inline]
    pub fn end(&self) -> u64 {
        self.addr + self.size
    }
}

/// One slot of the slab: a block, or a vacant slot naming the next vacant one ([`NIL`] ends
/// the list). The vacant variant fits in the block's spare bit patterns: a slot is 40 bytes.
#[derive(Clone, Debug)]
enum Slot {
    Used(Block),
    Vacant(u32),
}

/// Storage for blocks with stable `u32` ids and reuse of vacated ids, the most recently
/// vacated first.
#[derive(Clone, Debug)]
pub struct Slab {
    slots: Vec<Slot>,
    /// The most recently vacated slot, or [`NIL`].
    vacant: u32,
    len: usize,
}

impl Default for Slab {
    fn default() -> Self {
        Slab { slots: Vec::new(), vacant: NIL, len: 0 }
    }
}

impl Slab {
    /// Stores a block and returns its id.
    #[inline]
    pub fn insert(&mut self, block: Block) -> u32 {
        self.len += 1;
        if self.vacant != NIL {
            let id = self.vacant;
            let slot = &mut self.slots[id as usize];
            self.vacant = match slot {
                Slot::Vacant(next) => *next,
                Slot::Used(_) => unreachable!("vacant list names a used slot"),
            };
            *slot = Slot::Used(block);
            id
        } else {
            if self.slots.len() == self.slots.capacity() {
                // Grow by an eighth, not double, so at most an eighth of the slab sits unused.
                self.slots.reserve_exact((self.slots.len() / 8).max(16));
            }
            self.slots.push(Slot::Used(block));
            (self.slots.len() - 1) as u32
        }
    }

    /// Removes a block, vacating its id.
    #[inline]
    pub fn remove(&mut self, id: u32) -> Block {
        match core::mem::replace(&mut self.slots[id as usize], Slot::Vacant(self.vacant)) {
            Slot::Used(block) => {
                self.vacant = id;
                self.len -= 1;
                block
            }
            Slot::Vacant(_) => panic!("slab id in use"),
        }
    }

    /// Removes a block without handing it back (when the caller has read what it needs).
    #[inline]
    pub fn vacate(&mut self, id: u32) {
        self.remove(id);
    }

    /// The block with this id, if any.
    #[inline]
    pub fn get(&self, id: u32) -> Option<&Block> {
        match self.slots.get(id as usize) {
            Some(Slot::Used(b)) => Some(b),
            _ => None,
        }
    }

    /// Every live block with its id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Block)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| match s {
            Slot::Used(b) => Some((i as u32, b)),
            Slot::Vacant(_) => None,
        })
    }

    /// Bytes of host memory the slab holds.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Slot>()
    }

    /// Most blocks ever stored at once (slots ever used).
    pub fn high_water(&self) -> usize {
        self.slots.len()
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
        match &self.slots[id as usize] {
            Slot::Used(b) => b,
            Slot::Vacant(_) => panic!("slab id in use"),
        }
    }
}

impl core::ops::IndexMut<u32> for Slab {
    #[inline]
    fn index_mut(&mut self, id: u32) -> &mut Block {
        match &mut self.slots[id as usize] {
            Slot::Used(b) => b,
            Slot::Vacant(_) => panic!("slab id in use"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_metadata_stays_small() {
        assert_eq!(core::mem::size_of::<Block>(), 40);
        assert_eq!(core::mem::size_of::<Slot>(), 40);
    }

    #[test]
    fn vacated_ids_are_reused_latest_first_and_the_slab_grows_by_an_eighth() {
        let mut slab = Slab::default();
        let block = |addr| Block::new(addr, 512, 0, BlockState::Free, Pool::Small, false);
        let ids: Vec<u32> = (0..1000).map(|i| slab.insert(block(i << 9))).collect();
        assert_eq!(ids, (0..1000).collect::<Vec<u32>>());
        assert!(slab.heap_bytes() <= 1000 * 40 * 9 / 8 + 16 * 40, "{}", slab.heap_bytes());
        slab.vacate(7);
        assert_eq!(slab.remove(500).addr, 500 << 9);
        assert_eq!((slab.len(), slab.get(7).is_none(), slab.iter().count()), (998, true, 998));
        assert_eq!(slab.insert(block(1)), 500);
        assert_eq!(slab.insert(block(2)), 7);
        assert_eq!(slab.insert(block(3)), 1000);
        assert_eq!((slab[7].addr, slab.len(), slab.high_water()), (2, 1001, 1001));
    }
}
