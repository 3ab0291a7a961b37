//! The lanes an allocator has seen: a stream, and the private pool (0 for the allocator's own
//! memory) whose blocks on that stream are cached apart from every other pool's. Each lane is
//! named by a small index, so that a block record stores 4 bytes for its stream and pool
//! instead of the 8-byte handle and the pool id.
//!
//! Invariants: an index, once given to a lane, names it for the allocator's lifetime;
//! distinct lanes get distinct indexes, so comparing indexes compares (stream, pool) pairs.

use alloc::vec::Vec;

use crate::base::device::Stream;

/// Stream handles and their pools by index, in the order first seen.
#[derive(Clone, Debug, Default)]
pub struct StreamTable {
    lanes: Vec<(Stream, u32)>,
}

impl StreamTable {
    /// The index of `stream` in the allocator's own memory, giving it the next one if new.
    #[inline]
    pub fn index_of(&mut self, stream: Stream) -> u32 {
        self.index_in(stream, 0)
    }

    /// The index of `stream` in private pool `owner` (0: the allocator's own memory), giving
    /// the lane the next one if it is new.
    #[inline]
    pub fn index_in(&mut self, stream: Stream, owner: u32) -> u32 {
        match self.lanes.iter().position(|&lane| lane == (stream, owner)) {
            Some(i) => i as u32,
            None => {
                self.lanes.push((stream, owner));
                (self.lanes.len() - 1) as u32
            }
        }
    }

    /// The stream of index `index`.
    #[inline]
    pub fn handle(&self, index: u32) -> Stream {
        self.lanes[index as usize].0
    }

    /// The private pool of index `index`: 0 for the allocator's own memory.
    #[inline]
    pub fn owner(&self, index: u32) -> u32 {
        self.lanes[index as usize].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_are_stable_and_distinct() {
        let mut t = StreamTable::default();
        let big = 0x7f12_3456_7890;
        assert_eq!((t.index_of(big), t.index_of(0), t.index_of(big), t.index_of(7)), (0, 1, 0, 2));
        assert_eq!((t.handle(0), t.handle(1), t.handle(2)), (big, 0, 7));
    }

    #[test]
    fn a_stream_in_a_private_pool_is_a_lane_of_its_own() {
        let mut t = StreamTable::default();
        let (own, pooled) = (t.index_of(5), t.index_in(5, 3));
        assert_ne!(own, pooled);
        assert_eq!((t.handle(pooled), t.owner(pooled), t.owner(own)), (5, 3, 0));
        assert_eq!(t.index_in(5, 3), pooled);
    }
}
