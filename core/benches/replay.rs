//! Replay benchmark: each reference trace, warm cache, through cachalot (PyTorch's policy
//! and cachalot's own) and through peer offset allocators in the same run.
//!
//! One iteration is one full pass over the trace; ns per operation is the iteration time
//! divided by the trace's operation count (criterion's throughput line shows ops/s). As the
//! peers are, cachalot is timed reading nothing but the addresses; the `read each pass` row
//! also reads its statistics after each pass. `decision_memo:False` is the default, the path
//! every user takes; `decision_memo:True` replays a repeated loop's decisions from its fifth
//! pass on, so its figure depends on how many passes ran.

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
        // The memo is named either way, so a bench id means the same at commits whose
        // defaults differ (before_after.sh runs this code on an older core).
        let configs = [
            ("policy:pytorch,decision_memo:False", false),
            ("policy:pytorch,decision_memo:True", false),
            ("policy:pytorch,decision_memo:True", true),
            ("policy:cachalot", false),
        ];
        for (conf, reads) in configs {
            let mut alloc = Allocator::new(SimDevice::new(140 << 30), Config::parse(conf).unwrap());
            let mut replayer = Replayer::new(trace.slots);
            replayer.run_pass(&mut alloc, &trace.ops).unwrap(); // warm the cache
            let id = if reads { format!("cachalot {conf}, read each pass") } else { format!("cachalot {conf}") };
            g.bench_function(BenchmarkId::from_parameter(id), |b| {
                b.iter(|| match reads {
                    true => replayer.run_pass(black_box(&mut alloc), &trace.ops).map(|_| ()).unwrap(),
                    false => replayer.run_unread(black_box(&mut alloc), &trace.ops).unwrap(),
                })
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
