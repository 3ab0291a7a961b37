//! Replays a reference trace in a loop (for profilers): `cargo run --release -p cachalot-core
//! --example replay_loop -- gpt2_train.csv.gz 50 policy:pytorch`.
use std::io::Read;

use cachalot_core::{parse_trace, Allocator, Config, Replayer, SimDevice};

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "gpt2_train.csv.gz".into());
    let passes: usize = args.next().and_then(|p| p.parse().ok()).unwrap_or(50);
    let conf = args.next().unwrap_or_else(|| "policy:pytorch".into());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces").join(&name);
    let mut text = String::new();
    flate2::read::GzDecoder::new(&std::fs::read(path).unwrap()[..]).read_to_string(&mut text).unwrap();
    let trace = parse_trace(&text).unwrap();
    let mut a = Allocator::new(SimDevice::new(140 << 30), Config::parse(&conf).unwrap());
    let mut r = Replayer::new(trace.slots);
    let t = std::time::Instant::now();
    for _ in 0..passes {
        r.run_pass(&mut a, &trace.ops).unwrap();
    }
    let ns = t.elapsed().as_nanos() as f64 / (passes * trace.ops.len()) as f64;
    println!("{name} {conf}: {ns:.1} ns/op over {passes} passes");
}
