//! The free index of one pool: cached blocks ordered by (stream, size, address), the order
//! PyTorch's best fit searches in, with constant-time lookups.
//!
//! Per stream, blocks sit in size classes: exact classes for sizes below 512 KiB (one size
//! each) and 64 geometric classes per power of two above. Each class keeps its blocks in a
//! short vector sorted by (size, address) from the largest down, so the best block of a
//! class is the last and taking it moves nothing; a two-level bitmap finds the next
//! non-empty class with two `trailing_zeros`. Best fit is therefore: the smallest fitting
//! block of the request's own class, else the last block of the next non-empty class —
//! exactly the smallest block of at least the requested size, lowest address on ties.
//!
//! The classes' entries live in a `ClassStore` (`class_store.rs`), whose memory follows the
//! number of cached blocks rather than the number of classes.
//!
//! Invariants (kept by the allocator): a block is in its pool's free index iff its state is
//! `Free` and it is not parked in a followed plan's range (`planned_range.rs`); the key
//! stored for it equals its current (stream, size, address); a class's bit is set iff the
//! class holds a block; streams are kept sorted by stream id, and the first one's id is also
//! kept beside them, and every id, in the same order, in `stream_ids`. A stream's index goes
//! when `empty_cache` finds it caching nothing.

use alloc::vec::Vec;

use crate::data::class_store::{ClassStore, Entry};

use crate::base::device::Stream;

/// The ordering key of a cached block.
pub type Key = (Stream, u64, u64);

/// Sizes below this many 512-byte units get one class each.
const EXACT_CLASSES: u32 = 1024;
/// log2 of the classes per power of two above the exact range.
const SUB_BITS: u32 = 6;
/// Classes in all: enough for sizes up to 2^52 bytes.
const CLASSES: usize = 4096;
const WORDS: usize = CLASSES / 64;
/// Up to this many streams, a stream is found by scanning them.
const SCANNED_STREAMS: usize = 64;

/// The class of a size (a multiple of 512); monotone in the size.
#[inline]
fn class_of(size: u64) -> usize {
    let units = size >> 9;
    // Both candidates are computed and one is selected, without a branch: whether a size is
    // exact or geometric follows the workload and is hard to predict.
    let octave = (63 - (units | 1).leading_zeros()).max(10);
    let sub = (units >> (octave - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    let geometric = (EXACT_CLASSES + ((octave - 10) << SUB_BITS)) as usize + sub as usize;
    let class = if units < EXACT_CLASSES as u64 { units as usize } else { geometric };
    // Below CLASSES for every size up to 2^52 bytes (a test holds it); the `min` tells the
    // compiler so, which spares the bounds checks of every lookup by class.
    class.min(CLASSES - 1)
}

/// The cached blocks of one stream.
#[derive(Clone, Debug)]
struct StreamIndex {
    stream: Stream,
    top: u64,
    words: [u64; WORDS],
    classes: ClassStore<CLASSES>,
    len: usize,
}

impl StreamIndex {
    fn new(stream: Stream) -> StreamIndex {
        StreamIndex { stream, top: 0, words: [0; WORDS], classes: ClassStore::new(), len: 0 }
    }

    /// The entries of class `c`, largest first.
    #[inline]
    fn class(&self, c: usize) -> &[Entry] {
        self.classes.class(c)
    }

    /// The first non-empty class at or after `from`.
    #[inline(always)]
    fn next_class(&self, from: usize) -> Option<usize> {
        if from >= CLASSES {
            return None;
        }
        let (w, b) = (from / 64, from % 64);
        let here = self.words[w] & (!0u64 << b);
        if here != 0 {
            return Some(w * 64 + here.trailing_zeros() as usize);
        }
        let above = if w + 1 < 64 { self.top & (!0u64 << (w + 1)) } else { 0 };
        if above == 0 {
            return None;
        }
        let w = above.trailing_zeros() as usize;
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }

    /// The best fit's class, position in it, and entry.
    #[inline(always)]
    fn best_fit(&self, size: u64) -> Option<(usize, usize, Entry)> {
        let c = class_of(size);
        let v = self.class(c);
        if let Some(&last) = v.last() {
            if last.size() >= size {
                return Some((c, v.len() - 1, last));
            }
            let units = size.div_ceil(512) as u32;
            let i = v.partition_point(|e| e.units >= units);
            if i > 0 {
                return Some((c, i - 1, v[i - 1]));
            }
        }
        let n = self.next_class(c + 1)?;
        let v = self.class(n);
        v.last().map(|&e| (n, v.len() - 1, e))
    }

    /// Removes the entry at position `i` of class `c`.
    #[inline(always)]
    fn remove_at(&mut self, c: usize, i: usize) {
        if self.classes.remove_at(c, i) {
            self.words[c / 64] &= !(1 << (c % 64));
            if self.words[c / 64] == 0 {
                self.top &= !(1 << (c / 64));
            }
        }
        self.len -= 1;
    }

    #[inline(always)]
    fn insert(&mut self, e: Entry) {
        let c = class_of(e.size());
        self.classes.insert(c, e);
        self.words[c / 64] |= 1 << (c % 64);
        self.top |= 1 << (c / 64);
        self.len += 1;
    }

    #[inline(always)]
    fn remove(&mut self, size: u64, addr: u64) -> bool {
        let c = class_of(size);
        let v = self.class(c);
        let key = ((size >> 9) as u32, addr);
        let i = match v.last() {
            Some(last) if last.key() == key => v.len() - 1,
            _ => v.partition_point(|x| x.key() > key),
        };
        if i == v.len() || v[i].key() != key {
            return false;
        }
        self.remove_at(c, i);
        true
    }

    /// Entries in (size, address) order.
    fn entries(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.entries_from(0)
    }

    /// Entries of at least `size` bytes in (size, address) order.
    fn entries_from(&self, size: u64) -> impl Iterator<Item = &Entry> + '_ {
        let first = class_of(size);
        let mut c = self.next_class(first);
        core::iter::from_fn(move || {
            let cur = c?;
            c = self.next_class(cur + 1);
            let v = self.class(cur);
            let keep = if cur == first { v.partition_point(|e| e.size() >= size) } else { v.len() };
            Some(v[..keep].iter().rev())
        })
        .flatten()
    }
}

/// Where a best fit sits in a [`FreeIndex`], so that taking it needs no second search.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    stream: usize,
    class: usize,
    pos: usize,
    /// The block's (stream, size, address).
    pub key: Key,
    /// The block's id.
    pub id: u32,
}

/// Cached blocks of one pool, per stream.
#[derive(Clone, Debug, Default)]
pub struct FreeIndex {
    streams: Vec<StreamIndex>,
    /// The first stream's id (when there is one), kept here beside the vector's length:
    /// every malloc and free looks its stream up, and one stream is the common case. Found
    /// here with no search, its lookup costs no loop and no read of the stream's own index
    /// (knocking the search out saved 1.3–1.5 ns of gpt2_train's 49–51 ns an operation).
    first: Stream,
    /// Each index's stream, in the same order.
    stream_ids: Vec<Stream>,
}

impl FreeIndex {
    /// The position of `stream`'s index, if it has one.
    #[inline(always)]
    fn position(&self, stream: Stream) -> Option<usize> {
        if self.first == stream && !self.streams.is_empty() {
            return Some(0);
        }
        self.position_after_first(stream)
    }

    /// Searches the streams' ids, kept apart from their 600-byte indexes so that a search
    /// reads a few cache lines: a scan while they are few, a binary search beyond. A scan
    /// of the indexes themselves made a program of 1,000 streams pay 5x per operation.
    #[inline(never)]
    fn position_after_first(&self, stream: Stream) -> Option<usize> {
        if self.stream_ids.len() <= SCANNED_STREAMS {
            self.stream_ids.iter().position(|&s| s == stream)
        } else {
            self.stream_ids.binary_search(&stream).ok()
        }
    }

    /// Drops the indexes of streams that cache nothing (each holds a table of 8 KiB), so a
    /// program that makes streams and drops them does not keep one per stream it ever used.
    pub fn drop_empty_streams(&mut self) {
        self.streams.retain(|s| s.len > 0);
        self.streams.shrink_to_fit();
        self.stream_ids = self.streams.iter().map(|s| s.stream).collect();
        if let Some(s) = self.streams.first() {
            self.first = s.stream;
        }
    }

    #[inline]
    fn stream(&self, stream: Stream) -> Option<&StreamIndex> {
        self.position(stream).map(|i| &self.streams[i])
    }

    /// Adds a cached block.
    #[inline(always)]
    pub fn insert(&mut self, stream: Stream, size: u64, addr: u64, id: u32) {
        let i = match self.position(stream) {
            Some(i) => i,
            None => {
                let at = self.streams.partition_point(|s| s.stream < stream);
                // Room for exactly one more: a stream's index is 600 bytes and streams are few.
                self.streams.reserve_exact(1);
                self.streams.insert(at, StreamIndex::new(stream));
                self.stream_ids.insert(at, stream);
                self.first = self.streams[0].stream;
                at
            }
        };
        debug_assert!(size % 512 == 0 && size >> 9 <= u32::MAX as u64, "free block size {size}");
        self.streams[i].insert(Entry { addr, units: (size >> 9) as u32, id });
    }

    /// Removes a cached block; true if it was there.
    #[inline(always)]
    pub fn remove(&mut self, stream: Stream, size: u64, addr: u64) -> bool {
        match self.position(stream) {
            Some(i) => self.streams[i].remove(size, addr),
            None => false,
        }
    }

    /// The smallest block of `stream` of at least `size` bytes (lowest address on ties).
    #[inline(always)]
    pub fn find(&self, stream: Stream, size: u64) -> Option<Found> {
        let si = self.position(stream)?;
        let s = &self.streams[si];
        let (class, pos, e) = s.best_fit(size)?;
        Some(Found { stream: si, class, pos, key: (stream, e.size(), e.addr), id: e.id })
    }

    /// Takes out the block `found` names (nothing may have changed the index since).
    #[inline(always)]
    pub fn take(&mut self, found: &Found) {
        self.streams[found.stream].remove_at(found.class, found.pos);
    }

    /// The smallest block of `stream` of at least `size` bytes (lowest address on ties).
    #[inline(always)]
    pub fn best_fit(&self, stream: Stream, size: u64) -> Option<(Key, u32)> {
        self.find(stream, size).map(|f| (f.key, f.id))
    }

    /// Blocks of `stream` smaller than `size`, largest first (address order reversed on ties).
    pub fn before(&self, stream: Stream, size: u64) -> Vec<(Key, u32)> {
        let Some(s) = self.stream(stream) else { return Vec::new() };
        let mut out: Vec<(Key, u32)> =
            s.entries().take_while(|e| e.size() < size).map(|e| ((stream, e.size(), e.addr), e.id)).collect();
        out.reverse();
        out
    }

    /// Blocks of `stream` of at least `size` bytes, in index order (best fit first).
    pub fn iter_from(&self, stream: Stream, size: u64) -> impl Iterator<Item = (Key, u32)> + '_ {
        self.stream(stream)
            .into_iter()
            .flat_map(move |s| s.entries_from(size).map(move |e| ((stream, e.size(), e.addr), e.id)))
    }

    /// Every cached block in (stream, size, address) order.
    pub fn iter(&self) -> impl Iterator<Item = (Key, u32)> + '_ {
        self.streams.iter().flat_map(|s| s.entries().map(move |e| ((s.stream, e.size(), e.addr), e.id)))
    }

    /// Ids of every cached block, in index order.
    pub fn ids(&self) -> Vec<u32> {
        self.iter().map(|(_, id)| id).collect()
    }

    /// Checks that the streams are sorted and their ids mirrored (for the invariant checker).
    pub fn check_streams(&self) -> Result<(), alloc::string::String> {
        let ids: Vec<Stream> = self.streams.iter().map(|s| s.stream).collect();
        if ids != self.stream_ids || ids.windows(2).any(|w| w[0] >= w[1]) {
            return Err(alloc::format!("free index streams {ids:?} unsorted or not mirrored in {:?}", self.stream_ids));
        }
        if ids.first().is_some_and(|&f| f != self.first) {
            return Err(alloc::format!("free index's first stream {} is not {:?}", self.first, ids.first()));
        }
        Ok(())
    }

    /// Host memory held: (bytes that grow with cached blocks; fixed bytes of each stream:
    /// bitmaps and the table of storage by class). See `class_store.rs`.
    pub fn heap_bytes(&self) -> (usize, usize) {
        let per_stream = self.streams.iter().map(|s| s.classes.heap_bytes());
        let (growing, tables) = per_stream.fold((0, 0), |(g, t), (sg, st)| (g + sg, t + st));
        let ids = self.stream_ids.capacity() * core::mem::size_of::<Stream>();
        (growing, tables + ids + self.streams.capacity() * core::mem::size_of::<StreamIndex>())
    }

    /// Number of cached blocks.
    pub fn len(&self) -> usize {
        self.streams.iter().map(|s| s.len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_monotone_and_in_range() {
        let mut last = 0;
        for units in 1u64..5000 {
            let c = class_of(units << 9);
            assert!(c >= last);
            last = c;
        }
        assert!(class_of(1 << 52) < CLASSES);
        assert_eq!(class_of(512), 1);
    }

    #[test]
    fn sizes_below_512_kib_get_a_class_each_and_each_power_of_two_above_gets_64() {
        // Within a class the search is exact whatever the classes are, so only this test
        // sees classes too coarse to keep a lookup short.
        for units in 1u64..EXACT_CLASSES as u64 {
            assert_eq!(class_of(units << 9), units as usize);
        }
        for octave in 10..40 {
            let first = class_of(1 << (octave + 9));
            assert_eq!(first, EXACT_CLASSES as usize + (octave - 10) * 64, "octave {octave}");
            let step = 1u64 << (octave - 6 + 9);
            for sub in 0..64u64 {
                let size = (1u64 << (octave + 9)) + sub * step;
                assert_eq!(class_of(size), first + sub as usize, "{size} bytes");
                assert_eq!(class_of(size + step - 512), first + sub as usize, "{} bytes", size + step - 512);
            }
        }
    }

    #[test]
    fn best_fit_is_smallest_then_lowest_address() {
        let mut f = FreeIndex::default();
        f.insert(0, 3 << 20, 0x5000_0000, 1);
        f.insert(0, 3 << 20, 0x1000_0000, 2);
        f.insert(0, (3 << 20) + 512, 0x0800_0000, 3);
        f.insert(0, 100 << 20, 0x0100_0000, 4);
        f.insert(1, 1 << 20, 0x0, 5);
        assert_eq!(f.best_fit(0, 2 << 20).unwrap().1, 2);
        assert_eq!(f.best_fit(0, (3 << 20) + 1).unwrap().1, 3);
        assert_eq!(f.best_fit(0, (3 << 20) + 1024).unwrap().1, 4);
        assert_eq!(f.best_fit(0, 101 << 20), None);
        assert_eq!(f.best_fit(1, 512).unwrap().1, 5);
        assert_eq!(f.best_fit(2, 512), None);
        let order: Vec<u32> = f.iter().map(|(_, id)| id).collect();
        assert_eq!(order, [2, 1, 3, 4, 5]);
        assert_eq!(f.iter_from(0, (3 << 20) + 1).map(|(_, id)| id).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(f.before(0, 100 << 20).iter().map(|(_, id)| *id).collect::<Vec<_>>(), [3, 1, 2]);
        assert!(f.remove(0, 3 << 20, 0x1000_0000));
        assert!(!f.remove(0, 3 << 20, 0x1000_0000));
        assert_eq!(f.best_fit(0, 2 << 20).unwrap().1, 1);
        assert_eq!(f.len(), 4);
    }

    #[test]
    fn each_stream_finds_its_own_blocks_whichever_stream_came_first() {
        let mut f = FreeIndex::default();
        assert_eq!(f.best_fit(0, 512), None, "an empty index, asked for the default id 0");
        f.insert(7, 1 << 20, 0x7000_0000, 1);
        assert_eq!(f.best_fit(0, 512), None);
        assert_eq!(f.best_fit(3, 512), None);
        // A smaller id now sorts first.
        f.insert(3, 2 << 20, 0x3000_0000, 2);
        f.insert(0, 4 << 20, 0x0000_0000, 3);
        f.insert(9, 8 << 20, 0x9000_0000, 4);
        for (stream, id) in [(0, 3), (3, 2), (7, 1), (9, 4)] {
            assert_eq!(f.best_fit(stream, 512).map(|(_, i)| i), Some(id), "stream {stream}");
        }
        assert!(f.remove(7, 1 << 20, 0x7000_0000));
        assert!(!f.remove(3, 1 << 20, 0x7000_0000), "stream 7's block is not stream 3's");
        assert_eq!(f.best_fit(7, 512), None);
    }

    #[test]
    fn memory_follows_the_cached_blocks_not_the_fullest_moment() {
        let mut f = FreeIndex::default();
        // One block at a time in 1000 different classes: one vector serves them all.
        for units in 1..=1000u64 {
            f.insert(0, units << 9, units << 20, units as u32);
            assert!(f.remove(0, units << 9, units << 20));
        }
        let one_vector = 4 * core::mem::size_of::<Entry>() + 32;
        assert!(f.heap_bytes().0 <= 2 * one_vector, "{:?}", f.heap_bytes());
        // A class that filled up and drained gives its room back.
        for i in 0..10_000u64 {
            f.insert(0, 4 << 20, i << 23, i as u32);
        }
        let full = f.heap_bytes().0;
        for i in 1..10_000u64 {
            assert!(f.remove(0, 4 << 20, i << 23));
        }
        assert!(full >= 10_000 * 16 && f.heap_bytes().0 <= 2 * one_vector, "{full} then {:?}", f.heap_bytes());
        assert_eq!(f.best_fit(0, 512).map(|(k, _)| k), Some((0, 4 << 20, 0)));
        // The fixed part is two bytes per class and stream, not a vector per class.
        assert!(f.heap_bytes().1 <= CLASSES * 2 + 1024, "{:?}", f.heap_bytes());
    }

    #[test]
    fn taking_a_found_block_removes_that_block_alone() {
        use alloc::collections::BTreeMap;
        let mut f = FreeIndex::default();
        let mut model: BTreeMap<Key, u32> = BTreeMap::new();
        // Several blocks to a class, exact and geometric, so the one found sits anywhere in it.
        let mut id = 0;
        for units in [3u64, 3, 3, 7, 7, 2000, 2001, 2001, 2040, 5000] {
            id += 1;
            let key = (0, units << 9, u64::from(id) << 30);
            f.insert(key.0, key.1, key.2, id);
            model.insert(key, id);
        }
        // 2,001 units first, while the smaller 2,000 is still the last of their class.
        for size in [512u64, 3 << 9, 4 << 9, 2001 << 9, 2000 << 9, 1 << 20, 512, 1 << 21, 512, 512] {
            let want = model.range((0, size, 0)..).next().map(|(k, v)| (*k, *v));
            let found = f.find(0, size);
            assert_eq!(found.map(|x| (x.key, x.id)), want, "{size} bytes");
            if let Some(found) = found {
                f.take(&found);
                model.remove(&found.key);
            }
            assert_eq!(f.iter().collect::<Vec<_>>(), model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn the_stream_check_fails_on_streams_out_of_order_or_unmirrored() {
        let mut f = FreeIndex::default();
        f.insert(5, 512, 0, 1);
        f.insert(2, 512, 512, 2);
        assert_eq!(f.check_streams(), Ok(()));
        let mut swapped = f.clone();
        swapped.streams.swap(0, 1);
        assert!(swapped.check_streams().is_err(), "streams out of order");
        let mut unmirrored = f.clone();
        unmirrored.stream_ids[1] = 9;
        assert!(unmirrored.check_streams().is_err(), "ids not those of the streams");
        let mut first = f.clone();
        first.first = 5;
        assert!(first.check_streams().is_err(), "the first stream's id kept wrong");
    }

    #[test]
    fn dropping_empty_streams_keeps_those_that_cache_something() {
        let mut f = FreeIndex::default();
        f.insert(1, 512, 0, 1);
        f.insert(4, 1024, 512, 2);
        f.insert(6, 512, 4096, 3);
        assert!(f.remove(1, 512, 0) && f.remove(6, 512, 4096));
        let before = f.heap_bytes().1;
        f.drop_empty_streams();
        assert_eq!(f.stream_ids, [4]);
        assert_eq!(f.best_fit(4, 512), Some(((4, 1024, 512), 2)));
        assert!(f.heap_bytes().1 * 2 < before, "{before} then {:?}", f.heap_bytes());
        assert_eq!(f.check_streams(), Ok(()));
    }

    #[test]
    fn a_streams_fixed_bytes_are_its_table_and_bitmaps() {
        let mut f = FreeIndex::default();
        f.insert(0, 512, 0, 1);
        let one = f.heap_bytes().1;
        let least = CLASSES * 2 + core::mem::size_of::<StreamIndex>() + core::mem::size_of::<Stream>();
        assert!(one >= least && one <= least + 1024, "{one} fixed bytes for one stream");
        f.insert(1, 512, 512, 2);
        let two = f.heap_bytes().1;
        assert!(two >= 2 * least && two <= 2 * least + 2048, "{two} fixed bytes for two streams");
    }

    #[test]
    fn agrees_with_an_ordered_set() {
        use alloc::collections::BTreeMap;
        let mut f = FreeIndex::default();
        let mut model: BTreeMap<Key, u32> = BTreeMap::new();
        let mut x: u64 = 12345;
        // Miri interprets every step; a tenth still empties, refills and shrinks classes.
        let steps = if cfg!(miri) { 2_000 } else { 20_000 };
        for i in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let size = ((x % 4096) + 1) << (9 + (x >> 60) % 12);
            let stream = (x >> 40) % 3;
            let addr = ((x >> 20) % (1 << 30)) << 9;
            let key = (stream, size, addr);
            if x % 3 == 0 && !model.is_empty() {
                let k = *model.keys().nth((x >> 8) as usize % model.len()).unwrap();
                model.remove(&k);
                assert!(f.remove(k.0, k.1, k.2));
            } else if !model.contains_key(&key) && !model.keys().any(|k| k.2 == addr) {
                model.insert(key, i);
                f.insert(stream, size, addr, i);
            }
            let want = model.range((stream, size, 0)..).next().filter(|(k, _)| k.0 == stream).map(|(k, v)| (*k, *v));
            assert_eq!(f.best_fit(stream, size), want);
        }
        let all: Vec<(Key, u32)> = model.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(f.iter().collect::<Vec<_>>(), all);
    }
}
