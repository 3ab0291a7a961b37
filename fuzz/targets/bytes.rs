//! `Bytes`: reads numbers from the front of a fuzzer's input. Reading past the end gives
//! zeros, so every byte string is a valid input and a shorter one means "smaller values".

/// A cursor over fuzz input.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    /// A reader of `data` from its first byte.
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data }
    }

    /// True when every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next `n` bytes (at most 8) as a little-endian number.
    pub fn uint(&mut self, n: u32) -> u64 {
        (0..n).fold(0, |acc, i| acc | (self.u8() as u64) << (8 * i))
    }

    /// A number in `lo..=hi`, from as many bytes as the span needs.
    pub fn in_range(&mut self, lo: u64, hi: u64) -> u64 {
        let span = hi - lo;
        if span == 0 {
            return lo;
        }
        let bytes = (64 - span.leading_zeros()).div_ceil(8);
        let v = self.uint(bytes);
        lo + if span == u64::MAX { v } else { v % (span + 1) }
    }
}
