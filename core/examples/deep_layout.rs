//! How the passes that are not warm grow with a model's depth: a synthetic training step of
//! `LAYERS` layers (each layer's forward makes an activation kept until its backward, and a
//! few short-lived temporaries; the backward frees the activations in reverse, making a
//! gradient per layer), replayed over a simulated device under cachalot's policy. Prints, per
//! depth, the operations of a step and the milliseconds of each pass: the first is cold, the
//! third makes the layout, the fourth on follow it. `PASSES` sets the passes (6), `CONFIG`
//! the allocator's config (`policy:cachalot`).
//! `cargo run --release -p cachalot-core --example deep_layout -- 12 48 192`
use cachalot_core::{Allocator, Config, Replayer, SimDevice, TraceOp};

/// One step's operations for a model of `layers` layers; slots are reused from step to step.
fn step(layers: u32) -> (Vec<TraceOp>, u32) {
    let mut ops = Vec::new();
    let alloc = |slot, size| TraceOp::Alloc { slot, size, stream: 0 };
    let (acts, temps, grads) = (0, layers, layers + 4);
    for l in 0..layers {
        let width = ((1 + l % 7) as u64) << 20;
        ops.push(alloc(acts + l, 3 * width));
        for t in 0..4 {
            ops.push(alloc(temps + t, width / (t as u64 + 1) + 512 * l as u64));
        }
        for t in 0..4 {
            ops.push(TraceOp::Free { slot: temps + t });
        }
    }
    for l in (0..layers).rev() {
        let width = ((1 + l % 7) as u64) << 20;
        ops.push(alloc(grads + l, 2 * width));
        ops.push(alloc(temps, width + 4096));
        ops.push(TraceOp::Free { slot: temps });
        ops.push(TraceOp::Free { slot: acts + l });
        if l + 1 < layers {
            ops.push(TraceOp::Free { slot: grads + l + 1 });
        }
    }
    ops.push(TraceOp::Free { slot: grads });
    (ops, grads + layers)
}

fn main() {
    let passes: usize = std::env::var("PASSES").ok().and_then(|p| p.parse().ok()).unwrap_or(6);
    let config = std::env::var("CONFIG").unwrap_or_else(|_| "policy:cachalot".into());
    let depths: Vec<u32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    for layers in if depths.is_empty() { vec![12, 48, 192] } else { depths } {
        let (ops, slots) = step(layers);
        let mut a = Allocator::new(SimDevice::new(1 << 40), Config::parse(&config).expect("CONFIG"));
        let mut r = Replayer::new(slots);
        let ms: Vec<String> = (0..passes)
            .map(|_| {
                let t = std::time::Instant::now();
                r.run_pass(&mut a, &ops).unwrap();
                format!("{:.1}", t.elapsed().as_secs_f64() * 1e3)
            })
            .collect();
        println!(
            "{layers} layers, {} operations a step: ms per pass [{}]; {:?}",
            ops.len(),
            ms.join(", "),
            a.plan_counts()
        );
    }
}
