//! The decision memo under memory pressure: periods whose real run releases a segment and
//! makes it again at the same address end with the blocks as they began, yet their device
//! calls, retries and statistics do not repeat, so they must never be replayed. The two
//! sequences here once made the memo skip driver calls and panic in a release build.

use cachalot_core::{Allocator, Config, SimDevice};

const MIB: u64 = 1 << 20;

/// Runs `step` 300 times on an allocator with the memo and one without, on a device of
/// `capacity` bytes without virtual memory, and requires the same answers and statistics.
fn same_with_and_without_memo(conf: &str, capacity: u64, step: impl Fn(&mut Allocator<SimDevice>) -> Vec<u64>) {
    let make = |memo: bool| {
        let conf = format!("{conf},decision_memo:{}", if memo { "True" } else { "False" });
        Allocator::new(SimDevice::without_virtual_memory(capacity), Config::parse(&conf).unwrap())
    };
    let (mut memo, mut without) = (make(true), make(false));
    for i in 0..300 {
        assert_eq!(step(&mut memo), step(&mut without), "step {i}: an answer changed");
    }
    let (m, w) = (memo.stats(), without.stats());
    assert_eq!((m.num_device_alloc, m.num_device_free), (w.num_device_alloc, w.num_device_free));
    assert_eq!(m, w, "the memo changed a statistic");
    memo.check_invariants().unwrap();
}

#[test]
fn a_period_that_releases_an_oversize_segment_and_makes_it_again_is_not_replayed() {
    same_with_and_without_memo("policy:pytorch,max_split_size_mb:40", 105 * MIB, |a| {
        let x = a.malloc(57 * MIB, 0).unwrap();
        let y = a.malloc(79 * MIB / 2, 0).unwrap();
        a.free(x).unwrap();
        a.free(y).unwrap();
        vec![x, y]
    });
    // PyTorch's own figures for it: a segment made and one released every step.
    let mut a = Allocator::new(
        SimDevice::without_virtual_memory(105 * MIB),
        Config::parse("policy:pytorch,max_split_size_mb:40").unwrap(),
    );
    for _ in 0..300 {
        let x = a.malloc(57 * MIB, 0).unwrap();
        let y = a.malloc(79 * MIB / 2, 0).unwrap();
        a.free(x).unwrap();
        a.free(y).unwrap();
    }
    let s = a.stats();
    assert_eq!((s.num_device_alloc, s.num_device_free), (301, 299));
}

#[test]
fn a_period_with_out_of_memory_recovery_in_it_neither_panics_nor_is_replayed() {
    same_with_and_without_memo("policy:pytorch,max_split_size_mb:50", 142 * MIB, |a| {
        let mut got = Vec::new();
        let mut m = |a: &mut Allocator<SimDevice>, size: u64| {
            let r = a.malloc(size, 0);
            got.push(r.clone().unwrap_or(0));
            r.ok()
        };
        let x = m(a, 34 * MIB);
        x.map(|x| a.free(x).unwrap());
        let b = m(a, 58 * MIB);
        let c = m(a, 99 * MIB / 2);
        let d = m(a, 34 * MIB);
        b.map(|b| a.free(b).unwrap());
        let e = m(a, 99 * MIB / 2);
        for p in [c, d, e].into_iter().flatten() {
            a.free(p).unwrap();
        }
        got
    });
}
