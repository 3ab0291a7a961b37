//! Hints where the blocks of one planned range lie: the range cut into cells of a power of
//! two bytes, each holding the id of the block last noted as covering it, and a two-level
//! bitmap of the cells holding one, so that the nearest hinted cell at or below an offset
//! is found in a few word operations however many cells lie empty between (a large block
//! covers thousands of cells and is noted in one).
//!
//! Invariants: a cell's bit is set iff its hint is not [`CellHints::EMPTY`]; a summary bit
//! is set iff its word is not zero. A hint is only a hint: the block it names may since have
//! moved or its id been reused, so callers check it before walking from it.

use alloc::vec;
use alloc::vec::Vec;

/// The most cells a range is cut into (4 bytes of hint and 1 bit each).
pub const MAX_CELLS: u64 = 1 << 16;

/// Per-cell hints over one range of `bytes`.
#[derive(Clone, Debug)]
pub struct CellHints {
    /// log2 of a cell's bytes.
    shift: u32,
    hints: Vec<u32>,
    words: Vec<u64>,
    summary: Vec<u64>,
}

impl CellHints {
    /// A cell holding no hint.
    pub const EMPTY: u32 = u32::MAX;

    /// Hints for a range of `bytes`, in cells of at least 512 bytes, a power of two: about
    /// [`MAX_CELLS`] of them at most (one more when `bytes` is not a power of two).
    pub fn new(bytes: u64) -> CellHints {
        let cell = (bytes / MAX_CELLS).next_power_of_two().max(512);
        let cells = bytes.div_ceil(cell).max(1) as usize;
        let words = cells.div_ceil(64);
        CellHints {
            shift: cell.trailing_zeros(),
            hints: vec![Self::EMPTY; cells],
            words: vec![0; words],
            summary: vec![0; words.div_ceil(64)],
        }
    }

    /// Notes block `id` as covering `offset`; offsets past the range are ignored.
    #[inline]
    pub fn note(&mut self, offset: u64, id: u32) {
        let c = (offset >> self.shift) as usize;
        let Some(h) = self.hints.get_mut(c) else { return };
        *h = id;
        self.words[c / 64] |= 1 << (c % 64);
        self.summary[c / 4096] |= 1 << (c / 64 % 64);
    }

    /// The nearest hint at or below `offset` that `keep` accepts, given the offsets
    /// `[start, end)` its cell spans; the hints it rejects on the way are cleared, so no
    /// later search pays for them again.
    pub fn nearest_below(&mut self, offset: u64, mut keep: impl FnMut((u64, u64), u32) -> bool) -> Option<u32> {
        let mut next = self.highest_at_or_below((offset >> self.shift) as usize);
        while let Some(c) = next {
            let start = (c as u64) << self.shift;
            if keep((start, start + (1 << self.shift)), self.hints[c]) {
                return Some(self.hints[c]);
            }
            self.clear(c);
            next = c.checked_sub(1).and_then(|c| self.highest_at_or_below(c));
        }
        None
    }

    /// Empties cell `c`.
    fn clear(&mut self, c: usize) {
        self.hints[c] = Self::EMPTY;
        self.words[c / 64] &= !(1 << (c % 64));
        if self.words[c / 64] == 0 {
            self.summary[c / 4096] &= !(1 << (c / 64 % 64));
        }
    }

    /// The highest hinted cell at or below `c`.
    fn highest_at_or_below(&self, c: usize) -> Option<usize> {
        let c = c.min(self.hints.len() - 1);
        let (w, b) = (c / 64, c % 64);
        let here = self.words[w] & (!0u64 >> (63 - b));
        if here != 0 {
            return Some(w * 64 + 63 - here.leading_zeros() as usize);
        }
        let mut s = w / 64;
        let mut below = self.summary[s] & ((1u64 << (w % 64)) - 1);
        loop {
            if below != 0 {
                let w = s * 64 + 63 - below.leading_zeros() as usize;
                return Some(w * 64 + 63 - self.words[w].leading_zeros() as usize);
            }
            s = s.checked_sub(1)?;
            below = self.summary[s];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hint at or below `offset`, nearest first, with its cell, found by looking at
    /// every cell.
    fn brute(hints: &CellHints, offset: u64) -> Vec<((u64, u64), u32)> {
        let c = ((offset >> hints.shift) as usize).min(hints.hints.len() - 1);
        let cell = 1u64 << hints.shift;
        (0..=c)
            .rev()
            .filter(|&q| hints.hints[q] != CellHints::EMPTY)
            .map(|q| ((q as u64 * cell, (q as u64 + 1) * cell), hints.hints[q]))
            .collect()
    }

    /// Every hint `nearest_below` offers, nearest first, rejecting all of them.
    fn offered(hints: &CellHints, offset: u64) -> Vec<((u64, u64), u32)> {
        let mut seen = Vec::new();
        hints.clone().nearest_below(offset, |cell, h| {
            seen.push((cell, h));
            false
        });
        seen
    }

    #[test]
    fn the_nearest_hints_below_are_found_across_empty_words_and_summaries() {
        let bytes = 64 << 30; // 2^16 cells of 1 MiB: 1024 words, 16 summary words
        let mut hints = CellHints::new(bytes);
        assert_eq!(hints.shift, 20);
        assert_eq!(offered(&hints, bytes - 1), vec![]);
        let cells = [0u64, 1, 63, 64, 4095, 4096, 4097, 20_000, 65_535];
        for (i, &c) in cells.iter().enumerate() {
            hints.note(c << 20 | 5, i as u32);
        }
        hints.note(bytes, 99); // past the range: ignored
        for offset in [0, 1 << 20, 62 << 20, 64 << 20, 4096 << 20, 30_000 << 20, bytes - 1, bytes + (7 << 30)] {
            assert_eq!(offered(&hints, offset), brute(&hints, offset), "offset {offset}");
        }
        hints.note(20_000 << 20, 7);
        assert_eq!(hints.nearest_below(25_000 << 20, |_, _| true), Some(7));
    }

    #[test]
    fn hints_rejected_are_cleared_and_the_search_goes_on_below() {
        let mut hints = CellHints::new(40 << 30);
        for c in [3u64, 64, 4096, 4100] {
            hints.note(c << 20, c as u32);
        }
        assert_eq!(hints.nearest_below(5000 << 20, |_, h| h == 64), Some(64));
        assert_eq!(brute(&hints, 5000 << 20).iter().map(|&(_, h)| h).collect::<Vec<_>>(), vec![64, 3]);
        assert_eq!((hints.words[64], hints.summary[1]), (0, 0), "emptied words leave the summary");
        assert_eq!(hints.nearest_below(5000 << 20, |_, _| false), None);
        assert_eq!(brute(&hints, 5000 << 20), vec![]);
    }

    #[test]
    fn clearing_one_cell_of_a_word_keeps_the_others_found_from_above() {
        let mut hints = CellHints::new(64 << 30); // 1 MiB cells: summary word 1 covers words 64-127
        for c in [4096u64, 4100, 4200, 8191] {
            hints.note(c << 20, c as u32);
        }
        // 8191 and 4200 (word 65) rejected and cleared; 4100 rejected too, 4096 taken.
        assert_eq!(hints.nearest_below(8191 << 20, |_, h| h == 4096), Some(4096));
        // 4096 is found again from word 93 through the summary: clearing 4100 left its
        // word's bit set, since 4096 still lies in that word.
        assert_eq!(offered(&hints, 6000 << 20), vec![((4096 << 20, 4097 << 20), 4096)]);
        assert_eq!(brute(&hints, 8191 << 20), offered(&hints, 8191 << 20));
        // Word 65, emptied, left the summary; word 64 did not.
        assert_eq!((hints.words[64], hints.words[65], hints.summary[1]), (1, 0, 1));
    }

    #[test]
    fn a_small_range_has_one_cell_per_512_bytes() {
        let mut hints = CellHints::new(3000);
        assert_eq!((hints.shift, hints.hints.len()), (9, 6));
        hints.note(1024, 3);
        assert_eq!(offered(&hints, 2999), vec![((1024, 1536), 3)]);
        assert_eq!(offered(&hints, 1023), vec![]);
    }
}
