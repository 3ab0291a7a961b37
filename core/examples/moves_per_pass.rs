//! Replays each reference trace for many passes on one allocator and prints, per trace, the
//! first pass's reserved / requested, the peak over all passes, the mean unmaps of the passes
//! after the first and every pass's unmaps, then the same for all the calls that moving pages
//! makes (maps, access grants and unmaps; simulated device), what learned layouts did, and the
//! milliseconds each pass took: the figures behind page slack, ghosts and the learned layout
//! in docs/design.md: `cargo run --release -p cachalot-core --example
//! moves_per_pass -- 20 policy:cachalot,page_slack:0.1`.
use std::io::Read;

use cachalot_core::{parse_trace, Allocator, Config, Replayer, SimDevice};

fn main() {
    let mut args = std::env::args().skip(1);
    let passes: usize = args.next().and_then(|p| p.parse().ok()).unwrap_or(20);
    let conf = args.next().unwrap_or_else(|| "policy:cachalot".into());
    for name in ["gpt2_train.csv.gz", "resnet50_train.csv.gz", "mixed_fc_conv.csv.gz"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces").join(name);
        let mut text = String::new();
        flate2::read::GzDecoder::new(&std::fs::read(path).unwrap()[..]).read_to_string(&mut text).unwrap();
        let trace = parse_trace(&text).unwrap();
        let mut a = Allocator::new(SimDevice::new(140 << 30), Config::parse(&conf).unwrap());
        let mut r = Replayer::new(trace.slots);
        let mut unmaps = Vec::new();
        let mut calls = Vec::new();
        let mut first = 0.0;
        let mut requested = 0;
        let mut ms = Vec::new();
        for p in 0..passes {
            let before = a.device().calls();
            let start = std::time::Instant::now();
            let out = r.run_pass(&mut a, &trace.ops).unwrap();
            ms.push(format!("{:.1}", start.elapsed().as_secs_f64() * 1e3));
            if p == 0 {
                requested = out.peak_requested_bytes;
                first = out.peak_reserved_bytes as f64 / requested as f64;
            }
            let c = a.device().calls().since(&before);
            unmaps.push(c.vm_unmaps);
            calls.push(c.vm_unmaps + c.vm_maps + c.vm_set_access);
        }
        let all = a.stats().reserved_bytes.all.peak as f64 / requested as f64;
        let later = &unmaps[1..];
        let mean = later.iter().sum::<u64>() as f64 / later.len().max(1) as f64;
        let later_calls = &calls[1..];
        let mean_calls = later_calls.iter().sum::<u64>() as f64 / later_calls.len().max(1) as f64;
        println!("{name:24} first {first:.4} all {all:.4} unmaps/pass(2..) {mean:.0} passes {:?}", unmaps);
        println!("{:24} map+access+unmap calls/pass(2..) {mean_calls:.0} passes {:?}", "", calls);
        println!("{:24} {:?}", "", a.plan_counts());
        println!("{:24} ms per pass [{}]", "", ms.join(", "));
    }
}
