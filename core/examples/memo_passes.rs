//! When the decision memo starts replaying each reference trace, and what it holds: replays
//! each trace PASSES times (default 12) on one allocator under CONFIG (default
//! `policy:pytorch`) and prints the memo's counts after each pass.
//! `cargo run --release -p cachalot-core --example memo_passes -- 12 policy:pytorch`
use cachalot_core::{Allocator, Config, Replayer, SimDevice};

#[path = "../benches/support/mod.rs"]
#[allow(dead_code)] // the peers are not used here
mod support;
use support::{load_trace, TRACES};

fn main() {
    let mut args = std::env::args().skip(1);
    let passes: usize = args.next().and_then(|p| p.parse().ok()).unwrap_or(12);
    let conf = args.next().unwrap_or_else(|| "policy:pytorch".into());
    for name in TRACES {
        let trace = load_trace(name);
        let mut a = Allocator::new(SimDevice::new(140 << 30), Config::parse(&conf).unwrap());
        let mut r = Replayer::new(trace.slots);
        for pass in 1..=passes {
            r.run_pass(&mut a, &trace.ops).unwrap();
            let c = a.memo_counts();
            println!(
                "{name} pass {pass}: replaying {}, period {} operations, {} periods replayed, {} replays ended, {} bytes",
                c.replaying, c.period, c.periods_replayed, c.replays_ended, c.bytes
            );
        }
    }
}
