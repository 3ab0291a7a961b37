//! Criterion over real CUDA memory: each reference trace replayed through the core on
//! `CudaDevice` (device 0), under both policies, warm (the cache the previous pass left, so
//! almost no driver calls) and cold (a fresh allocator each pass: every segment, page and
//! mapping the trace needs is a driver call). ns per operation = time per pass / operations.
//!
//! Built here with `cargo bench -p cachalot --bench cuda_replay --no-run` and run on the GPU
//! machine from the repository root (the traces are read from `traces/` there); on a machine
//! without a CUDA device it says so and measures nothing. The reference traces use only the
//! default stream, which is what the replay hands the device.

use std::hint::black_box;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cachalot::cuda::CudaDevice;
use cachalot_core::{parse_trace, Allocator, Config, Replayer, Trace};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const TRACES: [&str; 3] = ["mixed_fc_conv", "resnet50_train", "gpt2_train"];
const CONFIGS: [&str; 2] = ["policy:pytorch", "policy:cachalot"];

/// `traces/NAME.csv.gz` under the working directory (the GPU machine's checkout), else
/// under this crate's repository.
fn load_trace(name: &str) -> Trace {
    let file = format!("{name}.csv.gz");
    let here = PathBuf::from("traces").join(&file);
    let path =
        if here.exists() { here } else { PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces").join(&file) };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut text).expect("gzip");
    let trace = parse_trace(&text).expect("trace parses");
    assert_eq!(trace.report.streams, 1, "{name}: the replay hands every operation the default stream");
    trace
}

fn fresh(conf: &str) -> Allocator<CudaDevice> {
    Allocator::new(CudaDevice::new(0).expect("CUDA device 0"), Config::parse(conf).expect("config"))
}

fn replay(c: &mut Criterion) {
    if let Err(e) = CudaDevice::new(0) {
        eprintln!("cuda_replay: no CUDA device, nothing measured ({e})");
        return;
    }
    for name in TRACES {
        let trace = load_trace(name);
        let mut g = c.benchmark_group(format!("cuda/{name}"));
        g.throughput(Throughput::Elements(trace.ops.len() as u64));
        for conf in CONFIGS {
            let mut alloc = fresh(conf);
            let mut replayer = Replayer::new(trace.slots);
            replayer.run_pass(&mut alloc, &trace.ops).expect("first pass");
            g.bench_function(BenchmarkId::from_parameter(format!("{conf} warm")), |b| {
                b.iter(|| replayer.run_pass(black_box(&mut alloc), &trace.ops).expect("warm pass"))
            });
            alloc.empty_cache().expect("empty_cache");
            g.bench_function(BenchmarkId::from_parameter(format!("{conf} cold")), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let mut cold = fresh(conf);
                        let mut replayer = Replayer::new(trace.slots);
                        let start = Instant::now();
                        replayer.run_pass(black_box(&mut cold), &trace.ops).expect("cold pass");
                        total += start.elapsed();
                        cold.empty_cache().expect("empty_cache"); // memory back before the next pass
                    }
                    total
                })
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(10);
    targets = replay
}
criterion_main!(benches);
