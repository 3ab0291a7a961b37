//! Reserved memory on the reference traces, in simulation (deterministic):
//! - PyTorch's expandable segments (`policy:pytorch,expandable_segments:True`) reserve what
//!   PyTorch 2.11 reserved on the H200 (within 2%), with the same number of mappings;
//! - cachalot's paged policy reserves at most 3% more than the trace's peak requested bytes,
//!   and no more than the best of PyTorch's four configurations for that trace.

mod common;

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
