//! `allocate_at`, what setting a private pool back to a checkpoint needs (PyTorch's CUDA graph
//! trees): after every allocation is freed and each checkpointed one allocated again at its own
//! address, the allocator is the one checkpointed, block for block, with the same statistics.

use cachalot_core::{AllocError, Allocator, Config, SimDevice};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// The allocated blocks: (address, size, requested size).
fn live(a: &Allocator<SimDevice>) -> Vec<(u64, u64, u64)> {
    let mut out: Vec<_> = a
        .segments(0)
        .into_iter()
        .flat_map(|s| s.blocks)
        .filter(|b| b.state == "active_allocated")
        .map(|b| (b.address, b.size, b.requested_size))
        .collect();
    out.sort();
    out
}

/// A small deterministic generator, so each seed is one reproducible history.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Mallocs of mixed small and large sizes and frees of random live blocks.
fn churn(a: &mut Allocator<SimDevice>, held: &mut Vec<u64>, rng: &mut Lcg, steps: usize) {
    for _ in 0..steps {
        if held.is_empty() || rng.next() % 3 != 0 {
            let size = match rng.next() % 4 {
                0 => 1 + rng.next() % (900 * KIB),
                1 => MIB + rng.next() % (9 * MIB),
                2 => 12 * MIB + rng.next() % (40 * MIB),
                _ => 512 * (1 + rng.next() % 64),
            };
            held.push(a.malloc(size, 0).unwrap());
        } else {
            let i = (rng.next() as usize) % held.len();
            a.free(held.swap_remove(i)).unwrap();
        }
    }
}

#[test]
fn a_pool_set_back_to_its_checkpoint_is_the_checkpointed_allocator() {
    for seed in 0..40u64 {
        let mut a = Allocator::new(SimDevice::new(64 << 30), Config::parse("policy:pytorch").unwrap());
        let mut rng = Lcg(seed);
        let mut held = Vec::new();
        churn(&mut a, &mut held, &mut rng, 120);
        let checkpoint = a.clone();
        let at_checkpoint = live(&a);

        churn(&mut a, &mut held, &mut rng, 200);
        for p in held.drain(..) {
            a.free(p).unwrap();
        }
        for &(addr, size, requested) in &at_checkpoint {
            assert_eq!(a.allocate_at(addr, size, requested), Ok(addr), "seed {seed}");
        }
        a.check_invariants().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(live(&a), at_checkpoint, "seed {seed}");

        // Segments the checkpoint had are tiled as they were; those made since are whole and free.
        let then = checkpoint.segments(0);
        for s in a.segments(0) {
            match then.iter().find(|t| t.address == s.address) {
                Some(t) => assert_eq!(s.blocks, t.blocks, "seed {seed}: segment {:#x}", s.address),
                None => assert_eq!(s.blocks.len(), 1, "seed {seed}: a later segment is one free block"),
            }
        }
        let (now, was) = (a.stats(), checkpoint.stats());
        for (name, n, w) in [
            ("allocation", now.allocation, was.allocation),
            ("allocated_bytes", now.allocated_bytes, was.allocated_bytes),
            ("requested_bytes", now.requested_bytes, was.requested_bytes),
            ("inactive_split", now.inactive_split, was.inactive_split),
            ("inactive_split_bytes", now.inactive_split_bytes, was.inactive_split_bytes),
        ] {
            for (pool, (x, y)) in [
                ("all", (n.all, w.all)),
                ("small", (n.small_pool, w.small_pool)),
                ("large", (n.large_pool, w.large_pool)),
            ] {
                assert_eq!(x.current, y.current, "seed {seed}: {name}.{pool}");
            }
        }
    }
}

#[test]
fn a_range_that_is_not_free_is_refused_and_nothing_changes() {
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse("policy:pytorch").unwrap());
    let x = a.malloc(4 * MIB, 0).unwrap(); // a 20 MiB segment: x, then 16 MiB cached
    let before = (live(&a), a.stats(), a.segments(0));
    for (addr, size, why) in [
        (x, 4 * MIB, "the block is allocated"),
        (x + 2 * MIB, 4 * MIB, "the range starts inside an allocated block"),
        (x + 18 * MIB, 4 * MIB, "the range runs past the segment"),
        (x + 4 * MIB + 100, 512, "the address is not a multiple of 512"),
        (x + 4 * MIB, 1000, "the size is not a multiple of 512"),
        (1 << 40, MIB, "no segment is there"),
    ] {
        assert_eq!(a.allocate_at(addr, size, size), Err(AllocError::NotCached { addr, size }), "{why}");
        assert_eq!((live(&a), a.stats(), a.segments(0)), before, "{why}: nothing changed");
    }
    assert_eq!(a.allocate_at(x + 4 * MIB, MIB, 0), Err(AllocError::ZeroSize));
    assert!(a.allocate_at(x + 4 * MIB, MIB, MIB + 1).is_err(), "more requested than the block holds");
    a.check_invariants().unwrap();
}

#[test]
fn a_block_cut_from_the_middle_leaves_two_cached_remainders_that_merge_back() {
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse("policy:pytorch").unwrap());
    let x = a.malloc(4 * MIB, 0).unwrap();
    a.free(x).unwrap(); // one whole free 20 MiB segment
    let mid = x + 6 * MIB;
    assert_eq!(a.allocate_at(mid, 3 * MIB, 3 * MIB - 7), Ok(mid));
    a.check_invariants().unwrap();
    let s = a.stats();
    assert_eq!(s.inactive_split.all.current, 2, "6 MiB before it, 11 MiB after it");
    assert_eq!(s.inactive_split_bytes.all.current, 17 * MIB as i64);
    assert_eq!(s.requested_bytes.all.current, (3 * MIB - 7) as i64);
    assert_eq!(a.largest_cached_block(), 11 * MIB);
    a.free(mid).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.largest_cached_block(), 20 * MIB, "the remainders merge with it again");
    assert_eq!(a.stats().inactive_split.all.current, 0);
}

#[test]
fn a_range_held_by_a_pending_free_is_placed_after_waiting_for_it() {
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse("policy:pytorch").unwrap());
    let x = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(x, 7).unwrap();
    a.device_mut().hold_stream(7); // work queued on stream 7 keeps the free pending
    a.free(x).unwrap();
    assert_eq!(a.stats().active.all.current, 1, "the free waits on stream 7");
    a.device_mut().finish_stream(7);
    assert_eq!(a.allocate_at(x, 4 * MIB, 4 * MIB), Ok(x));
    a.check_invariants().unwrap();
    assert_eq!(live(&a), vec![(x, 4 * MIB, 4 * MIB)]);
}

#[test]
fn under_virtual_memory_nothing_is_placed() {
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::default());
    let x = a.malloc(4 * MIB, 0).unwrap();
    a.free(x).unwrap();
    assert_eq!(a.allocate_at(x, 4 * MIB, 4 * MIB), Err(AllocError::NotCached { addr: x, size: 4 * MIB }));
}
