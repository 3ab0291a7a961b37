//! `thread_scaling TRACE [THREADS] [PASSES] [--device N]`: how total throughput grows with threads, each on a
//! stream of its own, sharing one allocator over a simulated device; once with one lock for
//! the device (the default), once with `lock_per_stream:True`, and, as the host's own
//! baseline, with an allocator per thread, which share nothing.
//!
//! The CPU-only twin of `native/gpu/contention_bench.cpp` (which does the same through the C
//! ABI over real CUDA memory): each thread replays the whole trace on its own stream, one
//! warm-up pass, then PASSES timed passes with all threads released at once. Prints a table
//! (threads 1 to THREADS, default 2; PASSES default 5) per config. Of a snapshot of several
//! GPUs, `--device N` picks the one to replay.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use cachalot::SharedAllocator;
use cachalot_core::{Config, Trace, TraceOp};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("thread_scaling: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One pass of the trace on `stream`, every allocation freed at the end.
fn pass(a: &SharedAllocator, trace: &Trace, stream: u64, slots: &mut [u64]) -> Result<(), String> {
    for op in &trace.ops {
        match *op {
            TraceOp::Alloc { slot, size, .. } => {
                slots[slot as usize] = a.malloc(size, stream).map_err(|e| e.to_string())?;
            }
            // Frees that waited for another stream in the recorded run are at once here.
            TraceOp::Free { slot } | TraceOp::FreeDeferred { slot, .. } => {
                a.free(std::mem::take(&mut slots[slot as usize])).map_err(|e| e.to_string())?;
            }
            TraceOp::FreeCompleted { .. } => {}
        }
    }
    for addr in slots.iter_mut().filter(|a| **a != 0) {
        a.free(std::mem::take(addr)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Wall time of `passes` passes on each of `threads` threads, after a warm-up pass each; with
/// `separate`, each thread has an allocator of its own, so they share nothing at all: the
/// host's own scaling, the most a shared allocator could reach.
fn measure(config: &Config, trace: &Trace, threads: usize, passes: usize, separate: bool) -> Result<f64, String> {
    let make = || {
        SharedAllocator::simulated(cachalot::shared_allocator::MAX_SIMULATED_CAPACITY, config.clone())
            .map_err(|e| e.to_string())
    };
    let allocators = (0..if separate { threads } else { 1 }).map(|_| make()).collect::<Result<Vec<_>, _>>()?;
    let (ready, go) = (AtomicUsize::new(0), AtomicBool::new(false));
    let mut wall = 0.0;
    std::thread::scope(|s| -> Result<(), String> {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (a, ready, go) = (&allocators[if separate { t } else { 0 }], &ready, &go);
                s.spawn(move || -> Result<(), String> {
                    let mut slots = vec![0u64; trace.slots as usize];
                    let stream = 0x1000 + t as u64;
                    pass(a, trace, stream, &mut slots)?;
                    ready.fetch_add(1, Ordering::AcqRel);
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    (0..passes).try_for_each(|_| pass(a, trace, stream, &mut slots))
                })
            })
            .collect();
        while ready.load(Ordering::Acquire) < threads {
            std::thread::yield_now();
        }
        let start = Instant::now();
        go.store(true, Ordering::Release);
        for w in workers {
            w.join().map_err(|_| "a worker panicked".to_string())??;
        }
        wall = start.elapsed().as_secs_f64();
        Ok(())
    })?;
    for a in &allocators {
        a.check_invariants()?;
    }
    Ok(wall)
}

fn run() -> Result<(), String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: thread_scaling TRACE [THREADS] [PASSES] [--device N]";
    let device = cachalot_cli::trace_file::take_device_flag(&mut args)?;
    let trace = cachalot_cli::trace_file::read(args.first().ok_or(usage)?, device)?;
    let number = |i: usize, default: usize| -> Result<usize, String> {
        args.get(i).map_or(Ok(default), |v| v.parse().ok().filter(|&n| n > 0).ok_or(format!("{usage}: got '{v}'")))
    };
    let (max_threads, passes) = (number(1, 2)?, number(2, 5)?);
    let configs = [("policy:pytorch", false), ("policy:pytorch,lock_per_stream:True", false), ("policy:pytorch", true)];
    for (text, separate) in configs {
        let config = Config::parse(text).map_err(|e| e.to_string())?;
        let what =
            if separate { format!("{text}, an allocator per thread (shares nothing)") } else { text.to_string() };
        println!("== {what}: {} ops per pass, {passes} timed passes per thread", trace.ops.len());
        println!("| threads | total Mops/s | vs 1 thread |");
        println!("|---:|---:|---:|");
        let mut single = 0.0;
        for threads in 1..=max_threads {
            let wall = measure(&config, &trace, threads, passes, separate)?;
            let mops = (trace.ops.len() * passes * threads) as f64 / wall / 1e6;
            if threads == 1 {
                single = mops;
            }
            println!("| {threads} | {mops:.2} | {:.2}x |", mops / single);
        }
    }
    Ok(())
}
