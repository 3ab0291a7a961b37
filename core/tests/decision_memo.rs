//! The decision memo (`decision_memo:True`; off by default): once a period of mallocs and frees
//! repeats and leaves the blocks as it found them, the next periods are answered from the
//! recording. These tests hold that it changes no decision: every call answers exactly as an
//! allocator with `decision_memo:False` does, on every reference trace, after an operation the
//! recording did not have, after each call that ends a replay, and over random loops with
//! random calls slipped in, with every invariant checked after each call; and that it does
//! replay (a test that never reached a replay would prove nothing).

use crate::common;

use cachalot_core::{AllocError, Allocator, Config, Replayer, SimDevice};
use common::{load_trace, TRACES};
use proptest::prelude::*;

const MIB: u64 = 1 << 20;
const MEMO: &str = "policy:pytorch,decision_memo:True";
const WITHOUT: &str = "policy:pytorch,decision_memo:False";

/// The same calls on an allocator with the memo and one without.
struct Pair {
    memo: Allocator<SimDevice>,
    without: Allocator<SimDevice>,
    /// The statistics are compared after every `every`-th call.
    every: usize,
    calls: usize,
}

impl Pair {
    fn new(capacity: u64) -> Pair {
        Pair::reading_every(capacity, 1)
    }

    fn reading_every(capacity: u64, every: usize) -> Pair {
        Pair {
            memo: Allocator::new(SimDevice::new(capacity), Config::parse(MEMO).unwrap()),
            without: Allocator::new(SimDevice::new(capacity), Config::parse(WITHOUT).unwrap()),
            every,
            calls: 0,
        }
    }

    /// Runs `f` on both, requires the same answer, checks the memo allocator's invariants
    /// (which hold for the blocks as applied so far), requires the same statistics every
    /// `every` calls, and returns the answer.
    fn both<T: PartialEq + std::fmt::Debug>(&mut self, mut f: impl FnMut(&mut Allocator<SimDevice>) -> T) -> T {
        let (got, want) = (f(&mut self.memo), f(&mut self.without));
        assert_eq!(got, want, "the memo changed an answer");
        self.memo.check_invariants().unwrap();
        self.calls += 1;
        if self.calls % self.every == 0 {
            self.same_state();
        }
        got
    }

    /// Requires the same statistics and the same segments, block by block.
    fn same_state(&mut self) {
        assert_eq!(self.memo.stats(), self.without.stats(), "the memo changed a statistic");
        let segments = |a: &mut Allocator<SimDevice>| {
            let mut all = a.segments(0);
            all.sort_by_key(|s| s.address);
            all
        };
        assert_eq!(segments(&mut self.memo), segments(&mut self.without), "the memo changed a block");
        self.memo.check_invariants().unwrap();
    }

    fn malloc(&mut self, size: u64, stream: u64) -> Result<u64, AllocError> {
        self.both(|a| a.malloc(size, stream))
    }

    fn free(&mut self, addr: u64) -> Result<(), AllocError> {
        self.both(|a| a.free(addr))
    }

    /// One step of a training-like loop: activations made, the first kept to the end, the
    /// others freed in reverse, on two streams.
    fn step(&mut self) {
        let sizes = [24 * MIB, 3 * MIB, 700 * 1024, 40 * MIB, 5 * MIB, 512, 96 * 1024, 2 * MIB];
        let addrs: Vec<u64> =
            sizes.iter().enumerate().map(|(i, &s)| self.malloc(s, (i % 3 == 2) as u64).unwrap()).collect();
        for &p in addrs[1..].iter().rev() {
            self.free(p).unwrap();
        }
        self.free(addrs[0]).unwrap();
    }

    /// Steps until the memo replays (at most 40).
    fn until_replaying(&mut self) {
        for _ in 0..40 {
            self.step();
            if self.memo.memo_counts().replaying {
                return;
            }
        }
        panic!("the memo never replayed: {:?}", self.memo.memo_counts());
    }
}

#[test]
fn every_reference_trace_is_replayed_from_the_memo_with_the_same_addresses_and_statistics() {
    for name in TRACES {
        let trace = load_trace(name);
        let mut pair = Pair::new(140 << 30);
        let (mut r, mut w) = (Replayer::new(trace.slots), Replayer::new(trace.slots));
        for pass in 1..=7 {
            for op in &trace.ops {
                let (got, want) = (r.step(&mut pair.memo, op), w.step(&mut pair.without, op));
                assert_eq!(got, want, "{name}, pass {pass}: the memo changed an answer");
            }
            r.free_live(&mut pair.memo).unwrap();
            w.free_live(&mut pair.without).unwrap();
            assert_eq!(pair.memo.stats(), pair.without.stats(), "{name}, pass {pass}");
            pair.memo.check_invariants().unwrap();
            if pass == 5 {
                assert!(pair.memo.memo_counts().replaying, "{name}: not replaying by pass 5");
            }
        }
        let counts = pair.memo.memo_counts();
        // The true period, a whole pass, found once and never given up.
        assert!(counts.replaying && counts.periods_replayed >= 1 && counts.replays_ended == 0, "{name}: {counts:?}");
        assert!(counts.period > trace.ops.len() && counts.period < trace.ops.len() + 100, "{name}: {counts:?}");
        // 24 bytes an operation of the period, and 8 for each block's id at the period's end
        // (at least one block for each segment).
        let extra = counts.bytes - 24 * counts.period;
        let segments = pair.memo.stats().segment.all.current as usize;
        assert!(extra % 8 == 0 && (segments..=100 * segments).contains(&(extra / 8)), "{name}: {counts:?}");
        assert_eq!(pair.without.memo_counts(), Default::default());
    }
}

#[test]
fn whatever_reads_mid_period_sees_what_the_allocator_without_the_memo_shows() {
    for name in TRACES {
        let trace = load_trace(name);
        let mut pair = Pair::new(140 << 30);
        let (mut r, mut w) = (Replayer::new(trace.slots), Replayer::new(trace.slots));
        for pass in 0..8 {
            for (i, op) in trace.ops.iter().enumerate() {
                assert_eq!(r.step(&mut pair.memo, op), w.step(&mut pair.without, op), "{name}: an answer changed");
                // Every reader, at a few points inside each replayed period: nothing waits
                // to be applied, so each reads what the usual path shows.
                if pass >= 5 && i % 9973 == 17 {
                    assert!(pair.memo.memo_counts().replaying, "{name}: {:?}", pair.memo.memo_counts());
                    pair.same_state();
                    assert_eq!(pair.memo.layout(), pair.without.layout(), "{name}");
                    assert_eq!(pair.memo.snapshot_json(0), pair.without.snapshot_json(0), "{name}");
                    assert_eq!(pair.memo.live_blocks(), pair.without.live_blocks(), "{name}");
                }
                if pass == 6 && i == trace.ops.len() / 2 {
                    pair.memo.reset_peak_stats();
                    pair.without.reset_peak_stats();
                    pair.memo.reset_accumulated_stats();
                    pair.without.reset_accumulated_stats();
                }
            }
            r.free_live(&mut pair.memo).unwrap();
            w.free_live(&mut pair.without).unwrap();
        }
        let counts = pair.memo.memo_counts();
        assert!(counts.replaying && counts.periods_replayed >= 2 && counts.replays_ended == 0, "{name}: {counts:?}");
        pair.same_state();
        assert_eq!(pair.memo.memory_summary(0, false), pair.without.memory_summary(0, false), "{name}");
    }
}

#[test]
fn an_operation_the_period_did_not_have_ends_the_replay_and_is_answered_as_without_the_memo() {
    let mut pair = Pair::new(1 << 30);
    pair.until_replaying();
    let (p, q) = (pair.malloc(MIB, 0).unwrap(), pair.malloc(24 * MIB, 0).unwrap());
    let counts = pair.memo.memo_counts();
    assert!(!counts.replaying && counts.replays_ended == 1, "{counts:?}");
    for _ in 0..3 {
        pair.step();
    }
    pair.free(p).unwrap();
    pair.free(q).unwrap();
    // The loop goes on as before, so the memo finds it again.
    pair.until_replaying();
    pair.step();
    pair.step();
    assert!(pair.memo.memo_counts().periods_replayed >= 1, "{:?}", pair.memo.memo_counts());
}

#[test]
fn a_free_outside_every_segment_is_refused_without_ending_the_replay() {
    let mut pair = Pair::new(1 << 30);
    pair.until_replaying();
    let ended = pair.memo.memo_counts().replays_ended;
    // Below, between and above the segments: the native library's shards ask each other so.
    for addr in [1, 1 << 39, u64::MAX - 4096] {
        let e = pair.free(addr).unwrap_err();
        assert_eq!(e, AllocError::UnknownPointer { addr });
    }
    let counts = pair.memo.memo_counts();
    assert!(counts.replaying && counts.replays_ended == ended, "{counts:?}");
    let before = counts.periods_replayed;
    pair.step();
    pair.step();
    assert!(pair.memo.memo_counts().periods_replayed > before, "{:?}", pair.memo.memo_counts());
}

#[test]
fn a_free_the_period_did_not_have_is_refused_as_without_the_memo_and_changes_nothing() {
    let mut pair = Pair::new(1 << 30);
    pair.until_replaying();
    let p = pair.malloc(24 * MIB, 0).unwrap();
    let e = pair.free(p + 512).unwrap_err();
    assert!(matches!(e, AllocError::UnknownPointer { .. } | AllocError::InteriorPointer { .. }), "{e:?}");
    assert!(!pair.memo.memo_counts().replaying);
    pair.until_replaying();
    // A double free while replaying.
    pair.free(p).unwrap();
    pair.both(|a| a.free(p)).unwrap_err();
    for _ in 0..3 {
        pair.step();
    }
}

#[test]
fn calls_that_read_the_indexes_or_change_the_path_end_the_replay_and_answer_as_without_the_memo() {
    type Call = fn(&mut Allocator<SimDevice>, u64) -> Result<(), AllocError>;
    let calls: [(&str, Call); 6] = [
        ("record_stream", |a, p| a.record_stream(p, 1)),
        ("empty_cache", |a, _| a.empty_cache()),
        ("set_explain", |a, _| {
            a.set_explain(true);
            a.set_explain(false);
            Ok(())
        }),
        ("record_history", |a, _| {
            a.record_history(16);
            a.record_history(0);
            Ok(())
        }),
        ("set_memory_fraction", |a, _| a.set_memory_fraction(0.9)),
        ("a request past the device", |a, _| a.malloc(2 << 30, 0).map(|_| ())),
    ];
    for (name, call) in calls {
        let mut pair = Pair::new(1 << 30);
        pair.until_replaying();
        let p = pair.malloc(24 * MIB, 0).unwrap();
        pair.free(p).unwrap();
        // An allocation that outlives the steps, so record_stream has one to mark.
        let live = pair.malloc(3 * MIB, 0).unwrap();
        pair.until_replaying();
        let answer = pair.both(|a| call(a, live).map_err(|e| e.to_string()));
        assert_eq!(answer.is_err(), name == "a request past the device", "{name}: {answer:?}");
        assert!(!pair.memo.memo_counts().replaying, "{name} left the memo replaying");
        pair.free(live).unwrap();
        for _ in 0..3 {
            pair.step();
        }
        assert_eq!(pair.memo.reserved_bytes(), pair.without.reserved_bytes(), "{name}");
    }
}

#[test]
fn while_watching_the_memo_holds_12_bytes_a_malloc_of_its_log() {
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse(MEMO).unwrap());
    // 300 mallocs, no two alike: no period. The log kept its latest half at 256.
    let live: Vec<u64> = (1..=300).map(|i| a.malloc(i * 512, 0).unwrap()).collect();
    // Both of its vectors held 256 entries at once.
    let bytes = a.memo_counts().bytes;
    assert!(bytes % 12 == 0 && (12 * 256..=12 * 1024).contains(&bytes), "{bytes}");
    for p in live {
        a.free(p).unwrap();
    }
}

#[test]
fn no_replay_begins_while_a_free_waits_for_another_stream() {
    let mut pair = Pair::new(1 << 30);
    let p = pair.malloc(24 * MIB, 0).unwrap();
    pair.both(|a| a.record_stream(p, 1)).unwrap();
    pair.both(|a| a.device_mut().hold_stream(1));
    pair.free(p).unwrap();
    // A replay would not see the event complete, so none may begin while it is queued.
    for _ in 0..30 {
        pair.step();
    }
    assert!(!pair.memo.memo_counts().replaying, "{:?}", pair.memo.memo_counts());
    pair.both(|a| a.device_mut().finish_stream(1));
    pair.until_replaying();
    pair.step();
}

#[test]
fn decision_memo_false_never_replays() {
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse(WITHOUT).unwrap());
    for _ in 0..50 {
        let p = a.malloc(5 * MIB, 0).unwrap();
        let q = a.malloc(700 * 1024, 0).unwrap();
        a.free(p).unwrap();
        a.free(q).unwrap();
    }
    assert_eq!(a.memo_counts(), Default::default());
}

/// One operation of a random step: a malloc, or a free of the step's n-th live allocation
/// (counted from the latest).
#[derive(Clone, Debug)]
enum StepOp {
    Malloc { size: u64, stream: u64 },
    Free { pick: usize },
}

/// A call slipped in between steps.
#[derive(Clone, Debug)]
enum Interruption {
    Malloc(u64),
    RecordStream,
    EmptyCache,
    Explain,
    ResetAccumulated,
    ResetPeak,
    Read,
}

fn step_op() -> impl Strategy<Value = StepOp> {
    prop_oneof![
        3 => (prop_oneof![1u64..=(1 << 20), (1u64 << 20)..=(48 << 20)], 0u64..2)
            .prop_map(|(size, stream)| StepOp::Malloc { size, stream }),
        2 => (0usize..8).prop_map(|pick| StepOp::Free { pick }),
    ]
}

fn interruption() -> impl Strategy<Value = Interruption> {
    prop_oneof![
        (1u64..=(64 << 20)).prop_map(Interruption::Malloc),
        Just(Interruption::RecordStream),
        Just(Interruption::EmptyCache),
        Just(Interruption::Explain),
        Just(Interruption::ResetAccumulated),
        Just(Interruption::ResetPeak),
        Just(Interruption::Read),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A random step repeated many times, with random calls slipped in between some steps:
    /// the memo allocator answers every call as the one without does, its invariants hold
    /// after each, and its statistics and blocks are the same whenever read, after every
    /// call or every so many (`Pair::both`).
    #[test]
    fn random_loops_with_random_calls_slipped_in_are_answered_as_without_the_memo(
        ops in prop::collection::vec(step_op(), 4..40),
        steps in 12usize..40,
        interruptions in prop::collection::vec((0usize..40, interruption()), 0..4),
        every in prop_oneof![Just(1usize), 2usize..400, Just(usize::MAX)],
    ) {
        let mut pair = Pair::reading_every(512 * MIB, every);
        let mut kept: Vec<u64> = Vec::new();
        for s in 0..steps {
            let mut live: Vec<u64> = Vec::new();
            for op in &ops {
                match *op {
                    StepOp::Malloc { size, stream } => {
                        if let Ok(p) = pair.malloc(size, stream) {
                            live.push(p);
                        }
                    }
                    StepOp::Free { pick } if pick < live.len() => {
                        let p = live.remove(live.len() - 1 - pick);
                        pair.free(p).unwrap();
                    }
                    StepOp::Free { .. } => {}
                }
            }
            for p in live {
                pair.free(p).unwrap();
            }
            for (_, call) in interruptions.iter().filter(|(at, _)| *at == s) {
                match call {
                    Interruption::Malloc(size) => {
                        if let Ok(p) = pair.malloc(*size, 0) {
                            kept.push(p);
                        }
                    }
                    Interruption::RecordStream => {
                        if let Some(&p) = kept.first() {
                            pair.both(|a| a.record_stream(p, 1)).unwrap();
                        }
                    }
                    Interruption::EmptyCache => pair.both(|a| a.empty_cache()).unwrap(),
                    Interruption::Explain => pair.both(|a| {
                        a.set_explain(true);
                        a.set_explain(false);
                    }),
                    Interruption::ResetAccumulated => pair.both(|a| a.reset_accumulated_stats()),
                    Interruption::ResetPeak => pair.both(|a| a.reset_peak_stats()),
                    Interruption::Read => pair.same_state(),
                }
            }
        }
        pair.same_state();
        for p in kept {
            pair.free(p).unwrap();
        }
        pair.both(|a| a.empty_cache()).unwrap();
        pair.same_state();
        prop_assert_eq!(pair.memo.reserved_bytes(), 0);
    }
}
