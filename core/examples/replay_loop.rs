//! Replays a reference trace in a loop (for profilers): `cargo run --release -p cachalot-core
//! --example replay_loop -- gpt2_train.csv.gz 50 policy:pytorch`. In place of a config,
//! `peer:offset-allocator`, `peer:range-alloc` or `peer:buddy` replays the trace through that
//! peer crate as the replay benchmark does (`benches/support`), so callgrind can count both.
//! With `REPLAY_READS=1` the statistics are read after each pass.
use std::io::Read;

use cachalot_core::{parse_trace, Allocator, Config, Replayer, SimDevice};

#[path = "../benches/support/mod.rs"]
#[allow(dead_code)] // the benchmark's loader and trace list are not used here
mod support;
use support::{replay_peer, Buddy, OffsetAllocator, Peer, RangeAlloc, PEER_UNITS};

fn peer_passes<P: Peer>(trace: &cachalot_core::Trace, passes: usize) -> f64 {
    let mut peer = P::new(PEER_UNITS);
    let mut slots = vec![None; trace.slots as usize];
    let t = std::time::Instant::now();
    for _ in 0..passes {
        replay_peer(&mut peer, trace, &mut slots);
    }
    t.elapsed().as_nanos() as f64 / (passes * trace.ops.len()) as f64
}

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "gpt2_train.csv.gz".into());
    let passes: usize = args.next().and_then(|p| p.parse().ok()).unwrap_or(50);
    let conf = args.next().unwrap_or_else(|| "policy:pytorch".into());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces").join(&name);
    let mut text = String::new();
    flate2::read::GzDecoder::new(&std::fs::read(path).unwrap()[..]).read_to_string(&mut text).unwrap();
    let trace = parse_trace(&text).unwrap();
    let peer = match conf.as_str() {
        "peer:offset-allocator" => Some(peer_passes::<OffsetAllocator>(&trace, passes)),
        "peer:range-alloc" => Some(peer_passes::<RangeAlloc>(&trace, passes)),
        "peer:buddy" => Some(peer_passes::<Buddy>(&trace, passes)),
        _ => None,
    };
    if let Some(ns) = peer {
        return println!("{name} {conf}: {ns:.1} ns/op over {passes} passes");
    }
    let mut a = Allocator::new(SimDevice::new(140 << 30), Config::parse(&conf).unwrap());
    let mut r = Replayer::new(trace.slots);
    // REPLAY_READS=1 reads the statistics after each pass, as `Replayer::run_pass` does.
    let reads = std::env::var("REPLAY_READS").is_ok_and(|v| v == "1");
    let t = std::time::Instant::now();
    for _ in 0..passes {
        match reads {
            true => r.run_pass(&mut a, &trace.ops).map(|_| ()),
            false => r.run_unread(&mut a, &trace.ops),
        }
        .unwrap();
    }
    let ns = t.elapsed().as_nanos() as f64 / (passes * trace.ops.len()) as f64;
    println!("{name} {conf}: {ns:.1} ns/op over {passes} passes");
}
