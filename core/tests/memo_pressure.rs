//! The decision memo under memory pressure: periods whose real run releases a segment and
//! makes it again at the same address end with the blocks as they began, yet their device
//! calls, retries and statistics do not repeat, so they must never be replayed. The two
//! sequences here once made the memo skip driver calls and panic in a release build.

use cachalot_core::sim::FaultSite;
use cachalot_core::{AllocError, Allocator, Config, MemoCounts, SimDevice};
use proptest::prelude::*;

const MIB: u64 = 1 << 20;

/// Runs `step` 300 times on an allocator with the memo and one without, on a device of
/// `capacity` bytes without virtual memory, and requires the same answers and statistics.
fn same_with_and_without_memo(
    conf: &str,
    capacity: u64,
    step: impl Fn(&mut Allocator<SimDevice>) -> Vec<u64>,
) -> MemoCounts {
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
    memo.memo_counts()
}

#[test]
fn a_period_that_releases_an_oversize_segment_and_makes_it_again_is_not_replayed() {
    let counts = same_with_and_without_memo("policy:pytorch,max_split_size_mb:40", 105 * MIB, |a| {
        let x = a.malloc(57 * MIB, 0).unwrap();
        let y = a.malloc(79 * MIB / 2, 0).unwrap();
        a.free(x).unwrap();
        a.free(y).unwrap();
        vec![x, y]
    });
    // The memo did record such periods, and refused each.
    assert!(counts.recordings_refused > 0 && counts.periods_replayed == 0, "{counts:?}");
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
    let counts = same_with_and_without_memo("policy:pytorch,max_split_size_mb:50", 142 * MIB, |a| {
        let mut got = Vec::new();
        let mut m = |a: &mut Allocator<SimDevice>, size: u64| {
            let r = a.malloc(size, 0);
            got.push(r.clone().unwrap_or(0));
            r.ok()
        };
        let x = m(a, 34 * MIB);
        if let Some(x) = x {
            a.free(x).unwrap();
        }
        let b = m(a, 58 * MIB);
        let c = m(a, 99 * MIB / 2);
        let d = m(a, 34 * MIB);
        if let Some(b) = b {
            a.free(b).unwrap();
        }
        let e = m(a, 99 * MIB / 2);
        for p in [c, d, e].into_iter().flatten() {
            a.free(p).unwrap();
        }
        got
    });
    assert!(counts.recordings_refused > 0 && counts.periods_replayed == 0, "{counts:?}");
}

/// A configuration under pressure: PyTorch's policy with one of the settings that change
/// its path (the memo runs only on the plain one, but each must answer as without it),
/// cachalot's own policy, a memory fraction and garbage collection.
fn pressured_config() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("policy:pytorch".to_string()),
        (20u64..=80).prop_map(|mb| format!("policy:pytorch,max_split_size_mb:{mb}")),
        (20u64..=80).prop_map(|mb| format!("policy:pytorch,max_split_size_mb:{mb},roundup_power2_divisions:4")),
        (0.3f64..0.95).prop_map(|f| format!("policy:pytorch,per_process_memory_fraction:{f:.2}")),
        (0.3f64..0.9).prop_map(|t| format!(
            "policy:pytorch,garbage_collection_threshold:{t:.2},per_process_memory_fraction:0.8"
        )),
        Just("policy:pytorch,expandable_segments:True".to_string()),
        Just(String::new()),
    ]
}

/// One operation of a random step: a malloc on a stream, a free of the step's n-th live
/// allocation (counted from the latest), or a use of one on the other stream.
#[derive(Clone, Debug)]
enum Op {
    Malloc { size: u64, stream: u64 },
    Free { pick: usize },
    UseElsewhere { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop_oneof![1u64..=(1 << 20), (1u64 << 20)..=(60 * MIB)], 0u64..2)
            .prop_map(|(size, stream)| Op::Malloc { size, stream }),
        4 => (0usize..8).prop_map(|pick| Op::Free { pick }),
        1 => (0usize..8).prop_map(|pick| Op::UseElsewhere { pick }),
    ]
}

/// Everything a caller can see of an allocator: its statistics, its segments block by
/// block, and every call its device received.
fn seen(a: &Allocator<SimDevice>) -> String {
    let mut segments = a.segments(0);
    segments.sort_by_key(|s| s.address);
    format!("{:?}\n{:?}\n{:?}", a.stats(), segments, a.device().calls())
}

/// A random case: a config, a device, a step repeated, and faults to inject.
#[derive(Clone, Debug)]
struct Case {
    conf: String,
    capacity_mb: u64,
    virtual_memory: bool,
    ops: Vec<Op>,
    steps: usize,
    faults: Vec<(usize, u64)>,
}

fn case() -> impl Strategy<Value = Case> {
    prop_oneof![random_case(), oversize_case()]
}

/// The shape of the first regression above, with random sizes: an oversize request and
/// one just below max_split_size, on a device that holds little more than both, so that
/// periods release a segment and make one again.
fn oversize_case() -> impl Strategy<Value = Case> {
    (20u64..=60, 1u64..=30, 1u64..=4, 0u64..=40).prop_map(|(split_mb, over_mb, under_half_mb, spare_mb)| {
        let (over, under) = ((split_mb + over_mb) * MIB, split_mb * MIB - under_half_mb * MIB / 2);
        Case {
            conf: format!("policy:pytorch,max_split_size_mb:{split_mb}"),
            capacity_mb: (over + under) / MIB + spare_mb + 4,
            virtual_memory: false,
            ops: vec![
                Op::Malloc { size: over, stream: 0 },
                Op::Malloc { size: under, stream: 0 },
                Op::Free { pick: 1 },
                Op::Free { pick: 0 },
            ],
            steps: 120,
            faults: Vec::new(),
        }
    })
}

fn random_case() -> impl Strategy<Value = Case> {
    (
        pressured_config(),
        96u64..=320,
        any::<bool>(),
        prop::collection::vec(op(), 4..24),
        8usize..48,
        prop::collection::vec((0usize..4, 0u64..300), 0..6),
    )
        .prop_map(|(conf, capacity_mb, virtual_memory, ops, steps, faults)| Case {
            conf,
            capacity_mb,
            virtual_memory,
            ops,
            steps,
            faults,
        })
}

/// Runs a case on an allocator with the memo and one without: every call must answer, call
/// the device and count exactly alike, after every call. Returns the memo's counts.
fn run_case(c: &Case) -> MemoCounts {
    let make = |memo: bool| {
        let conf = format!("{},decision_memo:{}", c.conf, if memo { "True" } else { "False" });
        let capacity = c.capacity_mb * MIB;
        let mut device =
            if c.virtual_memory { SimDevice::new(capacity) } else { SimDevice::without_virtual_memory(capacity) };
        let sites = [FaultSite::Allocate, FaultSite::Free, FaultSite::RecordEvent, FaultSite::Create];
        for &(site, call) in &c.faults {
            device.fail_call(sites[site], call);
        }
        Allocator::new(device, Config::parse(conf.trim_start_matches(',')).unwrap())
    };
    let (mut memo, mut without) = (make(true), make(false));
    let mut counts = MemoCounts::default();
    let mut both = |f: &mut dyn FnMut(&mut Allocator<SimDevice>) -> Result<u64, AllocError>| {
        let (got, want) = (f(&mut memo), f(&mut without));
        assert_eq!(&got, &want, "the memo changed an answer");
        assert_eq!(seen(&memo), seen(&without), "the memo changed what a caller sees");
        memo.check_invariants().unwrap();
        counts = memo.memo_counts();
        got
    };
    for _ in 0..c.steps {
        let mut live: Vec<u64> = Vec::new();
        for op in &c.ops {
            match *op {
                Op::Malloc { size, stream } => {
                    if let Ok(p) = both(&mut |a| a.malloc(size, stream)) {
                        live.push(p);
                    }
                }
                Op::Free { pick } if pick < live.len() => {
                    let p = live.remove(live.len() - 1 - pick);
                    let _ = both(&mut |a| a.free(p).map(|()| 0));
                }
                Op::UseElsewhere { pick } if pick < live.len() => {
                    let p = live[live.len() - 1 - pick];
                    let _ = both(&mut |a| a.record_stream(p, 1).map(|()| 0));
                }
                Op::Free { .. } | Op::UseElsewhere { .. } => {}
            }
        }
        for p in live {
            let _ = both(&mut |a| a.free(p).map(|()| 0));
        }
    }
    let _ = both(&mut |a| a.empty_cache().map(|()| 0));
    counts
}

/// Random cases under tight devices, max_split_size, rounding divisions, a memory
/// fraction, garbage collection, expandable segments and injected faults: the memo changes
/// nothing, and enough of the cases replay for that to mean something.
#[test]
fn under_pressure_limits_and_faults_the_memo_changes_nothing() {
    use proptest::test_runner::{Config as RunnerConfig, TestRunner};
    let mut runner = TestRunner::new(RunnerConfig { cases: 128, ..RunnerConfig::default() });
    let replayed = std::cell::Cell::new(0);
    runner
        .run(&case(), |c| {
            let counts = run_case(&c);
            replayed.set(replayed.get() + (counts.periods_replayed > 0) as u32);
            Ok(())
        })
        .unwrap();
    assert!(replayed.get() >= 16, "only {} of 128 cases replayed", replayed.get());
}
