//! The free index of one pool: cached blocks ordered by (stream, size, address), the
//! order PyTorch's best fit searches in.
//!
//! Invariant (kept by the allocator): a block is in its pool's free index iff its state is
//! `Free`; the key stored for it equals its current (stream, size, address).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::device::Stream;

/// The ordering key of a cached block.
pub type Key = (Stream, u64, u64);

/// Cached blocks of one pool.
#[derive(Clone, Debug, Default)]
pub struct FreeIndex {
    map: BTreeMap<Key, u32>,
}

impl FreeIndex {
    /// Adds a cached block.
    #[inline]
    pub fn insert(&mut self, stream: Stream, size: u64, addr: u64, id: u32) {
        let old = self.map.insert((stream, size, addr), id);
        debug_assert!(old.is_none(), "block cached twice");
    }

    /// Removes a cached block; true if it was there.
    #[inline]
    pub fn remove(&mut self, stream: Stream, size: u64, addr: u64) -> bool {
        self.map.remove(&(stream, size, addr)).is_some()
    }

    /// The smallest block of `stream` of at least `size` bytes (lowest address on ties).
    #[inline]
    pub fn best_fit(&self, stream: Stream, size: u64) -> Option<(Key, u32)> {
        self.map.range((stream, size, 0)..).next().filter(|(k, _)| k.0 == stream).map(|(k, &id)| (*k, id))
    }

    /// Blocks ordered before `(stream, size, 0)`, from the closest down.
    pub fn before(&self, stream: Stream, size: u64) -> impl Iterator<Item = (Key, u32)> + '_ {
        self.map.range(..(stream, size, 0)).rev().map(|(k, &id)| (*k, id))
    }

    /// Every cached block in index order.
    pub fn iter(&self) -> impl Iterator<Item = (Key, u32)> + '_ {
        self.map.iter().map(|(k, &id)| (*k, id))
    }

    /// Ids of every cached block, in index order.
    pub fn ids(&self) -> Vec<u32> {
        self.map.values().copied().collect()
    }
}
