//! `cachalot replay`: one trace, one config; a readable report or one JSON object.

use super::args::Args;
use super::run::{human, run as replay};
use super::search::{candidates, search};
use super::{input, parse_config, plot, run_options, series, Failure};

/// Which config of `advise`'s search avoids out of memory on this trace at this capacity.
fn avoiding_config(t: &input::NamedTrace, failed: &str, capacity: u64) -> Result<String, String> {
    let ranked = search(t, &candidates(), capacity)?;
    Ok(match ranked.iter().find(|c| c.ooms == 0) {
        Some(c) => format!(
            "avoided by     {} on this trace (peak reserved {}, no out-of-memory); {} ran out",
            c.config,
            human(c.peak_reserved_bytes),
            failed
        ),
        None => "avoided by     no config tried: the trace needs more memory than this capacity".to_string(),
    })
}

pub fn run(args: &mut Args) -> Result<(), Failure> {
    let json = args.flag("json");
    let summary = args.flag("summary");
    let strict = args.flag("strict");
    let plot = args.value("plot").map_err(Failure::Usage)?;
    let config = args.value("config").map_err(Failure::Usage)?.unwrap_or_default();
    let opts = run_options(args, summary)?;
    args.finish(1).map_err(Failure::Usage)?;
    let config = parse_config(&config)?;
    let trace = input::load(args.positional(0))?;
    input::check_skipped(&trace, strict)?;
    let r = replay(&trace, &config, &opts)?;
    if json {
        println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
    } else {
        println!("trace     {} ({})", r.trace, trace.trace.describe());
        println!("config    {}", r.config);
        println!("device    simulated, {}", human(r.capacity_bytes));
        println!("peak requested  {:>12}", human(r.peak_requested_bytes));
        println!("peak allocated  {:>12}", human(r.peak_allocated_bytes));
        println!("peak reserved   {:>12}  ({:.3}x requested)", human(r.peak_reserved_bytes), r.reserved_over_requested);
        println!(
            "  all {} passes {:>12}  ({:.3}x requested)",
            r.ns_per_op_passes.len() + 1,
            human(r.peak_reserved_bytes_all_passes),
            r.peak_reserved_bytes_all_passes as f64 / r.peak_requested_bytes.max(1) as f64
        );
        println!("device calls    {} allocs, {} frees", r.device_allocs, r.device_frees);
        if r.segment_placements_recorded > 0 {
            println!(
                "placements      {} of the {} segments the snapshot recorded placed where the run placed them",
                r.segment_placements_followed, r.segment_placements_recorded
            );
        }
        if r.virtual_memory {
            let (c, w) = (&r.device_calls_cold, &r.device_calls_warm);
            println!(
                "virtual memory  first pass: {} pages created, {} mapped, {} unmap calls; a warm pass: {} mapped, {} unmap calls",
                c.vm_creates, c.vm_maps, c.vm_unmaps, w.vm_maps, w.vm_unmaps
            );
        }
        println!("out of memory   {}", r.ooms);
        println!(
            "cpu cost        {:.1} ns/op warm (median of {}), {:.1} ns/op cold",
            r.ns_per_op,
            r.ns_per_op_passes.len(),
            r.ns_per_op_cold
        );
        if let Some(oom) = &r.first_oom {
            println!("first OOM       {oom}");
            println!("{}", avoiding_config(&trace, &r.config, opts.capacity)?);
        }
    }
    if let Some(path) = plot {
        let s = series::record(&trace, &config, opts.capacity)?;
        std::fs::write(&path, plot::timeline(&trace.name, &s)).map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    if let (Some(peak), Some(end)) = (&r.summary_at_peak, &r.summary_at_end) {
        let text = format!(
            "memory summary {peak}\nmemory summary at the end of the trace (before freeing what it left live):\n{end}"
        );
        // With --json, stdout holds exactly one JSON object.
        if json {
            eprint!("{text}");
        } else {
            print!("\n{text}");
        }
    }
    Ok(())
}
