//! Where the free index keeps the cached blocks of each size class of one stream: per class,
//! a slice of entries sorted by (size, address) from the largest down.
//!
//! Host memory follows the cached blocks, not the number of classes or the fullest moment of
//! each: a table of 2 bytes per class names the class's storage in a shared list; a class
//! with one block holds it inline (no vector), a class with more holds a vector, given back
//! when the class empties; the storage of an empty class goes to a spare list for the next
//! class that fills, and a vector that has shrunk to a quarter of its capacity gives half
//! back. The list itself
//! grows by a quarter at a time.
//!
//! Invariants: a class has storage iff it holds an entry; storage named by the spare list
//! belongs to no class and holds no vector.

use alloc::boxed::Box;
use alloc::vec::Vec;

/// A cached block: 16 bytes, the size in 512-byte units (free blocks never exceed a device's
/// memory, far below 2 TiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Device address of the block.
    pub addr: u64,
    /// Size in 512-byte units.
    pub units: u32,
    /// The block's id.
    pub id: u32,
}

impl Entry {
    /// Size in bytes.
    #[inline]
    pub fn size(&self) -> u64 {
        (self.units as u64) << 9
    }

    /// The ordering key as one comparable pair.
    #[inline]
    pub fn key(&self) -> (u32, u64) {
        (self.units, self.addr)
    }
}

/// In `storage_of`: the class is empty and has no storage.
const NONE: u16 = u16::MAX;

/// The fewest entries a vector has room for.
const MIN_CAPACITY: usize = 4;

/// The entries of one class (or spare storage): a lone entry needs no vector.
#[derive(Clone, Debug)]
enum Storage {
    One(Entry),
    Many(Vec<Entry>),
}

/// The `N` classes of one stream (a fixed count, so that indexing a class needs no check).
#[derive(Clone, Debug)]
pub struct ClassStore<const N: usize> {
    /// Per class, the position of its storage in `storage`, or [`NONE`].
    storage_of: Box<[u16; N]>,
    storage: Vec<Storage>,
    /// Positions in `storage` that no class uses.
    spare: Vec<u16>,
}

impl<const N: usize> ClassStore<N> {
    /// Storage for `N` classes (at most 65,535), all empty.
    pub fn new() -> ClassStore<N> {
        const { assert!(N < NONE as usize) };
        let storage_of = alloc::vec![NONE; N].into_boxed_slice().try_into().expect("N entries");
        ClassStore { storage_of, storage: Vec::new(), spare: Vec::new() }
    }

    /// The entries of class `c`, largest first.
    #[inline(always)]
    pub fn class(&self, c: usize) -> &[Entry] {
        match self.storage_of[c] {
            NONE => &[],
            at => match &self.storage[at as usize] {
                Storage::One(e) => core::slice::from_ref(e),
                Storage::Many(v) => v,
            },
        }
    }

    /// Adds `e` to class `c` in order.
    #[inline(always)]
    pub fn insert(&mut self, c: usize, e: Entry) {
        let at = self.storage_of[c];
        if at == NONE {
            self.storage_of[c] = match self.spare.pop() {
                Some(at) => {
                    self.storage[at as usize] = Storage::One(e);
                    at
                }
                None => {
                    if self.storage.len() == self.storage.capacity() {
                        self.storage.reserve_exact((self.storage.len() / 4).max(4));
                    }
                    self.storage.push(Storage::One(e));
                    (self.storage.len() - 1) as u16
                }
            };
            return;
        }
        let s = &mut self.storage[at as usize];
        match s {
            Storage::One(x) => {
                debug_assert!(x.addr != e.addr, "block cached twice");
                let mut v = Vec::with_capacity(MIN_CAPACITY);
                if x.key() > e.key() {
                    v.extend([*x, e]);
                } else {
                    v.extend([e, *x]);
                }
                *s = Storage::Many(v);
            }
            Storage::Many(v) => {
                let i = v.partition_point(|x| x.key() > e.key());
                debug_assert!(v.get(i).is_none_or(|x| x.addr != e.addr), "block cached twice");
                if i == v.len() {
                    v.push(e); // the new smallest: nothing to move
                } else {
                    v.insert(i, e);
                }
            }
        }
    }

    /// Removes the entry at position `i` of class `c`; true when the class is now empty.
    #[inline(always)]
    pub fn remove_at(&mut self, c: usize, i: usize) -> bool {
        let at = self.storage_of[c];
        let empty = match &mut self.storage[at as usize] {
            Storage::One(_) => true,
            Storage::Many(v) => {
                if i + 1 == v.len() {
                    v.pop(); // the smallest, a best fit: nothing to move
                } else {
                    v.remove(i);
                }
                if (v.capacity() > MIN_CAPACITY) & (v.len() * 4 <= v.capacity()) {
                    // Halve rather than fit, so a class that refills grows again only after
                    // doubling.
                    v.shrink_to((v.len() * 2).max(MIN_CAPACITY));
                }
                v.is_empty()
            }
        };
        if empty {
            // An empty class keeps no vector: spare storage costs its 24 bytes, no more.
            self.storage[at as usize] = Storage::One(Entry { addr: 0, units: 0, id: 0 });
            self.storage_of[c] = NONE;
            self.spare.push(at);
        }
        empty
    }

    /// Host memory held: (bytes that grow with cached blocks, fixed bytes of the table).
    pub fn heap_bytes(&self) -> (usize, usize) {
        let vectors: usize = self
            .storage
            .iter()
            .map(|s| match s {
                Storage::One(_) => 0,
                Storage::Many(v) => v.capacity() * core::mem::size_of::<Entry>(),
            })
            .sum();
        let growing = vectors + self.storage.capacity() * core::mem::size_of::<Storage>() + self.spare.capacity() * 2;
        (growing, self.storage_of.len() * 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(units: u32, addr: u64) -> Entry {
        Entry { addr, units, id: addr as u32 }
    }

    #[test]
    fn classes_stay_sorted_largest_first_through_one_and_many() {
        let mut s = ClassStore::<8>::new();
        s.insert(3, entry(5, 100));
        assert_eq!(s.class(3), [entry(5, 100)]);
        s.insert(3, entry(5, 50));
        s.insert(3, entry(6, 70));
        s.insert(3, entry(5, 200));
        assert_eq!(s.class(3), [entry(6, 70), entry(5, 200), entry(5, 100), entry(5, 50)]);
        assert!(s.class(2).is_empty());
        assert!(!s.remove_at(3, 0));
        assert!(!s.remove_at(3, 2));
        assert_eq!(s.class(3), [entry(5, 200), entry(5, 100)]);
        assert!(!s.remove_at(3, 1) && s.remove_at(3, 0));
        assert!(s.class(3).is_empty());
        // The emptied storage serves the next class that fills, without a vector.
        s.insert(5, entry(1, 9));
        assert_eq!((s.class(5), s.storage.len(), s.heap_bytes().0), ([entry(1, 9)].as_slice(), 1, 4 * 24 + 4 * 2));
    }

    #[test]
    fn a_draining_class_gives_back_half_its_room_once_a_quarter_full() {
        let mut s = ClassStore::<4>::new();
        for addr in 0..1000 {
            s.insert(2, entry(7, addr));
        }
        let capacity = |s: &ClassStore<4>| match &s.storage[s.storage_of[2] as usize] {
            Storage::Many(v) => v.capacity(),
            Storage::One(_) => 1,
        };
        assert_eq!(capacity(&s), 1024);
        let mut len = 1000;
        let mut drain_to = |s: &mut ClassStore<4>, to: usize| {
            while len > to {
                len -= 1;
                assert!(!s.remove_at(2, len));
            }
        };
        drain_to(&mut s, 257);
        assert_eq!(capacity(&s), 1024, "more than a quarter full: nothing given back");
        drain_to(&mut s, 256);
        assert_eq!(capacity(&s), 512);
        drain_to(&mut s, 129);
        assert_eq!(capacity(&s), 512);
        drain_to(&mut s, 128);
        assert_eq!(capacity(&s), 256);
        drain_to(&mut s, 1);
        assert_eq!(capacity(&s), MIN_CAPACITY, "never below the fewest a vector holds");
        assert_eq!(s.class(2), [entry(7, 999)], "the largest address, first in the class, is left");
    }

    #[test]
    fn a_lone_entry_needs_no_vector() {
        let mut s = ClassStore::<4096>::new();
        for c in 0..1000 {
            s.insert(c, entry(c as u32 + 1, c as u64));
        }
        let (growing, fixed) = s.heap_bytes();
        assert!(growing <= 1000 * 24 * 5 / 4 + 100, "{growing}");
        assert_eq!(fixed, 8192);
        assert_eq!(core::mem::size_of::<Storage>(), 24);
    }
}
