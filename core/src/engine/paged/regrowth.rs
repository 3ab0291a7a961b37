//! Tensors regrown by copy: a stream whose misses keep asking for a block just larger than one
//! it freed since its previous miss (a KV cache grown by concatenation: each decoding step
//! allocates every layer's K and V a token longer, copies, frees the old) gets a region of its
//! own, from the top of what its large range has mapped to the range's end.
//!
//! Why: under the usual placement such a stream moves pages on nearly every step. No freed
//! block fits the next, longer tensor, so a miss fills the smallest run with idle chunks taken
//! from the holes just freed, and the K or V meant for those holes misses in turn: tens of
//! thousands of maps a generation, while the peak is no lower (docs/design.md, "Tensors
//! regrown by copy"). In the region, misses are placed by the usual rule but only there, so
//! the region grows at its top as expandable segments grow, and the holes freed in it keep
//! their pages while the device can make new ones: freed K and V holes lie side by side and
//! merge, and the next, longer tensor fits the merged hole. Once the device (or the memory
//! fraction) refuses new pages, the region's idle chunks move like any others.
//!
//! The detector: a miss counts as a regrowth when, since the stream's previous miss, a large
//! block was freed just after a longer one was handed out (the only one since the free before),
//! and is at least 7/8 of it (the copy's source, freed once copied), or just after two longer
//! ones alike (K and V regrown as a pair) where the tensors are long enough for slots; a
//! running share (each miss weighs 1/16) above one half turns the region on, until its range
//! is released (by `empty_cache`, once nothing is mapped there), slotted or packed by the size
//! of the tensors regrown (`region.rs`). On the training traces it never does; on decoding
//! traces it does within a dozen misses of the first step.
//!
//! Invariants: streams are sorted and unique; a stream has at most one region, in the large
//! pool, lying in one of its own ranges (not a planned layout's); a released range takes its
//! region with it.

use alloc::vec::Vec;

use crate::base::device::Stream;
use crate::data::streams::position_by_stream;

/// What a miss adds to the score when it looks like a regrowth; the score loses a sixteenth
/// at every miss, so it tends to 16 times this when every miss is one.
const REGROWTH_WEIGHT: u32 = 64;

/// The score above which a stream gets its region: half of every miss a regrowth.
const REGION_SCORE: u32 = 8 * REGROWTH_WEIGHT;

/// A stream's region: addresses `[from, end)` of one of its large ranges, cut from `from` on
/// into slots of `slot` bytes, or not cut (`slot` 0: a packed region). `region.rs` says when
/// a region is cut and how requests are placed in its slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub from: u64,
    pub end: u64,
    pub slot: u64,
}

impl Region {
    /// True when `addr` lies in the region.
    #[inline]
    pub fn holds(&self, addr: u64) -> bool {
        (self.from..self.end).contains(&addr)
    }

    /// The start of the slot holding `addr`, an address of a slotted region.
    #[inline]
    pub fn slot_start(&self, addr: u64) -> u64 {
        let slot = self.slot.max(1);
        self.from + addr.saturating_sub(self.from) / slot * slot
    }

    /// The first slot start at or after `addr` (the region's start for an address before it).
    #[inline]
    pub fn next_slot_start(&self, addr: u64) -> u64 {
        let slot = self.slot.max(1);
        self.from + addr.saturating_sub(self.from).div_ceil(slot) * slot
    }

    /// True when a request of `size` bytes is placed at a slot's start: the region is slotted
    /// and the request is at least a sixteenth of a slot (a tensor regrown, a prompt's
    /// projection); smaller ones (a step's logits) go where they fit best.
    #[inline]
    pub fn slotted(&self, size: u64) -> bool {
        self.slot > 0 && size.saturating_mul(SLOTTED_FRACTION) >= self.slot
    }
}

/// A request of at least a slot over this is placed at a slot's start.
const SLOTTED_FRACTION: u64 = 16;

/// How well a slot start fits a request: the bytes mapped under the request, and in the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotFit {
    pub under: u64,
    pub slot: u64,
}

impl SlotFit {
    /// More mapped under the request (fewer pages to move), then fewer mapped in the slot
    /// (a slot mapped further kept for a longer request).
    pub(crate) fn better_than(&self, other: &SlotFit) -> bool {
        (self.under, core::cmp::Reverse(self.slot)) > (other.under, core::cmp::Reverse(other.slot))
    }
}

/// What holds an idle chunk back from moving while the device makes new pages
/// (`Allocator::region_idle`, `region.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegionIdle {
    /// Nothing: it moves as any idle chunk.
    Movable,
    /// It lies in a free slot: it moves before pages beyond the peak are made.
    FreeSlot,
    /// It lies in a packed region's hole: it moves only once the device gives no more.
    Hole,
}

/// One stream's detector and region.
#[derive(Clone, Copy, Debug)]
struct StreamRegrowth {
    stream: Stream,
    score: u32,
    region: Option<Region>,
    /// Bytes of the stream's last block handed out in the large pool.
    last_handed_out: u64,
    /// Bytes of the one handed out before it.
    handed_out_before: u64,
    /// Large blocks handed out on the stream since its last large free.
    handed_since_free: u32,
    /// Whether a block just short of the block handed out before it was freed since the
    /// stream's last miss: a tensor copied into a longer one, then freed.
    copied: bool,
    /// The longest such block freed just after two longer ones alike (of one size) were
    /// handed out since the free before, since the stream's last miss (0 when none): K and V
    /// regrown as a pair, both copies made before either old one is freed. Its own size, not
    /// `regrown`, decides whether the pair counts: a shorter tensor copied alone in the same
    /// interval would otherwise hide it.
    paired: u64,
    /// Bytes of the last copy's source freed, the size of the tensors regrown (no less than
    /// `paired`: a pair regrown since the last miss sets the size for a shorter copy after it).
    regrown: u64,
}

/// Every stream's detector and region, sorted by stream: every large allocation and free under
/// the paged policy looks its stream up, and a program may use thousands.
#[derive(Clone, Debug, Default)]
pub struct Regrowth {
    streams: Vec<StreamRegrowth>,
}

impl Regrowth {
    /// Where `stream` is, or would go.
    #[inline]
    fn position(&self, stream: Stream) -> Result<usize, usize> {
        position_by_stream(&self.streams, stream, |s| s.stream)
    }

    /// The region of `stream`, if it has one.
    pub fn region(&self, stream: Stream) -> Option<Region> {
        self.position(stream).ok().and_then(|i| self.streams[i].region)
    }

    /// Counts a miss of `stream`, a regrowth when a copy regrown was freed since its last
    /// miss, or a pair regrown of at least `pairs_from` bytes (below that a region is packed,
    /// and a pair's holes would pile up in it); returns the size of the last tensor regrown
    /// when the stream has no region yet and now should have one.
    pub(crate) fn note(&mut self, stream: Stream, pairs_from: u64) -> Option<u64> {
        let i = self.position(stream).unwrap_or_else(|i| {
            let fresh = StreamRegrowth {
                stream,
                score: 0,
                region: None,
                last_handed_out: 0,
                handed_out_before: 0,
                handed_since_free: 0,
                copied: false,
                paired: 0,
                regrown: 0,
            };
            self.streams.insert(i, fresh);
            i
        });
        let s = &mut self.streams[i];
        let paired = core::mem::take(&mut s.paired) >= pairs_from.max(1);
        let regrowth = core::mem::take(&mut s.copied) || paired;
        s.score = s.score - s.score / 16 + if regrowth { REGROWTH_WEIGHT } else { 0 };
        (s.region.is_none() && s.score > REGION_SCORE).then_some(s.regrown)
    }

    /// The stream's entry, if it has missed before (only those are watched).
    #[inline]
    fn watched(&mut self, stream: Stream) -> Option<&mut StreamRegrowth> {
        self.position(stream).ok().map(|i| &mut self.streams[i])
    }

    /// Notes a large block of `size` bytes handed out on `stream`.
    #[inline]
    pub fn handed_out(&mut self, stream: Stream, size: u64) {
        if let Some(s) = self.watched(stream) {
            s.handed_out_before = core::mem::replace(&mut s.last_handed_out, size);
            s.handed_since_free = s.handed_since_free.saturating_add(1);
        }
    }

    /// Notes a large block of `size` bytes freed on `stream`: a tensor copied into a longer
    /// one when the one block handed out since the last free is longer, and this one at least
    /// 7/8 of it. A loop freeing a block before asking for a longer one copies nothing (it
    /// frees first). A cache regrowing K and V before freeing either (the last two blocks
    /// handed out alike, then two freed) is a pair regrown: it counts only for tensors long
    /// enough for slots (`note`), where each goes to a slot of its own; in a packed region the
    /// freed pair's hole falls a little short of the next pair, and holes kept for it pile up
    /// (docs/design.md).
    #[inline]
    pub fn freed(&mut self, stream: Stream, size: u64) {
        if let Some(s) = self.watched(stream) {
            let copy = size < s.last_handed_out && s.last_handed_out - s.last_handed_out / 8 <= size;
            let single = copy && s.handed_since_free == 1;
            let pair = copy && s.handed_since_free >= 2 && s.handed_out_before == s.last_handed_out;
            s.copied |= single;
            if pair {
                s.paired = s.paired.max(size);
            }
            if single || pair {
                s.regrown = size.max(s.paired);
            }
            s.handed_since_free = 0;
        }
    }

    /// Gives `stream`, which has missed, its region.
    pub(crate) fn set(&mut self, stream: Stream, region: Region) {
        if let Some(s) = self.watched(stream) {
            s.region = Some(region);
        }
    }

    /// The region holding `addr`, if some stream's does.
    pub fn holding(&self, addr: u64) -> Option<Region> {
        self.streams.iter().filter_map(|s| s.region).find(|r| r.holds(addr))
    }

    /// Forgets every region lying in `[base, base + size)`, a range being released.
    pub fn forget_range(&mut self, base: u64, size: u64) {
        for s in &mut self.streams {
            if s.region.is_some_and(|r| (base..base + size).contains(&r.from)) {
                s.region = None;
            }
        }
    }

    /// Every stream's region.
    pub fn regions(&self) -> impl Iterator<Item = (Stream, Region)> + '_ {
        self.streams.iter().filter_map(|s| s.region.map(|r| (s.stream, r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One decoding step's tensor on `stream`: the longer copy handed out, the old one freed,
    /// then the miss of the next request.
    fn regrow(r: &mut Regrowth, stream: Stream, old: u64) -> bool {
        r.handed_out(stream, old + old / 16);
        r.freed(stream, old);
        r.note(stream, u64::MAX).is_some()
    }

    #[test]
    fn a_region_is_due_once_over_half_of_the_recent_misses_follow_a_copy() {
        let mut r = Regrowth::default();
        assert!(r.note(7, u64::MAX).is_none(), "a first miss watches the stream");
        let due = (1..=40).position(|step| regrow(&mut r, 7, step << 20)).expect("due");
        assert!((8..16).contains(&due), "due after {} regrowths", due + 1);
        r.set(7, Region { from: 0, end: 1, slot: 0 });
        assert!(!regrow(&mut r, 7, 64 << 20), "due once");
    }

    #[test]
    fn a_block_freed_before_a_longer_one_is_asked_for_or_far_shorter_is_no_copy() {
        let mut r = Regrowth::default();
        r.note(1, u64::MAX);
        for step in 1..200u64 {
            // Freed first, then the longer one handed out.
            r.freed(1, step << 20);
            r.handed_out(1, (step + 1) << 20);
            assert!(r.note(1, u64::MAX).is_none());
            // Freed after a block twice as long: a copy into something else.
            r.handed_out(1, step << 21);
            r.freed(1, step << 20);
            assert!(r.note(1, u64::MAX).is_none());
        }
    }

    /// One decoding step's layer on `stream` regrowing K and V as a pair, after a temporary
    /// of `temporary` bytes (0: none): both longer copies handed out, both old ones freed, then
    /// the miss of the next request, where pairs of `pairs_from` bytes or more count.
    fn regrow_pair(r: &mut Regrowth, stream: Stream, old: u64, temporary: u64, pairs_from: u64) -> Option<u64> {
        if temporary > 0 {
            r.handed_out(stream, temporary);
        }
        r.handed_out(stream, old + old / 16);
        r.handed_out(stream, old + old / 16);
        r.freed(stream, old);
        r.freed(stream, old);
        r.note(stream, pairs_from)
    }

    #[test]
    fn a_pair_regrown_where_the_region_would_be_packed_is_not_counted() {
        let mut r = Regrowth::default();
        r.note(2, u64::MAX);
        for step in 1..200u64 {
            assert!(regrow_pair(&mut r, 2, step << 20, 0, u64::MAX).is_none());
        }
    }

    #[test]
    fn a_pair_of_tensors_long_enough_for_slots_counts_even_after_a_temporary_and_names_its_size() {
        let mut r = Regrowth::default();
        r.note(4, 32 << 20);
        let shorter = (1..=40).find_map(|step| regrow_pair(&mut r, 4, step << 20, 0, 32 << 20));
        assert_eq!(shorter, None, "pairs shorter than 32 MiB do not count");
        let due = (64..=104).find_map(|step| regrow_pair(&mut r, 4, step << 20, 3 << 20, 32 << 20).map(|r| (step, r)));
        let (step, regrown) = due.expect("a region is due");
        assert_eq!(regrown, step << 20, "the size of the tensors regrown (the copies' sources)");
        let mut unequal = Regrowth::default();
        unequal.note(5, 0);
        for step in 1..200u64 {
            let old = step << 20;
            // Two blocks handed out, the second not the first's twin: no pair.
            unequal.handed_out(5, old + old / 2);
            unequal.handed_out(5, old + old / 16);
            unequal.freed(5, old);
            assert!(unequal.note(5, 0).is_none());
        }
    }

    /// A pair of K and V regrown, then a shorter tensor copied alone before the next miss:
    /// the pair counts and names the size, which the shorter copy used to set.
    #[test]
    fn a_pair_counts_and_names_its_size_though_a_shorter_tensor_is_copied_after_it() {
        let mut r = Regrowth::default();
        r.note(6, 32 << 20);
        let due = (64..=104u64).find_map(|step| {
            let old = step << 20;
            r.handed_out(6, old + old / 16);
            r.handed_out(6, old + old / 16);
            r.freed(6, old);
            r.freed(6, old);
            r.handed_out(6, 9 << 20);
            r.freed(6, 8 << 20);
            r.note(6, 32 << 20).map(|size| (step, size))
        });
        let (step, size) = due.expect("a region is due");
        assert_eq!(size, step << 20, "the pair's size, not the shorter copy's");
    }

    #[test]
    fn streams_are_found_among_many_and_each_keeps_its_own_count() {
        let mut r = Regrowth::default();
        for s in (0..1000u64).rev() {
            r.note(s * 3, u64::MAX);
        }
        assert!(r.streams.windows(2).all(|w| w[0].stream < w[1].stream));
        let due = (1..=40).position(|step| regrow(&mut r, 300, step << 20));
        assert!(due.is_some());
        assert!(r.note(303, u64::MAX).is_none(), "another stream's count is its own");
        assert_eq!(r.region(300), None, "due, not given");
    }
}
