//! Reserved memory on the reference traces, in simulation (deterministic):
//! - PyTorch's expandable segments (`policy:pytorch,expandable_segments:True`) reserve what
//!   PyTorch 2.11 reserved on the H200 (within 2%), with the same number of mappings;
//! - cachalot's paged policy reserves at most 3% more than the trace's peak requested bytes,
//!   and no more than the best of PyTorch's four configurations for that trace, and does not
//!   creep over a hundred passes, where a loop that repeats itself stops moving pages;
//! - near the memory limit it behaves as PyTorch's out-of-memory path does: a failed request
//!   holds no memory, one request never takes reserved memory past the fraction, idle pages
//!   make way for a request that fits, and `empty_cache` leaves no empty range counted.

use crate::common;

use cachalot_core::{Allocator, Config, Replayer, SimDevice};
use common::{load_trace, traces_dir, TRACES};

const H200: u64 = 140 << 30;

fn pytorch(trace: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(traces_dir().join("pytorch_reference.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["trace"] == trace)
        .collect()
}

fn replay(name: &str, conf: &str) -> (cachalot_core::ReplayOutcome, Allocator<SimDevice>) {
    let trace = load_trace(name);
    let mut a = Allocator::new(SimDevice::new(H200), Config::parse(conf).unwrap());
    let out = Replayer::replay(&mut a, &trace).unwrap();
    a.check_invariants().unwrap();
    (out, a)
}

#[test]
fn expandable_segments_match_pytorch() {
    for name in TRACES {
        let (out, a) = replay(name, "policy:pytorch,expandable_segments:True");
        assert!(a.uses_virtual_memory());
        let reference = pytorch(name).into_iter().find(|v| v["conf"] == "expandable_segments:True").unwrap();
        let want = reference["peak_reserved"].as_u64().unwrap();
        let got = out.peak_reserved_bytes;
        eprintln!("{name}: expandable peak reserved {got}, PyTorch {want}");
        assert!((got as f64 / want as f64 - 1.0).abs() <= 0.02, "{name}: {got} vs PyTorch {want}");
        assert_eq!(out.device_allocs, reference["num_device_alloc"].as_u64().unwrap(), "{name}: mappings");
    }
}

/// The figures the documentation quotes, which the H200 reproduces to the byte
/// (docs/benchmarks.md): a change to any of the paged policy's choices (where a request goes,
/// which chunks move) shows here before it reaches the docs.
#[test]
fn cachalot_policy_reserves_the_documented_bytes() {
    let documented = [
        ("gpt2_train.csv.gz", 15_179_186_176u64),
        ("resnet50_train.csv.gz", 4_634_705_920),
        ("mixed_fc_conv.csv.gz", 1_482_686_464),
    ];
    for (name, bytes) in documented {
        assert_eq!(replay(name, "").0.peak_reserved_bytes, bytes, "{name}");
    }
}

/// What `Config::keys_moot_under_paging` tells users (the CLI prints it): PyTorch's split
/// limits and expandable segments change nothing under the paged policy.
#[test]
fn pytorchs_split_keys_change_nothing_under_the_paged_policy() {
    let name = "mixed_fc_conv.csv.gz";
    let plain = replay(name, "").0;
    for conf in
        ["max_split_size_mb:128", "max_split_size_mb:20,max_non_split_rounding_mb:64", "expandable_segments:True"]
    {
        assert!(!Config::parse(conf).unwrap().keys_moot_under_paging().is_empty(), "{conf}");
        let out = replay(name, conf).0;
        assert_eq!(
            (out.peak_reserved_bytes, out.device_allocs),
            (plain.peak_reserved_bytes, plain.device_allocs),
            "{conf}"
        );
    }
}

#[test]
fn cachalot_policy_reserves_within_3_percent_and_below_every_pytorch_config() {
    for name in TRACES {
        let (out, a) = replay(name, "");
        assert!(a.uses_virtual_memory());
        let ratio = out.peak_reserved_bytes as f64 / out.peak_requested_bytes as f64;
        let best = pytorch(name).iter().map(|v| v["peak_reserved"].as_u64().unwrap()).min().unwrap();
        eprintln!("{name}: cachalot {ratio:.4}x requested; {} bytes vs PyTorch's best {best}", out.peak_reserved_bytes);
        assert!(ratio <= 1.03, "{name}: {ratio:.4}x requested");
        assert!(out.peak_reserved_bytes <= best, "{name}: {} above PyTorch's best {best}", out.peak_reserved_bytes);
        assert_eq!(out.ooms, 0);
    }
}

/// A training loop replays its step again and again: reserved memory must not creep up pass
/// after pass. Chunks held back by small allocations left in freed large blocks made
/// gpt2_train reach 1.115x by its sixth pass before chunks were capped at 16 MiB. Later,
/// without page slack, moves that never stopped took gpt2_train to 1.0209x over a hundred
/// passes and mixed_fc_conv to 1.0818x. With the default slack (1%) and no learned layout,
/// over a hundred passes: gpt2_train 1.0122x, making no device call after its tenth pass;
/// resnet50_train 1.0067x, none after its sixth, 0.14% above PyTorch's expandable segments
/// (1.0053x); mixed_fc_conv, whose steps change size, 1.0545x, still moving pages, below
/// PyTorch's best (1.1149x). With the learned layout (the default), every trace makes no
/// device call from its fifth pass: gpt2_train 1.0094x, resnet50_train 1.0067x,
/// mixed_fc_conv 1.0343x.
#[test]
fn cachalot_policy_does_not_creep_over_a_hundred_passes() {
    // (config, trace, bound on reserved / requested, stays at or below PyTorch's best config,
    // settles)
    let expected = [
        ("", TRACES[0], 1.01, true, true),
        ("", TRACES[1], 1.007, false, true),
        ("", TRACES[2], 1.035, true, true),
        ("learn_layout:False", TRACES[0], 1.015, true, true),
        ("learn_layout:False", TRACES[1], 1.01, false, true),
        ("learn_layout:False", TRACES[2], 1.06, true, false),
    ];
    for (conf, name, bound, below_pytorch, settles) in expected {
        let trace = load_trace(name);
        let mut a = Allocator::new(SimDevice::new(H200), Config::parse(conf).unwrap());
        let mut r = Replayer::new(trace.slots);
        let first = r.run_pass(&mut a, &trace.ops).unwrap();
        for _ in 1..90 {
            r.run_pass(&mut a, &trace.ops).unwrap();
        }
        let before = a.device().calls();
        for _ in 90..100 {
            r.run_pass(&mut a, &trace.ops).unwrap();
        }
        let last = a.device().calls().since(&before);
        a.check_invariants().unwrap();
        let peak = a.stats().reserved_bytes.all.peak as u64;
        let ratio = peak as f64 / first.peak_requested_bytes as f64;
        let best = pytorch(name).iter().map(|v| v["peak_reserved"].as_u64().unwrap()).min().unwrap();
        let calls = last.vm_maps + last.vm_unmaps + last.vm_set_access + last.vm_creates;
        eprintln!("{conf} {name}: over a hundred passes {ratio:.4}x requested, {calls} device calls in the last ten");
        assert!(ratio <= bound, "{conf} {name}: {ratio:.4}x requested over a hundred passes");
        assert!(!below_pytorch || peak <= best, "{name}: {peak} above PyTorch's best {best}");
        assert!(peak as f64 <= best as f64 * 1.002, "{name}: {peak} more than 0.2% above PyTorch's best {best}");
        assert!(!settles || calls == 0, "{name}: {calls} device calls in passes 91-100");
    }
}

/// Replays `name` ten times on one allocator: the first pass's outcome, the peak reserved bytes
/// over all ten, and the unmaps of passes 6 to 10.
fn ten_passes(name: &str, conf: &str) -> (cachalot_core::ReplayOutcome, u64, u64) {
    let trace = load_trace(name);
    let mut a = Allocator::new(SimDevice::new(H200), Config::parse(conf).unwrap());
    let mut r = Replayer::new(trace.slots);
    let first = r.run_pass(&mut a, &trace.ops).unwrap();
    for _ in 1..5 {
        r.run_pass(&mut a, &trace.ops).unwrap();
    }
    let before = a.device().calls();
    for _ in 5..10 {
        r.run_pass(&mut a, &trace.ops).unwrap();
    }
    a.check_invariants().unwrap();
    (first, a.stats().reserved_bytes.all.peak as u64, a.device().calls().since(&before).vm_unmaps)
}

#[test]
fn page_slack_buys_pages_where_memory_keeps_moving() {
    // mixed_fc_conv moves pages every step: slack earned by moving cuts the later passes'
    // moves by more than half, keeps the first pass within 3% and all ten within PyTorch's best.
    let name = "mixed_fc_conv.csv.gz";
    // Without a learned layout: a plan would stop the moves altogether from the third pass.
    let (_, _, unmaps) = ten_passes(name, "page_slack:0,learn_layout:False");
    let (first, peak, slack_unmaps) = ten_passes(name, "page_slack:0.1,learn_layout:False");
    eprintln!("{name}: unmaps in passes 6-10: {unmaps} without slack, {slack_unmaps} with");
    assert!(slack_unmaps * 2 < unmaps, "{slack_unmaps} unmaps with slack, {unmaps} without");
    assert!(first.peak_reserved_bytes as f64 <= first.peak_requested_bytes as f64 * 1.03);
    let best = pytorch(name).iter().map(|v| v["peak_reserved"].as_u64().unwrap()).min().unwrap();
    assert!(peak <= best, "{peak} bytes over ten passes, PyTorch's best {best}");
    // resnet50_train settles after a few moves: it earns next to nothing, and reserves what it did.
    let name = "resnet50_train.csv.gz";
    let (plain, plain_peak, _) = ten_passes(name, "page_slack:0,learn_layout:False");
    let (slack, slack_peak, _) = ten_passes(name, "page_slack:0.1,learn_layout:False");
    assert_eq!((slack.peak_reserved_bytes, slack_peak), (plain.peak_reserved_bytes, plain_peak));
}

#[test]
fn page_slack_stays_under_the_memory_fraction() {
    // Full slack (1.0) under a fraction that leaves 5% over the peak requested: slack is
    // earned (the peak rises above the one without slack) but stops at the limit, and no
    // request fails for it.
    let trace = load_trace("mixed_fc_conv.csv.gz");
    let allowed = 1_457_801_732f64 * 1.05;
    let peak_over_ten_passes = |conf: &str| {
        let mut a = Allocator::new(SimDevice::new(H200), Config::parse(conf).unwrap());
        a.set_memory_fraction(allowed / H200 as f64).unwrap();
        let mut r = Replayer::new(trace.slots);
        for _ in 0..10 {
            assert_eq!(r.run_pass(&mut a, &trace.ops).unwrap().ooms, 0, "{conf}");
        }
        a.check_invariants().unwrap();
        a.stats().reserved_bytes.all.peak as f64
    };
    let (plain, slack) = (peak_over_ten_passes("page_slack:0"), peak_over_ten_passes("page_slack:1.0"));
    assert!(slack > plain, "no slack earned: {slack} bytes, {plain} without");
    assert!(slack <= allowed, "peak reserved {slack} over the {allowed} the fraction allows");
}

#[test]
fn without_virtual_memory_the_cachalot_policy_decides_as_pytorch() {
    let trace = load_trace("mixed_fc_conv.csv.gz");
    let mut a = Allocator::new(SimDevice::without_virtual_memory(H200), Config::parse("").unwrap());
    let ours = Replayer::replay(&mut a, &trace).unwrap();
    assert!(!a.uses_virtual_memory());
    let mut b = Allocator::new(SimDevice::new(H200), Config::parse("policy:pytorch").unwrap());
    let theirs = Replayer::replay(&mut b, &trace).unwrap();
    assert_eq!(ours.peak_reserved_bytes, theirs.peak_reserved_bytes);
}

#[test]
fn empty_cache_returns_idle_pages_and_keeps_live_ones() {
    let (_, mut a) = replay("resnet50_train.csv.gz", "");
    assert!(a.reserved_bytes() > 0, "a replay leaves its pages cached");
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.reserved_bytes(), 0);
    assert_eq!(a.device().used(), 0);
    let p = a.malloc(5 << 20, 0).unwrap();
    let q = a.malloc(100, 0).unwrap();
    a.free(p).unwrap();
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.reserved_bytes(), 2 << 20, "only the page under the live 100-byte block stays");
    a.free(q).unwrap();
}

/// A request larger than any range could hold fails without reserving one, so out-of-memory
/// after out-of-memory leaves no ranges behind for later requests to search.
#[test]
fn expandable_segments_reserve_no_range_for_a_request_no_range_can_hold() {
    const GIB: u64 = 1 << 30;
    let conf = Config::parse("policy:pytorch,expandable_segments:True").unwrap();
    let mut a = Allocator::new(SimDevice::new(GIB), conf);
    let p = a.malloc(64 << 20, 0).unwrap();
    let (reserves, segments) = (a.device().calls().vm_reserves, a.stats().segment.all.current);
    for _ in 0..100 {
        assert!(matches!(a.malloc(2 * GIB, 0), Err(cachalot_core::AllocError::OutOfMemory(_))));
    }
    a.check_invariants().unwrap();
    assert_eq!((a.device().calls().vm_reserves, a.stats().segment.all.current), (reserves, segments));
    a.free(p).unwrap();
}

fn paged(capacity: u64) -> Allocator<SimDevice> {
    Allocator::new(SimDevice::new(capacity), Config::default())
}

#[test]
fn a_failed_request_holds_no_memory() {
    const GIB: u64 = 1 << 30;
    // Straight away, and after a freed block left idle pages that the request moved: a
    // request that fails beside a live allocation gives back what it moved and every idle
    // page, so the device holds what the live allocation needs.
    for earlier in [0, 6 * GIB] {
        let mut a = paged(8 * GIB);
        if earlier > 0 {
            let p = a.malloc(earlier, 0).unwrap();
            a.free(p).unwrap();
        }
        let live = a.malloc(2 * GIB, 0).unwrap();
        assert!(matches!(a.malloc(7 * GIB, 0), Err(cachalot_core::AllocError::OutOfMemory(_))));
        a.check_invariants().unwrap();
        assert_eq!(a.reserved_bytes(), 2 * GIB, "after {earlier} bytes freed: the failed request kept memory");
        assert_eq!(a.device().used(), 2 * GIB, "after {earlier} bytes freed: the device holds more than the live");
        a.free(live).unwrap();
        let s = a.malloc(6 * GIB, 0).unwrap(); // and the memory is there for the next request
        a.free(s).unwrap();
    }
    // A request larger than the device fails before touching it: the cache stays as it was
    // (beyond_device.rs).
    let mut a = paged(8 * GIB);
    let p = a.malloc(6 * GIB, 0).unwrap();
    a.free(p).unwrap();
    let reserved = a.reserved_bytes();
    assert!(matches!(a.malloc(9 * GIB, 0), Err(cachalot_core::AllocError::OutOfMemory(_))));
    assert_eq!(a.reserved_bytes(), reserved);
    a.check_invariants().unwrap();
}

#[test]
fn one_request_never_takes_reserved_memory_past_the_fraction() {
    let mut a = paged(8 << 30);
    a.set_memory_fraction(0.001).unwrap(); // 8,589,934 bytes: four 2 MiB pages
    let allowed = (8u64 << 30) / 1000;
    let p = a.malloc(4 << 20, 0).unwrap();
    assert!(a.malloc(6 << 20, 0).is_err(), "4 MiB + 6 MiB live cannot fit in 8.19 MiB");
    a.check_invariants().unwrap();
    assert!(
        a.stats().reserved_bytes.all.peak as u64 <= allowed,
        "peak reserved {} over {allowed}",
        a.stats().reserved_bytes.all.peak
    );
    assert!(a.device().used() <= allowed);
    a.free(p).unwrap();
}

#[test]
fn empty_cache_releases_ranges_left_without_pages() {
    let mut a = paged(8 << 30);
    let _ = a.malloc(9 << 30, 0); // reserves a range for the request, fails
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.reserved_bytes(), 0);
    assert_eq!(a.stats().segment.all.current, 0, "a range without pages still counts as a segment");
    assert!(a.snapshot(0).segments.is_empty());
}

#[test]
fn a_request_that_fits_under_the_fraction_is_served() {
    // Found by the property test: 180 MiB reserved, most of it idle pages on stream 0, then a
    // fraction allowing 76.8 MiB; 26 MiB are pinned under live blocks, so a 22 MiB request on
    // stream 2 fits once idle pages are returned — as PyTorch returns cached segments — even
    // where moving them cannot serve it.
    let mut a = paged(256 << 20);
    let mut live: Vec<u64> = Vec::new();
    let picks: [u64; 5] =
        [14914404248848000353, 13703591308928511040, 13072167375900204343, 2627076432097254419, 27769195955295044];
    let mut picks = picks.iter();
    let steps: [(u64, u64); 14] = [
        (1048577, 0),
        (183500289, 0),
        (1, 1),
        (1, 1),
        (0, 0),
        (1, 0),
        (1, 0),
        (0, 0),
        (2097153, 2),
        (0, 0),
        (0, 0),
        (1, 2),
        (0, 0),
        (1, 0),
    ];
    for (size, stream) in steps {
        if size == 0 {
            let pick = *picks.next().unwrap() as usize % live.len();
            a.free(live.swap_remove(pick)).unwrap();
        } else {
            live.push(a.malloc(size, stream).unwrap());
        }
    }
    live.push(a.malloc(512, 0).unwrap());
    a.set_memory_fraction(0.3).unwrap();
    for _ in 0..4 {
        live.push(a.malloc(1, 0).unwrap());
    }
    a.malloc(23068673, 2).expect("22 MiB fits: 26 MiB pinned, 76.8 MiB allowed");
    a.check_invariants().unwrap();
}

#[test]
fn empty_cache_releases_a_range_whose_pages_moved_away() {
    let mut a = paged(8 << 30);
    let p = a.malloc(64 << 20, 0).unwrap();
    a.free(p).unwrap();
    let created = a.device().calls().vm_creates;
    let q = a.malloc(64 << 20, 1).unwrap();
    assert_eq!(a.device().calls().vm_creates, created, "within the peak, stream 0's idle pages move, none is created");
    a.free(q).unwrap();
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.reserved_bytes(), 0);
    assert_eq!(a.stats().segment.all.current, 0, "stream 0's range, left without pages, still counts");
}

#[test]
fn a_page_moving_back_where_it_was_costs_no_driver_call() {
    // One page of memory moves from stream 0 to stream 1 and back. Moving leaves the old
    // mapping in place, so the way back maps nothing; empty_cache still unmaps everything.
    let mut a = paged(2 << 20);
    let p = a.malloc(2 << 20, 0).unwrap();
    a.free(p).unwrap();
    let before = a.device().calls();
    let q = a.malloc(2 << 20, 1).unwrap();
    let there = a.device().calls().since(&before);
    assert_eq!((there.vm_creates, there.vm_maps, there.vm_unmaps), (0, 1, 0), "moved: mapped there, left mapped here");
    a.check_invariants().unwrap();
    a.free(q).unwrap();
    let before = a.device().calls();
    let back = a.malloc(2 << 20, 0).unwrap();
    let calls = a.device().calls().since(&before);
    assert_eq!(back, p);
    assert_eq!(
        (calls.vm_creates, calls.vm_maps, calls.vm_set_access, calls.vm_unmaps),
        (0, 0, 0, 0),
        "moved back: {calls:?}"
    );
    a.check_invariants().unwrap();
    a.free(back).unwrap();
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    assert_eq!((a.reserved_bytes(), a.device().used(), a.device().mapped_bytes()), (0, 0, 0));
}

/// A one-page hole the request must fill, with every idle chunk eight pages: none fits the
/// hole's room. Creating a page beside them held more than the peak; under a memory fraction
/// the refusal emptied the whole cache (64 idle pages destroyed) to serve 2 MiB. Now the
/// smallest idle chunk goes back first, so the pages held do not grow either way.
#[test]
fn no_page_is_created_beyond_the_peak_while_too_large_chunks_sit_idle() {
    const MIB: u64 = 1 << 20;
    for fraction in [false, true] {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse("page_slack:0").unwrap());
        let _front = a.malloc(4 * MIB, 0).unwrap();
        let y = a.malloc(2 * MIB, 0).unwrap();
        let _z = a.malloc(2 * MIB, 0).unwrap();
        a.free(y).unwrap();
        let _w = a.malloc(2 * MIB, 1).unwrap(); // y's page moves to stream 1: a one-page hole on stream 0
        let big = a.malloc(128 * MIB, 1).unwrap();
        a.free(big).unwrap(); // 64 idle pages in chunks of 8
        if fraction {
            a.set_memory_fraction((a.reserved_bytes() + MIB) as f64 / (1u64 << 30) as f64).unwrap();
        }
        let (reserved, retries) = (a.reserved_bytes(), a.stats().num_alloc_retries);
        a.malloc(2 * MIB, 0).unwrap(); // into the one-page hole
        assert!(a.reserved_bytes() <= reserved, "fraction {fraction}: {} > {reserved}", a.reserved_bytes());
        assert!(a.reserved_bytes() >= reserved - 16 * MIB, "fraction {fraction}: one chunk went back, not the cache");
        assert_eq!(a.stats().num_alloc_retries, retries, "fraction {fraction}: no recovery path");
        a.check_invariants().unwrap();
    }
}

/// A request whose first try moved idle pages, was refused by the memory fraction, and then
/// succeeded from a block a pending free released: the moved pages go back onto their ghosts
/// (no driver call) and stay idle and in view, rather than kept where no snapshot or memory
/// map shows them.
#[test]
fn pages_moved_for_a_failed_try_go_back_where_they_were() {
    const MIB: u64 = 1 << 20;
    let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse("page_slack:0").unwrap());
    a.set_memory_fraction((30 * MIB) as f64 / (1u64 << 30) as f64).unwrap();
    let p = a.malloc(16 * MIB, 0).unwrap();
    let _k = a.malloc(2 * MIB, 0).unwrap();
    let i = a.malloc(8 * MIB, 2).unwrap();
    a.free(i).unwrap(); // 4 idle pages on stream 2
    a.record_stream(p, 1).unwrap();
    a.device_mut().hold_stream(1);
    a.free(p).unwrap(); // pending on stream 1
    a.malloc(16 * MIB, 0).unwrap(); // the first try moves stream 2's pages, then fails; the retry takes p's block
    a.check_invariants().unwrap();
    assert_eq!(a.stats().num_alloc_retries, 1, "one retry, after waiting for the pending free");
    let in_segments: u64 = a.snapshot(0).segments.iter().map(|s| s.total_size).sum();
    assert_eq!(a.reserved_bytes(), in_segments, "every reserved byte lies in a segment");
    let idle: u64 = a
        .layout()
        .iter()
        .flat_map(|r| &r.blocks)
        .filter(|b| b.piece == cachalot_core::layout::Piece::Idle)
        .map(|b| b.size)
        .sum();
    assert_eq!(idle, 8 * MIB, "stream 2's pages are idle again");
}

/// Pages freed on a stream move to that stream's next request without waiting for its work:
/// the stream runs the new work after the old, and the old mapping stays (a ghost) until
/// then. Unmapping that ghost waits for the work while it may still run.
#[test]
fn pages_move_within_their_stream_without_waiting_and_their_ghost_waits_for_the_work() {
    const MIB: u64 = 1 << 20;
    for finished in [false, true] {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse("page_slack:0,learn_layout:False").unwrap());
        a.device_mut().hold_stream(0);
        let x = a.malloc(64 * MIB, 0).unwrap();
        let _live = a.malloc(2 * MIB, 0).unwrap();
        a.free(x).unwrap(); // 32 idle pages, their work still queued
        let before = a.device().calls();
        let _grown = a.malloc(66 * MIB, 0).unwrap(); // beyond the peak in use: x's pages move here
        let moved = a.device().calls().since(&before);
        assert!(moved.vm_maps > 0 && moved.vm_creates <= 2, "finished {finished}: x's pages moved: {moved:?}");
        assert_eq!(moved.stream_syncs, 0, "finished {finished}: a move within the stream waits for nothing");
        a.check_invariants().unwrap();
        if finished {
            a.device_mut().finish_stream(0);
        }
        // A request placed where x was maps pages over its ghosts: unmapping them waits for
        // stream 0 only while its work may run.
        let before = a.device().calls();
        let _again = a.malloc(64 * MIB, 0).unwrap();
        let calls = a.device().calls().since(&before);
        assert!(calls.vm_unmaps > 0, "finished {finished}: the ghosts were unmapped: {calls:?}");
        assert_eq!(calls.stream_syncs, u64::from(!finished), "finished {finished}: {calls:?}");
        a.check_invariants().unwrap();
    }
}

/// A chunk moved within its stream for a request that then fails goes back where it came
/// from, and the work that may still use its pages is waited for before another stream
/// gets them: the chunk had an older ghost too, whose block's stamp says that work is done.
#[test]
fn a_chunk_moved_back_after_a_failed_request_still_waits_for_its_stream_before_another_takes_it() {
    use cachalot_core::sim::FaultSite;
    const MIB: u64 = 1 << 20;
    let mut a = Allocator::new(SimDevice::new(16 << 30), Config::parse("page_slack:0,learn_layout:False").unwrap());
    let x = a.malloc(128 * MIB, 0).unwrap();
    let _live = a.malloc(2 * MIB, 0).unwrap();
    a.free(x).unwrap();
    let r1 = a.malloc(130 * MIB, 0).unwrap(); // x's chunks move here: their ghosts stay at x
    let _live2 = a.malloc(130 * MIB, 0).unwrap();
    let r1_memory = a.device().memory_behind(r1, 130 * MIB);
    a.device_mut().hold_stream(0);
    a.free(r1).unwrap(); // r1's work still queued on stream 0
    let n = a.device().next_call(FaultSite::Map);
    a.device_mut().fail_map_call(n + 1);
    assert!(a.malloc(132 * MIB, 0).is_err(), "the second map of the request fails");
    a.check_invariants().unwrap();
    let t = a.malloc(16 * MIB, 1).unwrap();
    let shared = a
        .device()
        .memory_behind(t, 16 * MIB)
        .iter()
        .any(|&(m, o, l)| r1_memory.iter().any(|&(rm, ro, rl)| rm == m && ro < o + l && o < ro + rl));
    assert!(!(shared && a.device().is_busy(0)), "stream 1 got pages stream 0's work may still use");
    a.check_invariants().unwrap();
}

/// Idle pages freed while their stream was busy move to another stream without waiting for
/// that stream once an event recorded after the free shows its work done (the free epochs
/// of `epochs.rs`), and wait for it while its work may still be running.
#[test]
fn idle_pages_wait_for_their_stream_only_while_its_work_may_run() {
    const MIB: u64 = 1 << 20;
    for finished in [true, false] {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::parse("page_slack:0").unwrap());
        a.device_mut().hold_stream(2);
        let on_2 = a.malloc(2 * MIB, 2).unwrap();
        let on_3 = a.malloc(64 * MIB, 3).unwrap();
        a.free(on_3).unwrap();
        a.free(on_2).unwrap(); // one page, stamped with stream 2's open epoch
        a.malloc(8 * MIB, 0).unwrap(); // a slow path: closes stream 2's epoch with an event, moves a chunk of stream 3's
        a.malloc(56 * MIB, 3).unwrap(); // the rest of stream 3's pages, from its cache
        if finished {
            a.device_mut().finish_stream(2);
        }
        let before = a.device().calls();
        a.malloc(2 * MIB, 0).unwrap(); // beyond the peak in use: stream 2's idle page moves here
        let calls = a.device().calls().since(&before);
        assert_eq!((calls.vm_maps, calls.vm_creates), (1, 0), "finished {finished}: the idle page moved");
        assert_eq!(
            calls.stream_syncs,
            u64::from(!finished),
            "finished {finished}: waits for stream 2 only while it may run"
        );
        a.check_invariants().unwrap();
    }
}
