//! `lock_per_stream:True`: one core allocator and lock per stream, over one device.
//!
//! What must hold: the shards make the decisions one allocator makes (PyTorch never lends one
//! stream's cache to another) and answer every call as it does, out of memory included; the
//! memory fraction counts every stream's memory; a request that finds no room has every
//! stream's cache released before its last retry; frees and `record_stream` find their
//! allocation from any thread; and the statistics add up.

use cachalot::Error;
use cachalot::SharedAllocator;
use cachalot_core::{AllocError, Config};

const GIB: u64 = 1 << 30;

fn allocator(config: &str, capacity: u64) -> SharedAllocator {
    SharedAllocator::simulated(capacity, Config::parse(config).unwrap()).unwrap()
}

/// A deterministic stream of pseudo-random numbers (xorshift), from `seed`.
fn random(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// A deterministic mix of mallocs and frees over four streams: (stream, size or free index).
fn operations(count: usize) -> Vec<(u64, Option<u64>, usize)> {
    let mut next = random(0x9e37_79b9_7f4a_7c15);
    (0..count)
        .map(|_| {
            let r = next();
            let stream = r % 4;
            let size = match r >> 8 & 3 {
                0 => 1 + (r >> 16) % 4096,
                1 => 1 + (r >> 16) % (1 << 20),
                _ => 1 + (r >> 16) % (24 << 20),
            };
            let malloc = (r >> 40) % 5 < 3;
            (stream, malloc.then_some(size), (r >> 44) as usize)
        })
        .collect()
}

/// Runs the operations; returns every address malloc handed out, in order.
fn run(a: &SharedAllocator, ops: &[(u64, Option<u64>, usize)]) -> Vec<u64> {
    let mut live: Vec<u64> = Vec::new();
    let mut handed = Vec::new();
    for &(stream, size, pick) in ops {
        match size {
            Some(size) => {
                let addr = a.malloc(size, stream).unwrap();
                handed.push(addr);
                live.push(addr);
            }
            None if !live.is_empty() => {
                let addr = live.swap_remove(pick % live.len());
                a.free(addr).unwrap();
            }
            None => {}
        }
        a.check_invariants().unwrap();
    }
    handed
}

#[test]
fn shards_make_the_decisions_of_one_allocator() {
    let ops = operations(3000);
    for policy in ["policy:pytorch", "policy:pytorch,max_split_size_mb:64", "policy:pytorch,expandable_segments:True"] {
        let one = allocator(policy, 64 * GIB);
        let sharded = allocator(&format!("{policy},lock_per_stream:True"), 64 * GIB);
        assert_eq!(run(&one, &ops), run(&sharded, &ops), "{policy}: the same address for every malloc");
        let (a, b) = (one.stats().unwrap(), sharded.stats().unwrap());
        for ((key, x), (_, y)) in a.flat().iter().zip(b.flat().iter()) {
            let held = key.starts_with("segment.")
                || key.starts_with("reserved_bytes.")
                || key.starts_with("oversize_segments.");
            if key.ends_with(".peak") && !held {
                assert!(y >= x, "{policy}: {key}: a sum of peaks is at least the peak ({y} < {x})");
            } else {
                assert_eq!(x, y, "{policy}: {key}");
            }
        }
    }
}

/// One step of a random mix that also records allocations on other streams, empties the
/// cache and frees bad pointers.
#[derive(Clone, Copy, Debug)]
enum Step {
    Malloc { stream: u64, size: u64 },
    Free { pick: usize },
    RecordStream { pick: usize, stream: u64 },
    EmptyCache,
    FreeTwice { pick: usize },
}

fn mix(seed: u64, count: usize) -> Vec<Step> {
    let mut next = random(seed);
    (0..count)
        .map(|_| {
            let r = next();
            let (stream, pick) = (r % 4, (r >> 44) as usize);
            match (r >> 40) % 20 {
                0..=10 => Step::Malloc {
                    stream,
                    size: match r >> 8 & 3 {
                        0 => 1 + (r >> 16) % 4096,
                        1 => 1 + (r >> 16) % (1 << 20),
                        _ => 1 + (r >> 16) % (96 << 20),
                    },
                },
                11..=16 => Step::Free { pick },
                17 => Step::RecordStream { pick, stream },
                18 => Step::EmptyCache,
                _ => Step::FreeTwice { pick },
            }
        })
        .collect()
}

/// What each step returned: an address, "ok", or the error's kind.
fn outcomes(a: &SharedAllocator, steps: &[Step]) -> Vec<String> {
    let kind = |e: Error| match e {
        Error::Alloc(AllocError::OutOfMemory(_)) => "out of memory".to_string(),
        other => format!("{other}"),
    };
    let mut live: Vec<u64> = Vec::new();
    let mut freed: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    for &step in steps {
        let result = match step {
            Step::Malloc { stream, size } => a.malloc(size, stream).map(|addr| {
                live.push(addr);
                format!("{addr:#x}")
            }),
            Step::Free { pick } if !live.is_empty() => {
                let addr = live.swap_remove(pick % live.len());
                freed.push(addr);
                a.free(addr).map(|_| "ok".into())
            }
            Step::RecordStream { pick, stream } if !live.is_empty() => {
                a.record_stream(live[pick % live.len()], stream).map(|_| "ok".into())
            }
            Step::EmptyCache => a.empty_cache().map(|_| "ok".into()),
            Step::FreeTwice { pick } if !freed.is_empty() => a.free(freed[pick % freed.len()]).map(|_| "ok".into()),
            _ => continue,
        };
        out.push(result.unwrap_or_else(kind));
        a.check_invariants().unwrap();
    }
    out
}

#[test]
fn shards_answer_every_call_as_one_allocator_does() {
    for seed in 1..=6u64 {
        let steps = mix(seed * 0x2545_f491_4f6c_dd1d, 2000);
        for policy in
            ["policy:pytorch", "policy:pytorch,max_split_size_mb:64", "policy:pytorch,expandable_segments:True"]
        {
            // A memory fraction small enough that some requests end out of memory.
            let one = allocator(policy, 4 * GIB);
            let sharded = allocator(&format!("{policy},lock_per_stream:True"), 4 * GIB);
            for a in [&one, &sharded] {
                a.set_memory_fraction(0.5).unwrap();
            }
            let (x, y) = (outcomes(&one, &steps), outcomes(&sharded, &steps));
            let first = x.iter().zip(&y).position(|(p, q)| p != q);
            assert!(
                first.is_none(),
                "seed {seed}, {policy}: step {first:?}: {:?} vs {:?}",
                first.map(|i| &x[i]),
                first.map(|i| &y[i])
            );
            assert!(x.iter().any(|o| o == "out of memory"), "seed {seed}, {policy}: the fraction was reached");
            let (s, t) = (one.stats().unwrap(), sharded.stats().unwrap());
            let held = |stats: &cachalot_core::DeviceStats| -> Vec<(String, i64)> {
                let keys = ["segment.", "reserved_bytes.", "oversize_segments."];
                let peak = |k: &str| k.ends_with(".peak") && keys.iter().any(|p| k.starts_with(p));
                stats.flat().into_iter().filter(|(k, _)| peak(k)).collect()
            };
            assert_eq!(held(&s).len(), 7);
            assert_eq!(held(&s), held(&t), "seed {seed}, {policy}: the device's peaks are exact");
        }
    }
}

#[test]
fn the_default_policy_stays_sound_per_stream() {
    let sharded = allocator("lock_per_stream:True", 64 * GIB);
    let handed = run(&sharded, &operations(3000));
    let stats = sharded.stats().unwrap();
    assert_eq!(stats.allocation.all.allocated as usize, handed.len());
    sharded.empty_cache().unwrap();
    sharded.check_invariants().unwrap();
}

#[test]
fn the_memory_fraction_counts_every_stream_and_other_caches_are_freed_first() {
    let a = allocator("policy:pytorch,lock_per_stream:True", 4 * GIB);
    a.set_memory_fraction(0.25).unwrap(); // 1 GiB
    let first = a.malloc(600 << 20, 1).unwrap();
    a.free(first).unwrap(); // cached by stream 1's shard
    let second = a.malloc(600 << 20, 2).unwrap();
    let stats = a.stats().unwrap();
    assert_eq!(stats.num_ooms, 0, "stream 1's cache was returned, so stream 2's request fits");
    assert_eq!(stats.reserved_bytes.all.current, 600 << 20);
    // Stream 1's segment went back before stream 2's came: the device never held both.
    assert_eq!((stats.reserved_bytes.all.peak, stats.reserved_bytes.large_pool.peak), (600 << 20, 600 << 20));
    assert_eq!(stats.segment.all.peak, 1);
    // Live memory on stream 2 leaves too little for stream 3, whatever is cached.
    let refused = a.malloc(600 << 20, 3);
    match refused {
        Err(Error::Alloc(AllocError::OutOfMemory(report))) => {
            assert_eq!(report.held_elsewhere, 600 << 20);
            assert!(report.to_string().contains("Other streams' allocators hold 600.00 MiB more"), "{report}");
        }
        other => panic!("expected out of memory, got {other:?}"),
    }
    assert_eq!(a.stats().unwrap().num_ooms, 1);
    a.free(second).unwrap();
    a.check_invariants().unwrap();
}

#[test]
fn frees_find_their_shard_from_any_thread() {
    let a = allocator("policy:pytorch,lock_per_stream:True", 64 * GIB);
    let addrs: Vec<u64> = (0..8).map(|s| a.malloc(1 << 20, s).unwrap()).collect();
    a.record_stream(addrs[3], 5).unwrap();
    assert!(matches!(a.free(addrs[2] + 512), Err(Error::Alloc(AllocError::InteriorPointer { .. }))));
    std::thread::scope(|s| {
        s.spawn(|| {
            for &addr in addrs.iter().rev() {
                a.free(addr).unwrap();
            }
        });
    });
    assert!(matches!(a.free(addrs[2]), Err(Error::Alloc(AllocError::DoubleFree { .. }))));
    assert!(matches!(a.free(12345), Err(Error::Alloc(AllocError::UnknownPointer { addr: 12345 }))));
    assert_eq!(a.stats().unwrap().allocation.all.current, 0);
    a.check_invariants().unwrap();
}

#[test]
fn before_any_malloc_everything_answers() {
    let a = allocator("policy:pytorch,max_split_size_mb:128,lock_per_stream:True", GIB);
    assert_eq!(a.stats().unwrap().max_split_size, 128 << 20);
    assert!(a.memory_summary(false).unwrap().contains("Allocated memory"));
    assert!(a.snapshot_json().unwrap().contains("\"segments\":[]"));
    a.empty_cache().unwrap();
    assert!(matches!(a.set_memory_fraction(1.5), Err(Error::Alloc(AllocError::InvalidFraction(_)))));
    assert!(matches!(a.free(4096), Err(Error::Alloc(AllocError::UnknownPointer { .. }))));
}

#[test]
fn max_split_size_reads_the_same_before_and_after_the_first_malloc() {
    // Past 2^63 bytes the statistic reads negative, as PyTorch's cast makes it.
    for (config, expected) in [
        ("max_split_size_mb:8796093022208", i64::MIN),
        ("max_split_size_mb:18446744073709551615", -(1 << 20)),
        ("max_split_size_mb:64", 64 << 20),
    ] {
        let sharded = allocator(&format!("policy:pytorch,{config},lock_per_stream:True"), GIB);
        let single = allocator(&format!("policy:pytorch,{config}"), GIB);
        let before = sharded.stats().unwrap().max_split_size;
        sharded.malloc(4096, 0).unwrap();
        assert_eq!(before, sharded.stats().unwrap().max_split_size, "{config}");
        assert_eq!(before, single.stats().unwrap().max_split_size, "{config}");
        assert_eq!(before, expected, "{config}");
    }
}

#[test]
fn more_streams_than_shards_share_the_last() {
    let a = allocator("policy:pytorch,lock_per_stream:True", 64 * GIB);
    let n = cachalot::stream_shards::MAX_SHARDS as u64 + 10;
    let addrs: Vec<u64> = (0..n).map(|s| a.malloc(4096, s).unwrap()).collect();
    for addr in addrs {
        a.free(addr).unwrap();
    }
    let stats = a.stats().unwrap();
    assert_eq!(stats.allocation.all.allocated as u64, n);
    assert_eq!(stats.segment.all.current as u64, n, "a 2 MiB small segment per stream, as PyTorch makes");
    a.check_invariants().unwrap();
}

/// A simulated device that panics when asked for a segment of [`PANIC_SIZE`] bytes: a stand-in
/// for a bug that leaves one shard unusable.
struct PanickyDevice(cachalot_core::SimDevice);

const PANIC_SIZE: u64 = 12 << 20;

impl cachalot_core::Device for PanickyDevice {
    fn total_memory(&self) -> u64 {
        self.0.total_memory()
    }
    fn free_memory(&self) -> u64 {
        self.0.free_memory()
    }
    fn allocate(&mut self, size: u64) -> Result<u64, cachalot_core::DeviceError> {
        assert_ne!(size, PANIC_SIZE, "the injected panic");
        self.0.allocate(size)
    }
    fn free(&mut self, address: u64, size: u64) -> Result<(), cachalot_core::DeviceError> {
        self.0.free(address, size)
    }
    fn record_event(&mut self, stream: u64) -> Result<cachalot_core::Event, cachalot_core::DeviceError> {
        self.0.record_event(stream)
    }
    fn query_event(&mut self, event: cachalot_core::Event) -> Result<bool, cachalot_core::DeviceError> {
        self.0.query_event(event)
    }
    fn synchronize_event(&mut self, event: cachalot_core::Event) -> Result<(), cachalot_core::DeviceError> {
        self.0.synchronize_event(event)
    }
    fn release_event(&mut self, event: cachalot_core::Event) {
        self.0.release_event(event)
    }
}

#[test]
fn a_shard_a_panic_left_unusable_does_not_stop_the_others() {
    use cachalot::shared_allocator::DeviceKind;
    let device = Box::new(PanickyDevice(cachalot_core::SimDevice::without_virtual_memory(GIB)));
    let a = SharedAllocator::over(
        device,
        Config::parse("policy:pytorch,lock_per_stream:True").unwrap(),
        DeviceKind::Simulated,
    );
    a.set_memory_fraction(0.5).unwrap();
    let kept = a.malloc(1 << 20, 1).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.malloc(PANIC_SIZE, 1)));
    assert!(panicked.is_err(), "stream 1's shard panicked while holding its lock");
    assert_eq!(a.free(kept), Err(Error::Poisoned), "and refuses every later call");
    // Stream 2's request cannot fit: the other shards' caches are released first, skipping the
    // unusable one, and the answer is the true one.
    let refused = a.malloc(600 << 20, 2);
    assert!(matches!(refused, Err(Error::Alloc(AllocError::OutOfMemory(_)))), "{refused:?}");
    let fits = a.malloc(100 << 20, 2).unwrap();
    // A free that looks for its shard past the unusable one still finds it: stream 3's new
    // shard is where this thread looks first, the unusable one next.
    let other = a.malloc(4096, 3).unwrap();
    a.free(fits).unwrap();
    a.free(other).unwrap();
    assert_eq!(a.free(0x1234_0000), Err(Error::Poisoned), "an unknown address may be the unusable shard's");
}
