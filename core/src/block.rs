//! Block metadata and the slab that holds it, addressed by `u32` ids.
//!
//! A block is a contiguous piece of one segment. Blocks of a segment form a doubly linked
//! list by address through `prev`/`next` ids ([`NIL`] at the ends), so a segment is the
//! chain reachable from a block whose `prev` is NIL. Invariants: the chain of a segment
//! tiles it exactly (each block starts where the previous one ends); an id in a chain is
//! never vacant in the slab. In a virtual range (`in_vm`), `Unmapped` blocks cover whole
//! pages with no memory behind them; every other block there is mapped.

use alloc::vec::Vec;

use crate::device::Stream;
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

/// One block's metadata (48 bytes; a test holds it to that).
#[derive(Clone, Debug)]
pub struct Block {
    /// Device address of the first byte.
    pub addr: u64,
    /// Size in bytes (a multiple of 512).
    pub size: u64,
    /// Bytes the caller asked for (0 when free).
    pub requested: u64,
    /// The stream the block was allocated for; it is only reused on this stream.
    pub stream: Stream,
    /// Previous block of the same segment, or [`NIL`].
    pub prev: u32,
    /// Next block of the same segment, or [`NIL`].
    pub next: u32,
    /// When the block was cached: the pool's lookup count (PyTorch's garbage-collection age)
    /// or, for a block of a paged virtual range, its stream's free epoch (see `epochs.rs`).
    pub stamp: u32,
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

/// Storage for blocks with stable `u32` ids and reuse of vacated ids.
#[derive(Clone, Debug, Default)]
pub struct Slab {
    entries: Vec<Option<Block>>,
    vacant: Vec<u32>,
}

impl Slab {
    /// Stores a block and returns its id.
    #[inline]
    pub fn insert(&mut self, block: Block) -> u32 {
        if let Some(id) = self.vacant.pop() {
            self.entries[id as usize] = Some(block);
            id
        } else {
            self.entries.push(Some(block));
            (self.entries.len() - 1) as u32
        }
    }

    /// Removes a block, vacating its id.
    #[inline]
    pub fn remove(&mut self, id: u32) -> Block {
        let block = self.entries[id as usize].take().expect("slab id in use");
        self.vacant.push(id);
        block
    }

    /// Removes a block without moving it out (when the caller has read what it needs).
    #[inline]
    pub fn vacate(&mut self, id: u32) {
        self.entries[id as usize] = None;
        self.vacant.push(id);
    }

    /// The block with this id, if any.
    #[inline]
    pub fn get(&self, id: u32) -> Option<&Block> {
        self.entries.get(id as usize).and_then(Option::as_ref)
    }

    /// Every live block with its id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Block)> {
        self.entries.iter().enumerate().filter_map(|(i, b)| b.as_ref().map(|b| (i as u32, b)))
    }

    /// Bytes of host memory the slab holds.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * core::mem::size_of::<Option<Block>>() + self.vacant.capacity() * 4
    }

    /// Most blocks ever stored at once (slots ever used).
    pub fn high_water(&self) -> usize {
        self.entries.len()
    }

    /// Number of live blocks.
    pub fn len(&self) -> usize {
        self.entries.len() - self.vacant.len()
    }
}

impl core::ops::Index<u32> for Slab {
    type Output = Block;
    #[inline]
    fn index(&self, id: u32) -> &Block {
        self.entries[id as usize].as_ref().expect("slab id in use")
    }
}

impl core::ops::IndexMut<u32> for Slab {
    #[inline]
    fn index_mut(&mut self, id: u32) -> &mut Block {
        self.entries[id as usize].as_mut().expect("slab id in use")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn block_metadata_stays_small() {
        assert_eq!(core::mem::size_of::<super::Block>(), 48);
        assert_eq!(core::mem::size_of::<Option<super::Block>>(), 48);
    }
}
