//! The lanes an allocator has seen: a stream, and the private pool (0 for the allocator's own
//! memory) whose blocks on that stream are cached apart from every other pool's. Each lane is
//! named by a small index, so that a block record stores 4 bytes for its stream and pool
//! instead of the 8-byte handle and the pool id.
//!
//! Invariants: an index, once given to a lane, names it until the lane's pool is retired (no
//! block is in it then), after which a new lane may take the index; distinct live lanes have
//! distinct indexes, so comparing indexes compares (stream, pool) pairs.

use alloc::vec::Vec;

use crate::base::device::Stream;

/// Where `stream` is in `items`, sorted by stream (`key`), or where it would go: the first item
/// is checked before a binary search, since one stream is the common case. For the per-stream
/// tables of the paged policy, which every free (and large malloc) looks a stream up in.
#[inline]
pub fn position_by_stream<T>(items: &[T], stream: Stream, key: impl Fn(&T) -> Stream) -> Result<usize, usize> {
    match items.first() {
        Some(first) if key(first) == stream => Ok(0),
        _ => items.binary_search_by_key(&stream, key),
    }
}

/// Stream handles and their pools by index, in the order first seen.
#[derive(Clone, Debug, Default)]
pub struct StreamTable {
    lanes: Vec<(Stream, u32)>,
}

/// The pool of a retired lane, whose index a new lane may take: no pool has this id.
pub const RETIRED: u32 = u32::MAX;

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
        if let Some(i) = self.lanes.iter().position(|&lane| lane == (stream, owner)) {
            return i as u32;
        }
        match self.lanes.iter().position(|&(_, o)| o == RETIRED) {
            Some(i) => {
                self.lanes[i] = (stream, owner);
                i as u32
            }
            None => {
                self.lanes.push((stream, owner));
                (self.lanes.len() - 1) as u32
            }
        }
    }

    /// Retires every lane of private pool `owner` (not 0), which holds no block any more, so
    /// that pools made and dropped over a long run do not grow the table.
    pub fn retire(&mut self, owner: u32) {
        for lane in self.lanes.iter_mut().filter(|(_, o)| *o == owner) {
            *lane = (0, RETIRED);
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

    #[test]
    fn a_retired_pool_s_lanes_are_taken_again() {
        let mut t = StreamTable::default();
        let own = t.index_of(5);
        let pooled = (t.index_in(5, 3), t.index_in(6, 3));
        t.retire(3);
        assert_eq!((t.index_in(7, 4), t.index_in(5, 4), t.index_in(8, 4)), (pooled.0, pooled.1, 3));
        assert_eq!((t.index_of(5), t.handle(pooled.0), t.owner(pooled.1)), (own, 7, 4));
    }
}
