//! The streams an allocator has seen, each named by a small index so that a block record
//! stores 4 bytes for its stream instead of the 8-byte handle.
//!
//! Invariants: an index, once given to a stream, names it for the allocator's lifetime;
//! distinct streams get distinct indexes, so comparing indexes compares streams.

use alloc::vec::Vec;

use crate::base::device::Stream;

/// Stream handles by index, in the order first seen.
#[derive(Clone, Debug, Default)]
pub struct StreamTable {
    handles: Vec<Stream>,
}

impl StreamTable {
    /// The index of `stream`, giving it the next one if it is new.
    #[inline]
    pub fn index_of(&mut self, stream: Stream) -> u32 {
        match self.handles.iter().position(|&h| h == stream) {
            Some(i) => i as u32,
            None => {
                self.handles.push(stream);
                (self.handles.len() - 1) as u32
            }
        }
    }

    /// The stream with index `index`.
    #[inline]
    pub fn handle(&self, index: u32) -> Stream {
        self.handles[index as usize]
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
}
