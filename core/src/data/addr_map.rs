//! The map from the address of an allocated block to its id: the lookup `free` makes.
//!
//! An open-addressing table of block ids (4 bytes a slot, at most 70% full) with linear
//! probing and backward-shift deletion; the key of a slot is the address of the block it
//! names, read from the slab, so the table stores no addresses. Fibonacci hashing of the
//! address (512-byte aligned, so its low bits carry nothing) spreads neighbours apart.
//!
//! Also here: [`IdMap`], a hash map keyed by block id for the rarely used side tables.
//!
//! Invariants (kept by the allocator): an address is in the table iff a block starting
//! there is `Allocated`, and it maps to that block's id; every run of occupied slots holds
//! each id at or after its home slot.

use alloc::vec;
use alloc::vec::Vec;
use core::hash::{BuildHasherDefault, Hasher};

use crate::data::block::{Slab, NIL};

/// The most tenths of the slots in use: 7, so a lookup reads about two blocks on average
/// (linear probing, `(1 + 1 / (1 - 0.7)) / 2`) and a slot costs 5.7 to 16 bytes per id.
const MAX_LOAD_TENTHS: usize = 7;

/// Address → id of the allocated block starting there.
#[derive(Clone, Debug)]
pub struct AddrTable {
    slots: Vec<u32>,
    shift: u32,
    len: usize,
}

impl Default for AddrTable {
    fn default() -> Self {
        AddrTable { slots: vec![NIL; 64], shift: 64 - 6, len: 0 }
    }
}

impl AddrTable {
    #[inline]
    fn home(&self, addr: u64) -> usize {
        ((addr >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Slot holding the block that starts at `addr`, if any.
    #[inline]
    fn find(&self, addr: u64, blocks: &Slab) -> Option<usize> {
        let mut i = self.home(addr);
        loop {
            let id = self.slots[i];
            if id == NIL {
                return None;
            }
            if blocks[id].addr == addr {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// The id of the allocated block at `addr`.
    #[inline]
    pub fn get(&self, addr: u64, blocks: &Slab) -> Option<u32> {
        self.find(addr, blocks).map(|i| self.slots[i])
    }

    /// Adds block `id`, which starts at `addr` and is not in the table.
    #[inline(always)]
    pub fn insert(&mut self, addr: u64, id: u32, blocks: &Slab) {
        if MAX_LOAD_TENTHS * self.slots.len() < 10 * (self.len + 1) {
            self.grow(blocks);
        }
        let mut i = self.home(addr);
        while self.slots[i] != NIL {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = id;
        self.len += 1;
    }

    /// Removes and returns the id of the block at `addr`.
    #[inline(always)]
    pub fn remove(&mut self, addr: u64, blocks: &Slab) -> Option<u32> {
        let mut hole = self.find(addr, blocks)?;
        let id = self.slots[hole];
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let next = self.slots[j];
            if next == NIL {
                break;
            }
            // Move `next` back into the hole unless its home lies cyclically in (hole, j].
            let home = self.home(blocks[next].addr);
            let stays = if hole < j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.slots[hole] = next;
                hole = j;
            }
        }
        self.slots[hole] = NIL;
        self.len -= 1;
        Some(id)
    }

    /// Number of addresses held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Every id held.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().copied().filter(|&id| id != NIL)
    }

    /// Bytes of host memory the table holds.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<u32>()
    }

    fn grow(&mut self, blocks: &Slab) {
        let doubled = vec![NIL; self.slots.len() * 2];
        let old = core::mem::replace(&mut self.slots, doubled);
        self.shift -= 1;
        self.len = 0;
        for id in old.into_iter().filter(|&id| id != NIL) {
            self.insert(blocks[id].addr, id, blocks);
        }
    }
}

/// A hasher for block ids: one multiply.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }

    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

/// A hash map keyed by block id.
pub type IdMap<V> = hashbrown::HashMap<u32, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::size::Pool;
    use crate::data::block::{Block, BlockState};
    use alloc::collections::BTreeMap;

    fn block(addr: u64) -> Block {
        Block::new(addr, 512, 0, BlockState::Allocated, Pool::Small, false)
    }

    #[test]
    fn agrees_with_an_ordered_map_through_growth_and_deletion() {
        let mut blocks = Slab::default();
        let mut t = AddrTable::default();
        let mut model: BTreeMap<u64, u32> = BTreeMap::new();
        let mut x: u64 = 99;
        // Miri interprets every step; a tenth still grows the table several times over.
        let steps = if cfg!(miri) { 5_000 } else { 50_000 };
        for step in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = 0x7f00_0000_0000 + ((x % 4096) << 9) * if step % 5 == 0 { 4099 } else { 1 };
            match model.get(&addr) {
                Some(&id) if x % 2 == 0 => {
                    assert_eq!(t.remove(addr, &blocks), Some(id));
                    blocks.remove(id);
                    model.remove(&addr);
                }
                Some(&id) => assert_eq!(t.get(addr, &blocks), Some(id)),
                None => {
                    let id = blocks.insert(block(addr));
                    t.insert(addr, id, &blocks);
                    model.insert(addr, id);
                }
            }
            assert_eq!(t.len(), model.len());
            assert!(t.len() * 10 <= t.slots.len() * MAX_LOAD_TENTHS, "{} ids in {} slots", t.len(), t.slots.len());
        }
        for (&addr, &id) in &model {
            assert_eq!(t.get(addr, &blocks), Some(id));
        }
        let (mut held, mut want): (Vec<u32>, Vec<u32>) = (t.ids().collect(), model.values().copied().collect());
        held.sort_unstable();
        want.sort_unstable();
        assert_eq!(held, want);
        assert_eq!(t.get(1 << 20, &blocks), None);
        assert!(t.len() * 10 <= t.slots.len() * 7 && t.len() * 10 > t.slots.len() * 7 / 2);
    }

    #[test]
    fn deletion_keeps_every_id_reachable_where_runs_wrap_round_the_table() {
        // Addresses whose home is one of the table's last three slots or its first two, so
        // that their run wraps from the end of the table to its start.
        let empty = AddrTable::default();
        let wrapping: Vec<u64> = (1..)
            .map(|i| 0x7f00_0000_0000 + (i << 9))
            .filter(|&a| empty.home(a) >= 61 || empty.home(a) <= 1)
            .take(12)
            .collect();
        let mut x: u64 = 7;
        let mut shuffle = |v: &mut Vec<u64>| {
            for i in (1..v.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.swap(i, (x % (i as u64 + 1)) as usize);
            }
        };
        for _ in 0..300 {
            let (mut blocks, mut t) = (Slab::default(), AddrTable::default());
            let mut order = wrapping.clone();
            shuffle(&mut order);
            for &a in &order {
                let id = blocks.insert(block(a));
                t.insert(a, id, &blocks);
            }
            assert_eq!(t.slots.len(), 64, "the table grew: the runs no longer wrap");
            shuffle(&mut order);
            for (k, &a) in order.iter().enumerate() {
                assert!(t.remove(a, &blocks).is_some(), "{a:#x} not found for removal");
                assert_eq!(t.get(a, &blocks), None);
                for &b in &order[k + 1..] {
                    assert!(t.get(b, &blocks).is_some(), "{b:#x} lost after removing {a:#x}");
                }
            }
        }
    }

    #[test]
    fn neighbouring_ids_hash_apart() {
        use alloc::collections::BTreeSet;
        let hash = |id: u32| {
            let mut h = IdHasher::default();
            h.write_u32(id);
            h.finish()
        };
        // The map finds a bucket by the low bits and tags it with the top seven: both must
        // spread ids that follow each other, or every lookup walks one long chain.
        let low: BTreeSet<u64> = (0..1024).map(|id| hash(id) & 1023).collect();
        let top: BTreeSet<u64> = (0..1024).map(|id| hash(id) >> 57).collect();
        assert!(low.len() > 500 && top.len() > 64, "{} low, {} top", low.len(), top.len());
    }

    /// Slots from each held id's home to where it sits, longest and in all.
    fn probe_lengths(t: &AddrTable, blocks: &Slab) -> (usize, usize) {
        let mask = t.mask();
        let distances = t.slots.iter().enumerate().filter(|&(_, &id)| id != NIL).map(|(i, &id)| {
            let home = t.home(blocks[id].addr);
            (i + t.slots.len() - home) & mask
        });
        distances.fold((0, 0), |(longest, sum), d| (longest.max(d), sum + d))
    }

    #[test]
    fn lookups_stay_short_for_the_addresses_segments_split_into() {
        // Blocks as a caching allocator makes them: runs of neighbours 512 bytes to a few MiB
        // apart within 2 MiB and 20 MiB segments, and the segments' own bases far apart.
        let mut blocks = Slab::default();
        let mut t = AddrTable::default();
        for segment in 0..40u64 {
            let base = 0x7f00_0000_0000 + segment * (1 << 30);
            let step = [512, 4096, 1 << 20][segment as usize % 3];
            for i in 0..100 {
                let addr = base + i * step;
                let id = blocks.insert(block(addr));
                t.insert(addr, id, &blocks);
            }
        }
        let (longest, sum) = probe_lengths(&t, &blocks);
        // Linear probing at most 70% full finds an id about one slot past its home on average
        // when the hash spreads the addresses; one home for all would put 4,000 ids in one run.
        assert!(sum <= t.len(), "{sum} slots of probing for {} ids", t.len());
        assert!(longest <= 32, "an id {longest} slots from its home");
        // Four bytes a slot, the table between 35% and 70% full: what the metadata figures add.
        let (bytes, ids) = (t.heap_bytes(), t.len());
        assert!(bytes * 7 >= ids * 4 * 10 && bytes * 35 <= ids * 4 * 100, "{bytes} bytes for {ids} ids");
    }
}
