//! `trace_ops TRACE [--device N]`: writes a trace as plain-text operations for programs that cannot parse
//! traces themselves (the GPU check in `native/gpu/` replays these through the C ABI).
//!
//! The trace is read by the core's own parser, so the operations are exactly those the
//! `cachalot` tool and the simulated replays execute. Output, one line each:
//! `cachalot-ops 1 <ops> <slots>`, then `a <slot> <size> <stream>` (allocate `size` bytes on
//! stream `stream`, a hex `CUstream` value, into `slot`) or `f <slot>` (free the allocation in
//! `slot`). Of a snapshot of several GPUs, `--device N` picks the one whose events are
//! written. Invariant: every `f` names a slot whose allocation is live.

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use cachalot_core::TraceOp;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trace_ops: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let device = cachalot_cli::trace_file::take_device_flag(&mut args)?;
    let path = args.first().ok_or("usage: trace_ops TRACE [--device N] (.csv, .csv.gz or snapshot .json)")?;
    let trace = cachalot_cli::trace_file::read(path, device)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let io = |e: std::io::Error| e.to_string();
    writeln!(out, "cachalot-ops 1 {} {}", trace.ops.len(), trace.slots).map_err(io)?;
    for op in &trace.ops {
        match *op {
            TraceOp::Alloc { slot, size, stream } => writeln!(out, "a {slot} {size} {stream:x}"),
            // The CUDA replays free at once: their streams are real, none can stand for the
            // recorded run's other stream.
            TraceOp::Free { slot } | TraceOp::FreeDeferred { slot, .. } => writeln!(out, "f {slot}"),
            TraceOp::FreeCompleted { .. } => continue,
        }
        .map_err(io)?;
    }
    out.flush().map_err(io)
}
