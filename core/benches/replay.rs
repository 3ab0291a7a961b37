//! Replay benchmark: each reference trace, warm cache, through cachalot (PyTorch's policy
//! and cachalot's own) and through peer offset allocators in the same run.
//!
//! One iteration is one full pass over the trace; ns per operation is the iteration time
//! divided by the trace's operation count (criterion's throughput line shows ops/s).

mod support;

use std::hint::black_box;
use std::time::Duration;

use cachalot_core::{Allocator, Config, Replayer, SimDevice};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use support::{load_trace, replay_peer, Buddy, OffsetAllocator, Peer, RangeAlloc, PEER_UNITS, TRACES};

fn bench_peer<P: Peer>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    trace: &cachalot_core::Trace,
) {
    let mut peer = P::new(PEER_UNITS);
    let mut slots = vec![None; trace.slots as usize];
    g.bench_function(BenchmarkId::from_parameter(P::NAME), |b| {
        b.iter(|| replay_peer(black_box(&mut peer), trace, &mut slots))
    });
}

fn replay(c: &mut Criterion) {
    for name in TRACES {
        let trace = load_trace(name);
        let mut g = c.benchmark_group(format!("replay/{}", name.trim_end_matches(".csv.gz")));
        g.throughput(Throughput::Elements(trace.ops.len() as u64));
        for conf in ["policy:pytorch", "policy:cachalot"] {
            let mut alloc = Allocator::new(SimDevice::new(140 << 30), Config::parse(conf).unwrap());
            let mut replayer = Replayer::new(trace.slots);
            replayer.run_pass(&mut alloc, &trace.ops).unwrap(); // warm the cache
            g.bench_function(BenchmarkId::from_parameter(format!("cachalot {conf}")), |b| {
                b.iter(|| replayer.run_pass(black_box(&mut alloc), &trace.ops).unwrap())
            });
        }
        bench_peer::<OffsetAllocator>(&mut g, &trace);
        bench_peer::<RangeAlloc>(&mut g, &trace);
        bench_peer::<Buddy>(&mut g, &trace);
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(20);
    targets = replay
}
criterion_main!(benches);
