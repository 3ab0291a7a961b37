//! `largest_cached_block`, what PyTorch's `cacheInfo` reports (cuDNN's benchmark mode sizes its
//! workspace by it): the largest free block a request could take without a device call.

use cachalot_core::{Allocator, Config, SimDevice};

const MIB: u64 = 1 << 20;

#[test]
fn the_largest_cached_block_is_the_largest_free_one() {
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse("policy:pytorch").unwrap());
    assert_eq!(a.largest_cached_block(), 0, "nothing cached");
    let nine = a.malloc(9 * MIB, 0).unwrap(); // a 20 MiB segment: 9 MiB handed out, 11 MiB cached
    assert_eq!(a.largest_cached_block(), 11 * MIB);
    let three = a.malloc(3 * MIB, 0).unwrap(); // best fit: the 11 MiB block, 8 MiB left
    assert_eq!(a.largest_cached_block(), 8 * MIB);
    a.free(nine).unwrap();
    assert_eq!(a.largest_cached_block(), 9 * MIB, "the freed block, beside the 3 MiB one still live");
    a.empty_cache().unwrap();
    assert_eq!(a.largest_cached_block(), 9 * MIB, "the segment holds a live block, so it stays");
    a.free(three).unwrap();
    assert_eq!(a.largest_cached_block(), 20 * MIB, "freed blocks merge back into the whole segment");
    a.empty_cache().unwrap();
    assert_eq!(a.largest_cached_block(), 0);
}

#[test]
fn under_cachalot_s_policy_it_never_exceeds_what_is_reserved() {
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::default());
    let xs: Vec<u64> = (1..8).map(|i| a.malloc(i * 3 * MIB + 512, 0).unwrap()).collect();
    for (i, x) in xs.iter().enumerate() {
        if i % 2 == 0 {
            a.free(*x).unwrap();
        }
    }
    let largest = a.largest_cached_block();
    assert!(largest >= 3 * MIB, "a freed block of at least 3 MiB is cached: {largest}");
    assert!(largest <= a.stats().reserved_bytes.all.current as u64);
}
