//! Parity with PyTorch 2.11: replaying each reference trace under `policy:pytorch` reserves
//! the same peak as PyTorch's own allocator did on the H200 (within 0.5%).

use crate::common;

use cachalot_core::{Allocator, Config, Replayer, SimDevice};
use common::{load_trace, pytorch_peak_reserved, TRACES};

const H200: u64 = 140 << 30;

fn check(conf_pytorch: &str, conf_ours: &str) {
    for name in TRACES {
        let trace = load_trace(name);
        let mut a = Allocator::new(SimDevice::new(H200), Config::parse(conf_ours).unwrap());
        let out = Replayer::replay(&mut a, &trace).unwrap();
        a.check_invariants().unwrap();
        let want = pytorch_peak_reserved(name, conf_pytorch);
        let got = out.peak_reserved_bytes;
        let err = (got as f64 - want as f64).abs() / want as f64;
        eprintln!(
            "{name} {conf_pytorch}: ours {got} pytorch {want} ({:+.4}%)",
            100.0 * (got as f64 / want as f64 - 1.0)
        );
        assert!(err <= 0.005, "{name} under {conf_ours}: peak reserved {got}, PyTorch {want}");
        assert_eq!(out.ooms, 0);
    }
}

#[test]
fn default_config_matches_pytorch() {
    check("default", "policy:pytorch");
}

#[test]
fn max_split_size_128_matches_pytorch() {
    check("max_split_size_mb:128", "policy:pytorch,max_split_size_mb:128");
}
