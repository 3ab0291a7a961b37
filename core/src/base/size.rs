//! Size rules: how a request is rounded, which pool serves it, and how large a new
//! segment is. These are PyTorch's constants and formulas; every function here is pure.
//!
//! Invariants: a rounded size is a multiple of [`MIN_BLOCK`] and never smaller than the
//! request; a segment size is never smaller than the rounded request it serves.

/// Smallest block, and the unit every block size is a multiple of.
pub const MIN_BLOCK: u64 = 512;
/// Largest rounded size served by the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size for small-pool requests.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Segment size for large requests below [`MIN_LARGE_ALLOC`], unless `large_segment_size_mb`
/// sets another.
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Requests at least this large get a segment of their own size (rounded to [`ROUND_LARGE`]).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Rounding unit of large segments.
pub const ROUND_LARGE: u64 = 2 << 20;
/// One mebibyte, the unit of the `_mb` config keys.
pub const MIB: u64 = 1 << 20;
/// Number of power-of-two intervals `roundup_power2_divisions` configures (1 MiB … 32 GiB and up).
pub const POWER2_INTERVALS: usize = 16;
/// Largest request the allocator accepts (1 TiB): beyond any device's memory and the
/// simulated device's address space, small enough that rounding can never overflow and that
/// every segment, and so every cached block carved from one, fits the free index's 32-bit
/// count of 512-byte units (under 2 TiB).
pub const MAX_REQUEST: u64 = 1 << 40;

/// Which free-block pool a request is served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pool {
    /// Rounded requests of at most 1 MiB, carved from 2 MiB segments.
    Small = 0,
    /// Everything larger.
    Large = 1,
}

impl Pool {
    /// The pool that serves a rounded size.
    #[inline]
    pub fn for_size(rounded: u64) -> Pool {
        if rounded <= SMALL_SIZE {
            Pool::Small
        } else {
            Pool::Large
        }
    }

    /// Index for per-pool arrays.
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name PyTorch's snapshot uses for a segment of this pool.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Small => "small",
            Pool::Large => "large",
        }
    }
}

/// Index of the power-of-two interval a size falls in: 0 for anything below 2 MiB,
/// 15 for 32 GiB and above.
#[inline]
pub fn power2_interval(size: u64) -> usize {
    let log = 63 - size.max(1).leading_zeros() as usize;
    log.saturating_sub(20).min(POWER2_INTERVALS - 1)
}

/// Rounds a request the way PyTorch does: up to 512 B, then to a multiple of 512 B, or,
/// when `divisions` (for this size's interval) is above 1, to the next of `divisions`
/// equal steps of the size's power of two. A size above [`MAX_REQUEST`], which no device
/// holds and the allocator refuses, comes back as it is rather than overflowing.
#[inline]
pub fn round_size(size: u64, divisions: &[u32; POWER2_INTERVALS]) -> u64 {
    round_size_by_rule(size, divisions).0
}

/// Which clause of [`round_size`] rounded a request, as the rule itself took it (explanations
/// read it rather than working it out again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundingRule {
    /// Below 512 B: the smallest block.
    SmallestBlock,
    /// `roundup_power2_divisions`: the next of equal steps between two powers of two.
    PowerOfTwoDivisions,
    /// A multiple of 512 B.
    MultipleOfMinBlock,
    /// Above [`MAX_REQUEST`]: left as it is, and refused.
    TooLarge,
}

impl RoundingRule {
    /// The rule in words.
    pub fn describe(self) -> &'static str {
        match self {
            RoundingRule::SmallestBlock => "the smallest block is 512 bytes",
            RoundingRule::PowerOfTwoDivisions => {
                "roundup_power2_divisions: the next of equal steps between powers of two"
            }
            RoundingRule::MultipleOfMinBlock => "blocks are multiples of 512 bytes",
            RoundingRule::TooLarge => "larger than any device: left as it is, and refused",
        }
    }
}

/// [`round_size`], with the clause that decided.
#[inline]
pub fn round_size_by_rule(size: u64, divisions: &[u32; POWER2_INTERVALS]) -> (u64, RoundingRule) {
    if size < MIN_BLOCK {
        return (MIN_BLOCK, RoundingRule::SmallestBlock);
    }
    if size > MAX_REQUEST {
        return (size, RoundingRule::TooLarge);
    }
    let div = divisions[power2_interval(size)] as u64;
    if div > 1 && size > MIN_BLOCK * div {
        (round_to_division(size, div), RoundingRule::PowerOfTwoDivisions)
    } else {
        (size.div_ceil(MIN_BLOCK) * MIN_BLOCK, RoundingRule::MultipleOfMinBlock)
    }
}

/// Rounds `size` up to the next of `divisions` equal steps between its power of two and
/// the next one.
fn round_to_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let below = size & !(step - 1);
    if below == size {
        size
    } else {
        below + step
    }
}

/// Size of the segment a fresh device allocation gets for a rounded request (one above
/// [`MAX_REQUEST`] comes back as it is); `large_segment` is the size shared by large requests
/// below [`MIN_LARGE_ALLOC`] ([`LARGE_BUFFER`] unless `large_segment_size_mb` says otherwise).
#[inline]
pub fn segment_size(rounded: u64, large_segment: u64) -> u64 {
    if rounded > MAX_REQUEST {
        rounded
    } else if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        large_segment
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// Formats a byte count the way PyTorch's out-of-memory message does
/// ("20.00 MiB", "1.50 GiB", "512 bytes").
pub fn format_size(bytes: u64) -> alloc::string::String {
    use alloc::format;
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if bytes <= 1024 {
        format!("{bytes} bytes")
    } else if b <= 1048576.0 {
        format!("{:.2} KiB", b / KIB)
    } else if b <= 1073741824.0 {
        format!("{:.2} MiB", b / (KIB * KIB))
    } else {
        format!("{:.2} GiB", b / (KIB * KIB * KIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [u32; POWER2_INTERVALS] = [0; POWER2_INTERVALS];

    #[test]
    fn small_requests_round_to_512() {
        assert_eq!(round_size(1, &NONE), 512);
        assert_eq!(round_size(511, &NONE), 512);
        assert_eq!(round_size(512, &NONE), 512);
        assert_eq!(round_size(513, &NONE), 1024);
    }

    #[test]
    fn power2_divisions_round_to_steps() {
        let mut four = NONE;
        four.fill(4);
        // 1 MiB + 1 lies in [1 MiB, 2 MiB): steps of 256 KiB.
        assert_eq!(round_size(MIB + 1, &four), MIB + 256 * 1024);
        assert_eq!(round_size(MIB, &four), MIB);
        // Sizes at or below 512 B × divisions keep plain rounding.
        assert_eq!(round_size(2000, &four), 2048);
        assert_eq!(round_size(1500, &four), 1536);
    }

    #[test]
    fn intervals_start_at_one_mebibyte() {
        assert_eq!(power2_interval(1), 0);
        assert_eq!(power2_interval(2 * MIB - 1), 0);
        assert_eq!(power2_interval(2 * MIB), 1);
        assert_eq!(power2_interval(1 << 40), 15);
    }

    #[test]
    fn sizes_no_device_holds_come_back_unrounded() {
        let four = [4; POWER2_INTERVALS];
        for size in [u64::MAX, u64::MAX - 511, MAX_REQUEST + 1] {
            assert_eq!(round_size(size, &[0; POWER2_INTERVALS]), size);
            assert_eq!(round_size(size, &four), size);
            assert_eq!(segment_size(size, LARGE_BUFFER), size);
        }
        assert_eq!(round_size(MAX_REQUEST, &four), MAX_REQUEST);
    }

    #[test]
    fn segment_sizes_follow_pytorch() {
        assert_eq!(segment_size(512, LARGE_BUFFER), SMALL_BUFFER);
        assert_eq!(segment_size(SMALL_SIZE, LARGE_BUFFER), SMALL_BUFFER);
        assert_eq!(segment_size(SMALL_SIZE + 512, LARGE_BUFFER), LARGE_BUFFER);
        assert_eq!(segment_size(MIN_LARGE_ALLOC - 512, LARGE_BUFFER), LARGE_BUFFER);
        assert_eq!(segment_size(MIN_LARGE_ALLOC, LARGE_BUFFER), MIN_LARGE_ALLOC);
        assert_eq!(segment_size(MIN_LARGE_ALLOC + 512, LARGE_BUFFER), 12 * MIB);
    }

    #[test]
    fn large_segment_size_sets_the_segment_of_requests_between_1_and_10_mib_only() {
        let large = 40 * MIB;
        assert_eq!(segment_size(SMALL_SIZE + 512, large), large);
        assert_eq!(segment_size(MIN_LARGE_ALLOC - 512, large), large);
        assert_eq!(segment_size(SMALL_SIZE, large), SMALL_BUFFER);
        assert_eq!(segment_size(MIN_LARGE_ALLOC, large), MIN_LARGE_ALLOC);
    }

    #[test]
    fn pool_boundary_is_one_mebibyte() {
        assert_eq!(Pool::for_size(SMALL_SIZE), Pool::Small);
        assert_eq!(Pool::for_size(SMALL_SIZE + 512), Pool::Large);
    }

    #[test]
    fn sizes_format_like_pytorch() {
        assert_eq!(format_size(512), "512 bytes");
        assert_eq!(format_size(20 * MIB), "20.00 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
    }
}
