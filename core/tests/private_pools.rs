//! Private pools (CUDA graphs, torch.compile's graph trees, `torch.cuda.MemPool`): each rule of
//! PyTorch's that a pool follows, one test each, and a random history across pools and the
//! allocator's own memory, under memory pressure and injected faults, with the invariants
//! checked after every step.

use cachalot_core::sim::FaultSite;
use cachalot_core::{AllocError, Allocator, Config, SimDevice};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn pytorch(capacity: u64) -> Allocator<SimDevice> {
    Allocator::new(SimDevice::new(capacity), Config::parse("policy:pytorch").unwrap())
}

/// The private pool whose segment holds `addr` (0: the allocator's own memory).
fn pool_of(a: &Allocator<SimDevice>, addr: u64) -> u32 {
    let s = a.segments(0).into_iter().find(|s| s.address <= addr && addr < s.address + s.total_size);
    s.expect("a segment holds the address").private_pool
}

fn checked(a: &Allocator<SimDevice>) {
    a.check_invariants().unwrap();
}

#[test]
fn a_pool_s_cached_block_is_reused_only_within_the_pool() {
    let mut a = pytorch(GIB);
    let p = a.create_pool();
    let x = a.malloc_in_pool(p, 4 * MIB, 0).unwrap();
    a.free(x).unwrap();
    let own = a.malloc(4 * MIB, 0).unwrap();
    assert_ne!(own, x, "the allocator's own request took the pool's cached block");
    assert_eq!(pool_of(&a, own), 0);
    assert_eq!(a.malloc_in_pool(p, 4 * MIB, 0).unwrap(), x, "the pool reuses its own block");
    assert_eq!(pool_of(&a, x), p);
    checked(&a);
}

#[test]
fn a_pool_never_takes_the_allocator_s_own_cached_blocks() {
    let mut a = pytorch(GIB);
    let own = a.malloc(3 * MIB, 0).unwrap();
    a.free(own).unwrap();
    let p = a.create_pool();
    let x = a.malloc_in_pool(p, 3 * MIB, 0).unwrap();
    assert_ne!(x, own);
    assert_eq!(a.stats().segment.all.current, 2, "the pool made a segment of its own");
    checked(&a);
}

#[test]
fn within_a_pool_pytorch_s_best_fit_and_split_rules_decide() {
    let mut a = pytorch(GIB);
    let p = a.create_pool();
    // One 20 MiB segment for a 3 MiB request (the large pool's rule), split: the rest is cached.
    let x = a.malloc_in_pool(p, 3 * MIB, 0).unwrap();
    let y = a.malloc_in_pool(p, 5 * MIB, 0).unwrap();
    assert_eq!(y, x + 3 * MIB, "the second request is cut from the first one's segment");
    assert_eq!(a.reserved_bytes(), 20 * MIB);
    // Small requests: a 2 MiB segment, blocks of 512 B multiples.
    let s = a.malloc_in_pool(p, 1000, 0).unwrap();
    let t = a.malloc_in_pool(p, 100, 0).unwrap();
    assert_eq!(t, s + 1024);
    assert_eq!(a.reserved_bytes(), 22 * MIB);
    checked(&a);
}

#[test]
fn a_pool_s_memory_counts_in_the_allocator_s_statistics() {
    let mut a = pytorch(GIB);
    let p = a.create_pool();
    let x = a.malloc_in_pool(p, 6 * MIB, 0).unwrap();
    let y = a.malloc(700 * KIB, 0).unwrap();
    let s = a.stats();
    assert_eq!((s.allocation.all.current, s.segment.all.current), (2, 2));
    assert_eq!(s.allocated_bytes.all.current as u64, 6 * MIB + 700 * KIB);
    assert_eq!(s.reserved_bytes.all.current as u64, 20 * MIB + 2 * MIB);
    a.free(x).unwrap();
    a.free(y).unwrap();
    assert_eq!(a.stats().allocated_bytes.all.current, 0);
    checked(&a);
}

#[test]
fn allocations_on_the_routed_stream_go_to_the_pool_until_routing_ends() {
    let mut a = pytorch(GIB);
    let (capturing, other) = (7, 9);
    let p = a.create_pool();
    a.begin_allocate_to_pool(p, capturing).unwrap();
    let x = a.malloc(2 * MIB, capturing).unwrap();
    let y = a.malloc(2 * MIB, other).unwrap();
    a.end_allocate_to_pool(p).unwrap();
    let z = a.malloc(2 * MIB, capturing).unwrap();
    assert_eq!((pool_of(&a, x), pool_of(&a, y), pool_of(&a, z)), (p, 0, 0));
    checked(&a);
}

#[test]
fn empty_cache_keeps_a_pool_in_use_and_returns_it_once_released() {
    let mut a = pytorch(GIB);
    let p = a.create_pool();
    let x = a.malloc_in_pool(p, 8 * MIB, 0).unwrap();
    a.free(x).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.reserved_bytes(), 20 * MIB, "a graph replays into its pool: the cache stays");
    a.release_pool(p).unwrap();
    assert_eq!(a.pool_use_count(p), Some(0), "released, not yet given back");
    assert_eq!(a.reserved_bytes(), 20 * MIB, "as in PyTorch, the next release of the cache gives it back");
    a.empty_cache().unwrap();
    assert_eq!(a.reserved_bytes(), 0);
    assert_eq!(a.pool_use_count(p), None, "a released pool holding nothing is forgotten");
    assert_eq!(a.malloc_in_pool(p, MIB, 0), Err(AllocError::UnknownPool { pool: p }));
    checked(&a);
}

#[test]
fn a_released_pool_s_live_allocation_stays_valid_until_freed() {
    let mut a = pytorch(GIB);
    let p = a.create_pool();
    let x = a.malloc_in_pool(p, 8 * MIB, 0).unwrap();
    a.release_pool(p).unwrap();
    assert!(matches!(a.malloc_in_pool(p, MIB, 0), Err(AllocError::PoolNotInUse { .. })), "no use: no allocation");
    a.empty_cache().unwrap();
    assert_eq!(a.reserved_bytes(), 20 * MIB, "the live block's segment stays");
    a.free(x).unwrap();
    checked(&a);
    a.empty_cache().unwrap();
    assert_eq!((a.reserved_bytes(), a.pool_use_count(p)), (0, None));
}

#[test]
fn uses_are_counted_as_pytorch_counts_them() {
    let mut a = pytorch(GIB);
    let p = a.create_pool();
    a.retain_pool(p).unwrap();
    assert_eq!(a.pool_use_count(p), Some(2));
    a.release_pool(p).unwrap();
    let x = a.malloc_in_pool(p, MIB, 0).unwrap();
    a.free(x).unwrap();
    a.release_pool(p).unwrap();
    assert_eq!(a.pool_use_count(p), Some(0));
    let q = a.create_pool();
    assert!(q > p, "ids are never given twice");
    assert_eq!(a.retain_pool(999), Err(AllocError::UnknownPool { pool: 999 }));
    assert_eq!(a.release_pool(999), Err(AllocError::UnknownPool { pool: 999 }));
    assert!(a.begin_allocate_to_pool(999, 0).is_err());
    assert!(AllocError::UnknownPool { pool: 999 }.to_string().contains("private pool 999"));
}

#[test]
fn a_pool_short_of_memory_releases_the_allocator_s_cache_then_retries() {
    let mut a = pytorch(100 * MIB);
    let own: Vec<u64> = (0..4).map(|_| a.malloc(20 * MIB, 0).unwrap()).collect();
    for x in own {
        a.free(x).unwrap();
    }
    assert_eq!(a.reserved_bytes(), 80 * MIB);
    let p = a.create_pool();
    let x = a.malloc_in_pool(p, 60 * MIB, 0).unwrap();
    assert_eq!(pool_of(&a, x), p);
    assert_eq!(a.stats().num_alloc_retries, 1);
    assert_eq!(a.reserved_bytes(), 60 * MIB);
    // And the other way: the allocator's own request takes an unused pool's cache back.
    a.free(x).unwrap();
    a.release_pool(p).unwrap();
    a.malloc(80 * MIB, 0).unwrap();
    assert_eq!(a.pool_use_count(p), None);
    checked(&a);
}

#[test]
fn a_pool_in_use_keeps_its_cache_when_another_request_runs_out_of_memory() {
    let mut a = pytorch(100 * MIB);
    let p = a.create_pool();
    let x = a.malloc_in_pool(p, 60 * MIB, 0).unwrap();
    a.free(x).unwrap();
    assert!(matches!(a.malloc(60 * MIB, 0), Err(AllocError::OutOfMemory(_))));
    assert_eq!(a.malloc_in_pool(p, 60 * MIB, 0).unwrap(), x, "the graph's addresses are still the pool's");
    checked(&a);
}

#[test]
fn a_pool_takes_classic_segments_under_virtual_memory_policies() {
    for config in ["policy:pytorch,expandable_segments:True", "policy:cachalot"] {
        let mut a = Allocator::new(SimDevice::new(GIB), Config::parse(config).unwrap());
        assert!(a.uses_virtual_memory(), "{config}");
        let p = a.create_pool();
        let x = a.malloc_in_pool(p, 5 * MIB, 0).unwrap();
        let y = a.malloc(5 * MIB, 0).unwrap();
        let segments = a.segments(0);
        let seg = |addr: u64| segments.iter().find(|s| s.address <= addr && addr < s.address + s.total_size).unwrap();
        assert!(!seg(x).is_expandable && seg(x).private_pool == p, "{config}");
        assert!(seg(y).is_expandable && seg(y).private_pool == 0, "{config}");
        a.free(x).unwrap();
        a.free(y).unwrap();
        checked(&a);
    }
}

#[test]
fn a_pool_is_set_back_to_its_checkpoint_within_its_own_memory() {
    let mut a = pytorch(GIB);
    let p = a.create_pool();
    let x = a.malloc_in_pool(p, 3 * MIB, 0).unwrap();
    let y = a.malloc_in_pool(p, 3 * MIB, 0).unwrap();
    let own = a.malloc(3 * MIB, 0).unwrap();
    a.free(x).unwrap();
    a.free(y).unwrap();
    a.free(own).unwrap();
    assert_eq!(a.allocate_in_pool_at(p, y, 3 * MIB, 3 * MIB - 100).unwrap(), y);
    assert_eq!(
        a.allocate_in_pool_at(p, own, 3 * MIB, 3 * MIB),
        Err(AllocError::NotCached { addr: own, size: 3 * MIB }),
        "the allocator's own memory is not the pool's"
    );
    assert_eq!(a.allocate_at(own, 3 * MIB, 3 * MIB).unwrap(), own);
    assert_eq!(pool_of(&a, y), p);
    checked(&a);
}

#[test]
fn empty_pool_cache_returns_only_that_released_pool_s_segments() {
    let mut a = pytorch(GIB);
    let (p, q) = (a.create_pool(), a.create_pool());
    let x = a.malloc_in_pool(p, 30 * MIB, 0).unwrap();
    let y = a.malloc_in_pool(q, 30 * MIB, 0).unwrap();
    a.free(x).unwrap();
    a.free(y).unwrap();
    a.empty_pool_cache(p).unwrap();
    assert_eq!(a.reserved_bytes(), 60 * MIB, "a pool in use keeps its cache: a graph replays into it");
    a.release_pool(p).unwrap();
    a.release_pool(q).unwrap();
    a.empty_pool_cache(p).unwrap();
    assert_eq!(a.reserved_bytes(), 30 * MIB, "only the pool emptied gave its memory back");
    assert_eq!(pool_of(&a, y), q);
    assert_eq!(a.pool_ids(), vec![q], "the emptied pool, holding nothing, is forgotten");
    checked(&a);
}

/// A small deterministic generator, so each seed is one reproducible history.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Random mallocs (in the allocator's own memory, in a pool, and routed), frees, stream uses,
/// pool uses and releases, cache releases, CUDA graph captures begun and ended (events
/// deferred meanwhile) and injected device faults, on a device small enough
/// to run out: after every step the invariants hold, and every live allocation lies in a
/// segment of the pool it was made in.
#[test]
fn random_histories_across_pools_keep_every_invariant() {
    for config in [
        "policy:pytorch",
        "policy:pytorch,max_split_size_mb:20",
        "policy:cachalot",
        "expandable_segments:True,policy:pytorch",
    ] {
        for seed in 0..24u64 {
            let mut rng = Lcg(seed);
            let mut a = Allocator::new(SimDevice::new(256 * MIB), Config::parse(config).unwrap());
            let mut pools: Vec<u32> = Vec::new();
            let mut live: Vec<(u64, u32)> = Vec::new();
            for step in 0..300 {
                let size = match rng.next() % 3 {
                    0 => 1 + rng.next() % (900 * KIB),
                    1 => MIB + rng.next() % (9 * MIB),
                    _ => 12 * MIB + rng.next() % (60 * MIB),
                };
                let stream = rng.next() % 3;
                let in_use: Vec<u32> =
                    pools.iter().copied().filter(|&p| a.pool_use_count(p).unwrap_or(0) > 0).collect();
                match rng.next() % 14 {
                    0..=2 => {
                        if let Ok(x) = a.malloc(size, stream) {
                            live.push((x, 0));
                        }
                    }
                    3..=4 if !in_use.is_empty() => {
                        let p = in_use[rng.next() as usize % in_use.len()];
                        if let Ok(x) = a.malloc_in_pool(p, size, stream) {
                            live.push((x, p));
                        }
                    }
                    5 if !in_use.is_empty() => {
                        let p = in_use[rng.next() as usize % in_use.len()];
                        a.begin_allocate_to_pool(p, stream).unwrap();
                        if let Ok(x) = a.malloc(size, stream) {
                            live.push((x, p));
                        }
                        a.end_allocate_to_pool(p).unwrap();
                    }
                    6..=8 if !live.is_empty() => {
                        let (x, p) = live.swap_remove(rng.next() as usize % live.len());
                        if rng.next() % 4 == 0 {
                            a.record_stream(x, 5).unwrap();
                        }
                        match a.free(x) {
                            Ok(()) => {}
                            // An event record failed (injected for a capture's end that had
                            // none to record): the allocation stays live.
                            Err(AllocError::Device(_)) => live.push((x, p)),
                            Err(e) => panic!("{config}, seed {seed}, step {step}: {e}"),
                        }
                    }
                    12 if a.captures_underway() < 2 => a.begin_capture().unwrap(),
                    13 if a.captures_underway() > 0 => {
                        if rng.next() % 3 == 0 {
                            let next = a.device().next_call(FaultSite::RecordEvent);
                            a.device_mut().fail_call(FaultSite::RecordEvent, next);
                        }
                        drop(a.end_capture());
                    }
                    9 => pools.push(a.create_pool()),
                    10 if !in_use.is_empty() => {
                        let p = in_use[rng.next() as usize % in_use.len()];
                        a.release_pool(p).unwrap();
                    }
                    11 => {
                        let site = [FaultSite::Allocate, FaultSite::Free, FaultSite::Create][rng.next() as usize % 3];
                        let next = a.device().next_call(site);
                        a.device_mut().fail_call(site, next);
                        match rng.next() % 3 {
                            0 => drop(a.empty_cache()),
                            1 if !pools.is_empty() => {
                                drop(a.empty_pool_cache(pools[rng.next() as usize % pools.len()]))
                            }
                            _ => {}
                        }
                    }
                    _ => {}
                }
                if let Err(e) = a.check_invariants() {
                    panic!("{config}, seed {seed}, step {step}: {e}");
                }
                for &(x, p) in &live {
                    assert_eq!(pool_of(&a, x), p, "{config}, seed {seed}, step {step}: {x:#x}");
                }
            }
        }
    }
}
