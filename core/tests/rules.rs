//! PyTorch 2.11's allocator rules, one test each: every test fails if its rule changes.

use cachalot_core::device::Device;
use cachalot_core::history::Action;
use cachalot_core::{AllocError, Allocator, Config, Decision, SimDevice};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn alloc_with(conf: &str, capacity: u64) -> Allocator<SimDevice> {
    let c = if conf.is_empty() { "policy:pytorch".to_string() } else { format!("policy:pytorch,{conf}") };
    Allocator::new(SimDevice::new(capacity), Config::parse(&c).unwrap())
}

fn pytorch() -> Allocator<SimDevice> {
    alloc_with("", 80 * GIB)
}

/// Size of the block an allocation got (allocated bytes grow by it).
fn block_size(a: &mut Allocator<SimDevice>, size: u64) -> u64 {
    let before = a.stats().allocated_bytes.all.current;
    a.malloc(size, 0).unwrap();
    (a.stats().allocated_bytes.all.current - before) as u64
}

fn checked(a: &Allocator<SimDevice>) {
    a.check_invariants().unwrap();
}

#[test]
fn requests_round_to_512_byte_blocks() {
    let mut a = pytorch();
    assert_eq!(block_size(&mut a, 1), 512);
    assert_eq!(block_size(&mut a, 512), 512);
    assert_eq!(block_size(&mut a, 513), 1024);
    assert_eq!(block_size(&mut a, 100_000), 100_352);
    checked(&a);
}

#[test]
fn roundup_power2_divisions_rounds_to_steps() {
    let mut a = alloc_with("roundup_power2_divisions:4", 80 * GIB);
    // 1200 B lies in an interval where 512 B × 4 divisions > size: plain rounding.
    assert_eq!(block_size(&mut a, 1200), 1536);
    // 5 MiB + 1 lies in [4 MiB, 8 MiB): four steps of 1 MiB.
    assert_eq!(block_size(&mut a, 5 * MIB + 1), 6 * MIB);
    let mut b = alloc_with("roundup_power2_divisions:[1:2,>:8]", 80 * GIB);
    // [1 MiB, 2 MiB) has 2 divisions: 1.1 MiB rounds to 1.5 MiB.
    assert_eq!(block_size(&mut b, MIB + 100 * KIB), MIB + 512 * KIB);
    // Later intervals have 8: 5 MiB + 1 rounds to 5.5 MiB.
    assert_eq!(block_size(&mut b, 5 * MIB + 1), 5 * MIB + 512 * KIB);
    // One division is no division: plain 512 B rounding, not the next power of two.
    let mut c = alloc_with("roundup_power2_divisions:[1:1,>:4]", 80 * GIB);
    assert_eq!(block_size(&mut c, MIB + 100 * KIB + 1), MIB + 100 * KIB + 512);
    checked(&a);
    checked(&b);
    checked(&c);
}

#[test]
fn small_requests_use_2mib_segments_and_large_ones_20mib() {
    let mut a = pytorch();
    a.malloc(MIB, 0).unwrap(); // rounded 1 MiB: small pool
    assert_eq!(a.stats().reserved_bytes.small_pool.current as u64, 2 * MIB);
    a.malloc(MIB + 1, 0).unwrap(); // large pool, below 10 MiB: 20 MiB segment
    assert_eq!(a.stats().reserved_bytes.large_pool.current as u64, 20 * MIB);
    assert_eq!(a.stats().num_device_alloc, 2);
    checked(&a);
    let mut b = pytorch();
    b.malloc(10 * MIB + 1, 0).unwrap(); // at least 10 MiB: own segment rounded up to 2 MiB
    assert_eq!(b.stats().reserved_bytes.large_pool.current as u64, 12 * MIB);
    b.malloc(10 * MIB - 512, 0).unwrap(); // just below 10 MiB: a 20 MiB segment
    assert_eq!(b.stats().reserved_bytes.large_pool.current as u64, 32 * MIB);
}

#[test]
fn small_pool_splits_when_512_bytes_remain() {
    let mut a = pytorch();
    let x = a.malloc(MIB, 0).unwrap();
    let y = a.malloc(MIB - 512, 0).unwrap();
    // The 2 MiB segment held 1 MiB + (1 MiB - 512): the last 512 B are a split-off block.
    assert_eq!(y, x + MIB);
    assert_eq!(a.stats().inactive_split_bytes.small_pool.current, 512);
    let z = a.malloc(512, 0).unwrap();
    assert_eq!(z, y + MIB - 512, "the 512-byte remainder is reused");
    assert_eq!(a.stats().num_device_alloc, 1);
    checked(&a);
}

#[test]
fn large_pool_splits_only_when_more_than_1mib_remains() {
    // A 20 MiB segment serving 19 MiB leaves exactly 1 MiB: not split.
    let mut a = pytorch();
    let p = a.malloc(19 * MIB, 0).unwrap();
    a.free(p).unwrap();
    assert_eq!(block_size(&mut a, 19 * MIB), 20 * MIB, "a 1 MiB remainder stays in the block");
    // Serving 19 MiB - 512 leaves 1 MiB + 512: split.
    let mut b = pytorch();
    let p = b.malloc(19 * MIB, 0).unwrap();
    b.free(p).unwrap();
    assert_eq!(block_size(&mut b, 19 * MIB - 512), 19 * MIB - 512);
    assert_eq!(b.stats().inactive_split_bytes.large_pool.current as u64, MIB + 512);
    checked(&a);
    checked(&b);
}

#[test]
fn best_fit_takes_the_smallest_block_that_fits() {
    let mut a = pytorch();
    let big = a.malloc(12 * MIB, 0).unwrap();
    let _sep1 = a.malloc(12 * MIB, 0).unwrap();
    let small = a.malloc(10 * MIB, 0).unwrap();
    let _sep2 = a.malloc(12 * MIB, 0).unwrap();
    a.free(big).unwrap();
    a.free(small).unwrap();
    assert_eq!(a.malloc(10 * MIB, 0).unwrap(), small, "10 MiB fits the 10 MiB block exactly");
    assert_eq!(a.malloc(11 * MIB, 0).unwrap(), big);
    checked(&a);
}

#[test]
fn best_fit_breaks_ties_by_lowest_address() {
    let mut a = pytorch();
    let p = a.malloc(12 * MIB, 0).unwrap();
    let q = a.malloc(12 * MIB, 0).unwrap();
    a.free(p).unwrap();
    a.free(q).unwrap();
    assert_eq!(a.malloc(12 * MIB, 0).unwrap(), p.min(q));
    checked(&a);
}

#[test]
fn cached_blocks_serve_only_their_own_stream() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 1).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(4 * MIB, 2).unwrap();
    assert_ne!(q, p);
    assert_eq!(a.stats().num_device_alloc, 2, "stream 2 gets a segment of its own");
    assert_eq!(a.malloc(4 * MIB, 1).unwrap(), p);
    checked(&a);
}

#[test]
fn below_max_split_size_never_takes_an_oversize_block() {
    let mut a = alloc_with("max_split_size_mb:100", 80 * GIB);
    let big = a.malloc(200 * MIB, 0).unwrap();
    a.free(big).unwrap();
    let p = a.malloc(50 * MIB, 0).unwrap();
    assert_ne!(p, big, "the cached 200 MiB block is oversize: not taken for 50 MiB");
    assert_eq!(a.stats().num_device_alloc, 2);
    assert_eq!(a.stats().oversize_segments.current, 1);
    checked(&a);
}

#[test]
fn oversize_requests_take_blocks_within_max_non_split_rounding() {
    let mut a = alloc_with("max_split_size_mb:100", 80 * GIB);
    let big = a.malloc(200 * MIB, 0).unwrap();
    a.free(big).unwrap();
    // 181 MiB + 20 MiB > 200 MiB: the 200 MiB block is close enough, and is not split.
    assert_eq!(a.malloc(181 * MIB, 0).unwrap(), big);
    assert_eq!(a.stats().allocated_bytes.all.current as u64, 200 * MIB);
    a.free(big).unwrap();
    // 180 MiB + 20 MiB = 200 MiB: too much waste, a new segment.
    assert_ne!(a.malloc(180 * MIB, 0).unwrap(), big);
    checked(&a);
    let mut b = alloc_with("max_split_size_mb:100,max_non_split_rounding_mb:64", 80 * GIB);
    let big = b.malloc(200 * MIB, 0).unwrap();
    b.free(big).unwrap();
    assert_eq!(b.malloc(150 * MIB, 0).unwrap(), big, "max_non_split_rounding_mb widens the window");
}

#[test]
fn freed_blocks_merge_with_free_neighbours() {
    let mut a = pytorch();
    let x = a.malloc(4 * MIB, 0).unwrap();
    let y = a.malloc(4 * MIB, 0).unwrap();
    let z = a.malloc(4 * MIB, 0).unwrap();
    a.free(x).unwrap();
    a.free(z).unwrap();
    assert_eq!(a.stats().inactive_split.large_pool.current, 2);
    a.free(y).unwrap();
    let segs = a.segments(0);
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].blocks.len(), 1, "x, y, z and the remainder merged into one block");
    assert_eq!(a.stats().inactive_split.large_pool.current, 0);
    checked(&a);
}

/// A cached block's snapshot entry reports no requested bytes: the field the block keeps them
/// in holds its cache stamp while cached (garbage collection's age), which leaked into
/// snapshots as a size.
#[test]
fn a_cached_block_reports_no_requested_bytes_in_snapshots() {
    let mut a = alloc_with("garbage_collection_threshold:0.5", GIB);
    a.set_memory_fraction(0.9).unwrap();
    let x = a.malloc(30 * MIB, 0).unwrap();
    for _ in 0..3 {
        let y = a.malloc(50 * MIB, 0).unwrap(); // lookups that age the cached blocks
        a.free(y).unwrap();
    }
    a.free(x).unwrap();
    let _z = a.malloc(60 * MIB, 0).unwrap();
    let blocks: Vec<_> = a.segments(0).into_iter().flat_map(|s| s.blocks).collect();
    assert!(blocks.iter().any(|b| b.state == "inactive"));
    for b in blocks.iter().filter(|b| b.state == "inactive") {
        assert_eq!(b.requested_size, 0, "{b:?}");
    }
    checked(&a);
}

#[test]
fn record_stream_delays_reuse_until_the_stream_finishes() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(p, 9).unwrap();
    a.device_mut().hold_stream(9);
    a.free(p).unwrap();
    assert_eq!(a.segments(0)[0].blocks[0].state, "active_pending_free");
    let q = a.malloc(4 * MIB, 0).unwrap();
    assert_ne!(q, p, "pending block is not reused");
    checked(&a);
    a.device_mut().finish_stream(9);
    // The pending free completes at the next malloc.
    let r = a.malloc(4 * MIB, 0).unwrap();
    assert_eq!(r, p);
    checked(&a);
}

/// PyTorch keeps the events of pending frees per stream: a free waiting on a stream whose
/// work finished completes even while an older free still waits on a busy stream.
#[test]
fn a_busy_stream_does_not_hold_up_frees_waiting_on_another() {
    let mut a = pytorch();
    let x = a.malloc(4 * MIB, 0).unwrap();
    let y = a.malloc(4 * MIB, 0).unwrap();
    let _keep = a.malloc(4 * MIB, 0).unwrap(); // x and y never merge into one free block
    a.record_stream(x, 1).unwrap();
    a.record_stream(y, 2).unwrap();
    a.device_mut().hold_stream(1);
    a.device_mut().hold_stream(2);
    a.free(x).unwrap();
    a.free(y).unwrap();
    a.device_mut().finish_stream(2);
    assert_eq!(a.malloc(4 * MIB, 0).unwrap(), y, "y's free completed behind x's pending one");
    assert_eq!(a.stats().active.all.current, 3, "x still pending");
    checked(&a);
}

#[test]
fn record_stream_on_the_allocation_stream_is_ignored() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 3).unwrap();
    a.record_stream(p, 3).unwrap();
    a.free(p).unwrap();
    assert_eq!(a.device().calls().events_recorded, 0);
    assert_eq!(a.malloc(4 * MIB, 3).unwrap(), p);
}

#[test]
fn pending_blocks_do_not_merge_until_their_events_complete() {
    let mut a = pytorch();
    let x = a.malloc(4 * MIB, 0).unwrap();
    let y = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(y, 5).unwrap();
    a.device_mut().hold_stream(5);
    a.free(y).unwrap();
    a.free(x).unwrap();
    assert_eq!(a.segments(0)[0].blocks.len(), 3, "x cached, y pending, remainder cached");
    checked(&a);
    a.empty_cache().unwrap(); // waits for the events, then merges and releases
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
    assert_eq!(a.stats().num_sync_all_streams, 1);
    checked(&a);
}

#[test]
fn empty_cache_releases_unsplit_segments_only() {
    let mut a = pytorch();
    let whole = a.malloc(12 * MIB, 0).unwrap();
    let part = a.malloc(2 * MIB, 0).unwrap(); // 20 MiB segment, split
    let _other = a.malloc(2 * MIB, 0).unwrap(); // same segment, stays allocated
    a.free(whole).unwrap();
    a.free(part).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.stats().reserved_bytes.all.current as u64, 20 * MIB);
    assert_eq!(a.stats().num_device_free, 1);
    checked(&a);
}

#[test]
fn memory_fraction_refuses_segments_beyond_the_limit() {
    let mut a = pytorch();
    a.set_memory_fraction(0.25).unwrap(); // 20 GiB of 80
    a.malloc(15 * GIB, 0).unwrap();
    let err = a.malloc(6 * GIB, 0).unwrap_err();
    let AllocError::OutOfMemory(r) = &err else { panic!("{err}") };
    assert_eq!(r.allowed, Some(20 * GIB));
    assert!(err.to_string().contains("20.00 GiB allowed"), "{err}");
    assert_eq!(a.stats().num_ooms, 1);
    assert!(a.malloc(4 * GIB, 0).is_ok());
    assert!(a.set_memory_fraction(1.5).is_err());
    checked(&a);
}

#[test]
fn per_process_memory_fraction_key_sets_the_limit() {
    let a = alloc_with("per_process_memory_fraction:0.5", 8 * GIB);
    assert_eq!(a.allowed_bytes(), Some(4 * GIB));
}

#[test]
fn out_of_memory_first_releases_cached_segments_and_retries() {
    let mut a = pytorch_with_capacity(100 * MIB);
    let p = a.malloc(60 * MIB, 0).unwrap();
    a.free(p).unwrap(); // 60 MiB cached
    let q = a.malloc(70 * MIB, 0).unwrap(); // device has 40 MiB free: release the cache, retry
    assert!(q > 0);
    assert_eq!(a.stats().num_alloc_retries, 1);
    assert_eq!(a.stats().num_device_free, 1);
    assert_eq!(a.stats().num_ooms, 0);
    checked(&a);
}

fn pytorch_with_capacity(capacity: u64) -> Allocator<SimDevice> {
    alloc_with("", capacity)
}

#[test]
fn oversize_cached_blocks_are_released_before_everything_else() {
    let mut a = alloc_with("max_split_size_mb:20", 100 * MIB);
    let big = a.malloc(50 * MIB, 0).unwrap();
    let small = a.malloc(30 * MIB, 0).unwrap();
    a.free(big).unwrap();
    a.free(small).unwrap();
    // 60 MiB: no cached block may serve it (not within 20 MiB of rounding); the device has
    // 20 MiB free. The 50 MiB block alone is not enough, so oversize blocks are released
    // largest first until 60 MiB are back — no full cache flush, no retry counted.
    a.malloc(60 * MIB, 0).unwrap();
    assert_eq!(a.stats().num_alloc_retries, 0);
    assert_eq!(a.stats().num_device_free, 2);
    checked(&a);
}

/// One cached oversize segment at least as large as the request (but too large to serve it:
/// more than 20 MiB of rounding) is released alone, the smallest such; smaller ones stay.
#[test]
fn one_oversize_cached_segment_large_enough_is_released_alone() {
    let mut a = alloc_with("max_split_size_mb:20", 100 * MIB);
    let large = a.malloc(64 * MIB, 0).unwrap();
    let smaller = a.malloc(22 * MIB, 0).unwrap();
    a.free(large).unwrap();
    a.free(smaller).unwrap();
    a.set_explain(true);
    a.malloc(30 * MIB, 0).unwrap(); // 14 MiB free on the device
    assert_eq!((a.stats().num_device_free, a.stats().num_alloc_retries), (1, 0));
    let decisions = a.take_decisions();
    assert!(
        decisions.iter().any(|d| matches!(d, Decision::Released { segments: 1, bytes, .. } if *bytes == 64 * MIB)),
        "{decisions:?}"
    );
    assert_eq!(a.reserved_bytes(), 52 * MIB, "the 22 MiB segment stays cached");
    let oversize = a.stats().oversize_segments;
    assert_eq!((oversize.current, oversize.peak, oversize.freed), (2, 2, 1), "22 and 30 MiB held, 64 MiB gone");
    checked(&a);
}

/// Releasing oversize segments largest first stops once enough is released, at the first
/// segment below `max_split_size`, and at another stream's segments.
#[test]
fn oversize_segments_are_released_only_as_far_as_needed() {
    let mut a = alloc_with("max_split_size_mb:20", 130 * MIB);
    let cached: Vec<u64> = [50, 30, 24, 10].iter().map(|&m| a.malloc(m * MIB, 0).unwrap()).collect();
    for p in cached {
        a.free(p).unwrap();
    }
    a.malloc(60 * MIB, 0).unwrap(); // 16 MiB free: 50 and 30 go back, 24 and 10 stay
    assert_eq!((a.stats().num_device_free, a.stats().num_alloc_retries), (2, 0));
    assert_eq!(a.reserved_bytes(), 94 * MIB);
    checked(&a);

    let mut a = alloc_with("max_split_size_mb:20", 100 * MIB);
    let other_stream = a.malloc(50 * MIB, 0).unwrap();
    let own = a.malloc(24 * MIB, 1).unwrap();
    a.free(other_stream).unwrap();
    a.free(own).unwrap();
    a.malloc(40 * MIB, 1).unwrap(); // 26 MiB free: stream 1's 24 MiB is not enough alone
    assert_eq!(a.stats().num_alloc_retries, 1, "stream 0's segment waits for the full release");
    checked(&a);
}

/// The out-of-memory report says where the cache sits: the largest cached block and the whole
/// segment around it, each segment's cached and live bytes, and what is pinned.
#[test]
fn out_of_memory_reports_where_the_cache_sits() {
    let mut a = pytorch_with_capacity(64 * MIB);
    let _full = a.malloc(12 * MIB, 0).unwrap(); // a 12 MiB segment, nothing cached
    let _live = a.malloc(5 * MIB, 0).unwrap(); // a 20 MiB segment, 15 MiB of it cached
    let _small = a.malloc(1000, 0).unwrap(); // a 2 MiB segment, all but 1 KiB cached
    let tiny = a.malloc(1000, 0).unwrap();
    a.free(tiny).unwrap();
    let whole = a.malloc(16 * MIB, 0).unwrap();
    a.free(whole).unwrap(); // a 16 MiB segment, all cached
    let err = a.malloc(40 * MIB, 0).unwrap_err(); // 30 MiB could be free, at most
    let AllocError::OutOfMemory(r) = &err else { panic!("{err}") };
    let spot = r.largest_free.as_ref().unwrap();
    assert_eq!((spot.size, spot.segment_size), (15 * MIB, 20 * MIB));
    assert_eq!(r.largest_free_block(), 15 * MIB);
    assert_eq!((r.pinned_bytes, r.pinned_segments), (17 * MIB - KIB, 2));
    let uses: Vec<_> = r.segments.iter().map(|u| (u.size, u.free, u.active, u.largest_free)).collect();
    assert_eq!(
        uses,
        [(20 * MIB, 15 * MIB, 5 * MIB, 15 * MIB), (2 * MIB, 2 * MIB - KIB, KIB, 2 * MIB - KIB)],
        "the 16 MiB segment was released to retry"
    );
    assert!(err.to_string().contains("the largest cached block is 15.00 MiB"), "{err}");
    assert!(err.to_string().contains("(20.00 MiB)"), "{err}");
    checked(&a);
}

#[test]
fn out_of_memory_reports_the_figures() {
    let mut a = pytorch_with_capacity(64 * MIB);
    let _keep = a.malloc(40 * MIB, 0).unwrap();
    let err = a.malloc(30 * MIB, 0).unwrap_err();
    let AllocError::OutOfMemory(r) = &err else { panic!("{err}") };
    assert_eq!((r.requested, r.capacity, r.device_free), (30 * MIB, 64 * MIB, 24 * MIB));
    assert_eq!((r.allocated, r.reserved, r.allowed), (40 * MIB, 40 * MIB, None));
    let msg = err.to_string();
    for part in
        ["Tried to allocate 30.00 MiB", "total capacity of 64.00 MiB", "24.00 MiB is free", "40.00 MiB is allocated"]
    {
        assert!(msg.contains(part), "{msg}");
    }
    assert_eq!(a.stats().num_ooms, 1);
    assert_eq!(a.stats().num_alloc_retries, 1);
    assert!(msg.contains("the live allocations and this request do not fit together"), "{msg}");
    // A request larger than the whole device, with nothing live: the message blames the
    // request, not allocations that are not there.
    let mut empty = pytorch_with_capacity(64 * MIB);
    let msg = empty.malloc(100 * MIB, 0).unwrap_err().to_string();
    assert!(msg.contains("the request alone is larger than the 64.00 MiB this allocator may hold"), "{msg}");
    checked(&a);
}

/// Under virtual memory the report speaks of address ranges and pages: a cached block left
/// over lies in pages mapped together with live memory, not in a segment that could be freed.
#[test]
fn out_of_memory_under_virtual_memory_names_ranges_and_shared_pages() {
    let mut a = alloc_with("policy:cachalot", 100 * MIB);
    // Twenty 5 MiB tensors, every other one freed: each hole shares a page with its neighbours.
    let live: Vec<u64> = (0..20).map(|_| a.malloc(5 * MIB, 0).unwrap()).collect();
    for addr in live.iter().step_by(2) {
        a.free(*addr).unwrap();
    }
    let msg = a.malloc(60 * MIB, 0).unwrap_err().to_string();
    assert!(msg.contains("in the large address range at 0x") && msg.contains(" mapped)"), "{msg}");
    assert!(msg.contains("lies in pages mapped together with live allocations in 1 address range(s)"), "{msg}");
    assert!(!msg.contains("segment"), "{msg}");
    checked(&a);
}

#[test]
fn garbage_collection_releases_old_cached_blocks_above_the_threshold() {
    let mut a = alloc_with("garbage_collection_threshold:0.5", 100 * MIB);
    a.set_memory_fraction(0.999).unwrap();
    let old = a.malloc(30 * MIB, 0).unwrap();
    a.free(old).unwrap();
    for _ in 0..5 {
        let p = a.malloc(12 * MIB, 0).unwrap(); // served by splitting... or new segments
        a.free(p).unwrap();
    }
    // Reserved is at least 30 MiB; a request that needs a new segment over the 50 MiB
    // threshold makes garbage collection return the unused cached segment.
    let _x = a.malloc(40 * MIB, 0).unwrap();
    let _y = a.malloc(40 * MIB, 0).unwrap();
    assert!(a.stats().num_device_free >= 1, "garbage collection released a cached segment");
    assert_eq!(a.stats().num_alloc_retries, 0, "without a full cache flush");
    checked(&a);
}

/// A memory fraction of 1.0 sets no limit in PyTorch (`setMemoryFraction` leaves
/// `allowed_memory_maximum` empty), so garbage collection stays off: measured on an H200 with
/// PyTorch 2.11 (`native/gpu/stats_parity.py`, scenario `gc_threshold_fraction_1.0`).
#[test]
fn a_memory_fraction_of_one_sets_no_limit_and_no_garbage_collection() {
    let mut a = alloc_with("garbage_collection_threshold:0.3", 1000 * MIB);
    a.set_memory_fraction(1.0).unwrap();
    assert_eq!(a.allowed_bytes(), None);
    let old = a.malloc(400 * MIB, 0).unwrap();
    a.free(old).unwrap();
    let _big = a.malloc(500 * MIB, 0).unwrap();
    assert_eq!((a.reserved_bytes(), a.stats().num_device_free), (900 * MIB, 0), "the old block stays cached");
    a.set_memory_fraction(0.5).unwrap();
    assert_eq!(a.allowed_bytes(), Some(500 * MIB));
    assert_eq!(alloc_with("per_process_memory_fraction:1.0", GIB).allowed_bytes(), None);
    checked(&a);
}

/// `n` large-pool lookups, each served by one 150 MiB block, a segment of its own the first
/// time: they age the cached blocks for garbage collection.
fn large_lookups(a: &mut Allocator<SimDevice>, n: usize) {
    for _ in 0..n {
        let x = a.malloc(150 * MIB, 0).unwrap();
        a.free(x).unwrap();
    }
}

/// PyTorch's garbage collection releases the cached blocks at least as old as the average,
/// age counted in large-pool lookups since a block was cached: the old block goes, the two
/// cached since stay.
#[test]
fn garbage_collection_releases_the_old_blocks_and_keeps_the_young() {
    let mut a = alloc_with("garbage_collection_threshold:0.3", 1000 * MIB);
    a.set_memory_fraction(0.999).unwrap();
    let old = a.malloc(100 * MIB, 0).unwrap();
    let young = a.malloc(100 * MIB, 0).unwrap();
    a.free(old).unwrap();
    large_lookups(&mut a, 10);
    a.free(young).unwrap();
    assert_eq!((a.reserved_bytes(), a.stats().num_device_free), (350 * MIB, 0));
    // 350 MiB reserved is over the 300 MiB threshold: a request needing a new segment first
    // collects. Ages: the old block 11 lookups, the young one and the 150 MiB block 1.
    let _big = a.malloc(200 * MIB, 0).unwrap();
    assert_eq!(a.stats().num_device_free, 1, "only the old block is released");
    assert_eq!(a.reserved_bytes(), 450 * MIB);
    assert!(a.malloc(100 * MIB, 0).is_ok_and(|p| p == young), "the young block is still cached");
    checked(&a);
}

/// When the blocks at least as old as the average do not free enough, garbage collection goes
/// round again over the blocks left, against their own average age.
#[test]
fn garbage_collection_goes_round_again_over_the_blocks_left() {
    let mut a = alloc_with("garbage_collection_threshold:0.33", 1000 * MIB);
    a.set_memory_fraction(0.999).unwrap();
    // Only unsplit blocks count: the 15 MiB left of this one's 20 MiB segment, cached since
    // the first lookup, would raise the average age enough to keep the older block.
    let _split = a.malloc(5 * MIB, 0).unwrap();
    let oldest = a.malloc(100 * MIB, 0).unwrap();
    let older = a.malloc(100 * MIB, 0).unwrap();
    let young = a.malloc(100 * MIB, 0).unwrap();
    large_lookups(&mut a, 1);
    a.free(oldest).unwrap();
    large_lookups(&mut a, 6);
    a.free(older).unwrap();
    large_lookups(&mut a, 2);
    a.free(young).unwrap();
    assert_eq!((a.stats().num_device_free, a.reserved_bytes()), (0, 470 * MIB), "nothing collected yet");
    // Over the 329.67 MiB threshold by 140.33 MiB. Ages in large-pool lookups: 9, 3, 1 (the
    // 150 MiB block) and 1. The first round takes the blocks of age 3.5 or more: the oldest
    // alone, 100 MiB. The second, over the three left, those of age 5/3 or more: the older.
    a.set_explain(true);
    let _big = a.malloc(200 * MIB, 0).unwrap();
    assert_eq!((a.stats().num_device_free, a.reserved_bytes()), (2, 470 * MIB));
    let decisions = a.take_decisions();
    assert!(
        decisions.iter().any(|d| matches!(d, Decision::GarbageCollected { bytes } if *bytes == 200 * MIB)),
        "{decisions:?}"
    );
    assert_eq!(a.malloc(100 * MIB, 0).unwrap(), young, "the young block is still cached");
    assert_eq!(a.reserved_bytes(), 470 * MIB, "and so is the 150 MiB one");
    checked(&a);
}

/// Under expandable segments PyTorch's `segment` statistic counts nothing: its allocator
/// counts classic segments only, and an expandable segment's range is not one (measured on an
/// H200 with PyTorch 2.11, `native/gpu/stats_parity.py`).
#[test]
fn expandable_segments_add_no_segment_to_the_statistics() {
    let mut a = alloc_with("expandable_segments:True", 80 * GIB);
    let p = a.malloc(30 * MIB, 0).unwrap();
    let q = a.malloc(1000, 0).unwrap();
    assert_eq!(a.address_ranges(), 2, "a range for each pool");
    let s = a.stats();
    assert_eq!((s.segment.all.current, s.segment.all.peak, s.segment.all.allocated), (0, 0, 0));
    a.free(p).unwrap();
    a.free(q).unwrap();
    a.empty_cache().unwrap();
    assert_eq!((a.stats().segment.all.allocated, a.stats().segment.all.freed), (0, 0));
    checked(&a);
}

/// PyTorch's `unmap_block` unmaps a free block's whole pages with one count in
/// `num_device_free` and one unmap in the history, however many pages (measured on an H200
/// with PyTorch 2.11: a 60 MiB block of three 20 MiB pages is one device free).
#[test]
fn expandable_segments_count_one_device_free_per_block_unmapped() {
    let mut a = alloc_with("expandable_segments:True,record_history:1000", 80 * GIB);
    let p = a.malloc(60 * MIB, 0).unwrap();
    assert_eq!(a.stats().num_device_alloc, 1);
    a.free(p).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.stats().num_device_free, 1);
    let unmaps: Vec<_> = a.history().into_iter().filter(|e| e.action == Action::SegmentUnmap).collect();
    assert_eq!(unmaps.len(), 1);
    assert_eq!((unmaps[0].addr, unmaps[0].size), (p, 60 * MIB));
    assert_eq!(a.device().calls().vm_unmaps, 3, "still a driver call per page");
    checked(&a);
}

/// PyTorch's split rule follows the `expandable_segments` flag even where the device cannot
/// map pages and segments stay classic: a large block then splits off any remainder of 512
/// bytes or more, not only one above 1 MiB.
#[test]
fn the_expandable_segments_flag_sets_the_split_rule_without_virtual_memory() {
    let conf = |c: &str| Config::parse(c).unwrap();
    let mut flagged =
        Allocator::new(SimDevice::without_virtual_memory(80 * GIB), conf("policy:pytorch,expandable_segments:True"));
    let mut classic = Allocator::new(SimDevice::without_virtual_memory(80 * GIB), conf("policy:pytorch"));
    assert!(!flagged.uses_virtual_memory());
    // A 19.5 MiB request gets a 20 MiB segment; 512 KiB would remain.
    assert_eq!(block_size(&mut flagged, 39 * MIB / 2), 39 * MIB / 2);
    assert_eq!(block_size(&mut classic, 39 * MIB / 2), 20 * MIB);
    checked(&flagged);
    checked(&classic);
}

/// With the history on (`record_history`, PyTorch's `_record_memory_history`), every
/// malloc and free leaves its entries, in order.
#[test]
fn the_history_records_each_malloc_and_free_in_order() {
    let mut a = alloc_with("record_history:16", 80 * GIB);
    let p = a.malloc(4096, 7).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(1000, 7).unwrap();
    let seen: Vec<(Action, u64, u64)> = a.history().iter().map(|e| (e.action, e.addr, e.size)).collect();
    assert_eq!(
        seen,
        [
            (Action::SegmentAlloc, p, 2 * MIB),
            (Action::Alloc, p, 4096),
            (Action::FreeRequested, p, 4096),
            (Action::FreeCompleted, p, 4096),
            (Action::Alloc, q, 1000),
        ]
    );
}

#[test]
fn bad_pointers_are_named_and_change_nothing() {
    let mut a = pytorch();
    let p = a.malloc(4096, 0).unwrap();
    let before = a.stats();
    assert!(matches!(a.free(p + 512), Err(AllocError::InteriorPointer { .. })));
    assert!(matches!(a.free(12345), Err(AllocError::UnknownPointer { .. })));
    assert_eq!(a.stats(), before);
    a.free(p).unwrap();
    assert!(matches!(a.free(p), Err(AllocError::DoubleFree { .. })));
    assert!(matches!(a.malloc(0, 0), Err(AllocError::ZeroSize)));
    assert!(matches!(a.malloc(u64::MAX, 0), Err(AllocError::TooLarge { .. })));
    assert!(matches!(a.record_stream(p, 1), Err(AllocError::DoubleFree { .. })));
    checked(&a);
}

/// The largest request is 1 TiB, even on a device said to hold more: the free index counts a
/// cached block's size in 32-bit units of 512 bytes, so a larger segment, once cached, would
/// be indexed as smaller than it is. A 1 TiB block is cached and found again whole.
#[test]
fn the_largest_request_is_cached_and_found_again() {
    let mut a = Allocator::new(SimDevice::new(4 << 40), Config::pytorch());
    assert!(matches!(a.malloc(3 << 40, 0), Err(AllocError::TooLarge { .. })));
    let p = a.malloc(1 << 40, 0).unwrap();
    a.free(p).unwrap();
    assert_eq!(a.malloc(1 << 39, 0).unwrap(), p);
    assert_eq!(a.reserved_bytes(), 1 << 40);
    checked(&a);
}

#[test]
fn device_failures_other_than_memory_are_errors_not_panics() {
    let mut a = pytorch();
    a.device_mut().fail_allocation_call(0);
    // An injected refusal looks like out of memory: the allocator retries after flushing.
    let p = a.malloc(MIB, 0).unwrap();
    assert_eq!(a.stats().num_alloc_retries, 1);
    a.free(p).unwrap();
    checked(&a);
    assert_eq!(a.device().free_memory(), 80 * GIB - 2 * MIB);
}

/// Each rounding decision names the rule that applied, as PyTorch's `round_size` takes them.
#[test]
fn rounding_decisions_name_their_rule() {
    let mut a = alloc_with("roundup_power2_divisions:[1:4,>:1]", 80 * GIB);
    a.set_explain(true);
    for (size, rule) in [
        (100, "the smallest block is 512 bytes"),
        (513, "blocks are multiples of 512 bytes"),
        (2048, "blocks are multiples of 512 bytes"), // 512 B × 4 divisions: not above it
        (MIB + 1, "roundup_power2_divisions: the next of equal steps between powers of two"),
        (3 * MIB + 1, "blocks are multiples of 512 bytes"), // one division from 2 MiB up
    ] {
        a.malloc(size, 0).unwrap();
        let decisions = a.take_decisions();
        let named = decisions.iter().find_map(|d| match d {
            Decision::Rounded { rule, .. } => Some(*rule),
            _ => None,
        });
        assert_eq!(named, Some(rule), "{size} bytes: {decisions:?}");
    }
}

/// The pool decision names the page size expandable segments map, per pool; a malloc that
/// finds pending frees completed says how many.
#[test]
fn decisions_name_pages_and_completed_frees() {
    let mut a = alloc_with("expandable_segments:True", 80 * GIB);
    a.set_explain(true);
    let pages = |a: &mut Allocator<SimDevice>, size| {
        a.malloc(size, 0).unwrap();
        a.take_decisions().iter().find_map(|d| match d {
            Decision::Pool { page, .. } => Some(*page),
            _ => None,
        })
    };
    assert_eq!(pages(&mut a, 1000), Some(2 * MIB));
    assert_eq!(pages(&mut a, 5 * MIB), Some(20 * MIB));
    let p = a.malloc(MIB, 0).unwrap();
    a.record_stream(p, 7).unwrap();
    a.device_mut().hold_stream(7);
    a.free(p).unwrap();
    let completed = |a: &mut Allocator<SimDevice>| {
        a.malloc(1000, 0).unwrap();
        let decisions = a.take_decisions();
        decisions
            .iter()
            .filter_map(|d| match d {
                Decision::EventsCompleted { blocks } => Some(*blocks),
                _ => None,
            })
            .collect::<Vec<u64>>()
    };
    assert!(completed(&mut a).is_empty(), "the free still pends");
    a.device_mut().finish_stream(7);
    assert_eq!(completed(&mut a), [1]);
}

#[test]
fn decisions_are_explained() {
    let mut a = pytorch();
    a.set_explain(true);
    let p = a.malloc(1000, 0).unwrap();
    let steps: Vec<String> = a.take_decisions().iter().map(|d| d.to_string()).collect();
    let text = steps.join("\n");
    for part in ["Round 1000 bytes up to 1024 bytes", "small pool", "No cached block", "new 2.00 MiB segment", "Split"]
    {
        assert!(text.contains(part), "{text}");
    }
    a.free(p).unwrap();
    let text: Vec<String> = a.take_decisions().iter().map(|d| d.to_string()).collect();
    assert!(text.join("\n").contains("Merge with the free next block"), "{text:?}");
    a.empty_cache().unwrap();
    let text: Vec<String> = a.take_decisions().iter().map(|d| d.to_string()).collect();
    assert_eq!(text, ["Emptying the cache: returned 1 cached segment(s), 2.00 MiB, to the device."]);
    a.malloc((1 << 20) + 1, 0).unwrap();
    let text: Vec<String> = a.take_decisions().iter().map(|d| d.to_string()).collect();
    assert!(text[0].starts_with("Round 1048577 bytes up to 1049088 bytes, 1.00 MiB"), "{text:?}");
    assert!(text[1].contains("large pool"), "{text:?}");
    a.set_explain(false);
    a.malloc(1000, 0).unwrap();
    assert!(a.take_decisions().is_empty());
}
