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
//! block was freed just after a longer one was handed out, and is at least 7/8 of it (the
//! copy's source, freed once copied); a running share (each miss weighs 1/16) above one half
//! turns the region on, for good. On the training traces it never does; on decoding traces it
//! does within a dozen misses of the first step.
//!
//! Invariants: a stream has at most one region, in the large pool, lying in one of its own
//! ranges (not a planned layout's); `score <= 1024`; a released range takes its region with
//! it.

use alloc::vec::Vec;

use crate::base::device::Stream;

/// What a miss adds to the score when it looks like a regrowth; the score loses a sixteenth
/// at every miss, so it tends to 16 times this when every miss is one.
const REGROWTH_WEIGHT: u32 = 64;

/// The score above which a stream gets its region: half of every miss a regrowth.
const REGION_SCORE: u32 = 8 * REGROWTH_WEIGHT;

/// A stream's region: addresses `[from, end)` of one of its large ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub from: u64,
    pub end: u64,
}

impl Region {
    /// True when `addr` lies in the region.
    pub fn holds(&self, addr: u64) -> bool {
        (self.from..self.end).contains(&addr)
    }
}

/// One stream's detector and region.
#[derive(Clone, Copy, Debug)]
struct StreamRegrowth {
    stream: Stream,
    score: u32,
    region: Option<Region>,
    /// Bytes of the stream's last block handed out in the large pool.
    last_handed_out: u64,
    /// Whether a block just short of the block handed out before it was freed since the
    /// stream's last miss: a tensor copied into a longer one, then freed.
    copied: bool,
}

/// Every stream's detector and region, in the order streams first missed.
#[derive(Clone, Debug, Default)]
pub struct Regrowth {
    streams: Vec<StreamRegrowth>,
}

impl Regrowth {
    /// The region of `stream`, if it has one.
    pub fn region(&self, stream: Stream) -> Option<Region> {
        self.streams.iter().find(|s| s.stream == stream).and_then(|s| s.region)
    }

    /// Counts a miss of `stream`, a regrowth when a copy regrown was freed since its last
    /// miss; returns true when the stream has no region yet and now should.
    pub(crate) fn note(&mut self, stream: Stream) -> bool {
        let i = match self.streams.iter().position(|s| s.stream == stream) {
            Some(i) => i,
            None => {
                self.streams.push(StreamRegrowth { stream, score: 0, region: None, last_handed_out: 0, copied: false });
                self.streams.len() - 1
            }
        };
        let s = &mut self.streams[i];
        let regrowth = core::mem::take(&mut s.copied);
        s.score = s.score - s.score / 16 + if regrowth { REGROWTH_WEIGHT } else { 0 };
        s.region.is_none() && s.score > REGION_SCORE
    }

    /// The stream's entry, if it has missed before (only those are watched).
    #[inline]
    fn watched(&mut self, stream: Stream) -> Option<&mut StreamRegrowth> {
        if self.streams.first().is_some_and(|s| s.stream == stream) {
            return self.streams.first_mut();
        }
        self.streams.iter_mut().find(|s| s.stream == stream)
    }

    /// Notes a large block of `size` bytes handed out on `stream`.
    #[inline]
    pub fn handed_out(&mut self, stream: Stream, size: u64) {
        if let Some(s) = self.watched(stream) {
            s.last_handed_out = size;
        }
    }

    /// Notes a large block of `size` bytes freed on `stream`: a tensor copied into a longer
    /// one when the block handed out last is longer, and this one at least 7/8 of it. (A loop
    /// freeing a block before asking for a longer one is no regrowth: it frees first.)
    #[inline]
    pub fn freed(&mut self, stream: Stream, size: u64) {
        if let Some(s) = self.watched(stream) {
            s.copied |= size < s.last_handed_out && s.last_handed_out - s.last_handed_out / 8 <= size;
        }
    }

    pub(crate) fn set(&mut self, stream: Stream, region: Region) {
        if let Some(s) = self.streams.iter_mut().find(|s| s.stream == stream) {
            s.region = Some(region);
        }
    }

    /// True when `addr` lies in some stream's region.
    pub fn holds(&self, addr: u64) -> bool {
        self.streams.iter().any(|s| s.region.is_some_and(|r| r.holds(addr)))
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
