//! `cachalot replay`: one trace, one config; a readable report or one JSON object.
//!
//! Invariant: with `--json`, stdout holds exactly one JSON object (summaries go to stderr).

use std::io::Write;

use super::byte_size::human;
use super::command_line::ReplayArgs;
use super::output::wrote;
use super::output::Out;
use super::paragraph::field;
use super::plot_file::PlotFile;
use super::run::{driver_calls, run as replay};
use super::search::{candidates, search, why_none_fits};
use super::snapshot_file::SnapshotFile;
use super::table::DEFAULT_WIDTH as WIDTH;
use super::{input, parse_user_configs, plot, run_options, series, ConfigText, Failure, Finished};

/// Which config of `advise`'s search avoids out of memory on this trace at this capacity: the
/// report's `avoided by` line, filled to the report's width. Where no config does, the reason
/// stays on one line (scripts and tests find it whole), up to 112 columns.
fn avoiding_config(t: &input::NamedTrace, failed: &str, capacity: u64) -> Result<String, String> {
    let ranked = search(t, &candidates(), capacity)?;
    Ok(match ranked.iter().find(|c| c.ooms == 0) {
        Some(c) => field(
            "avoided by     ",
            &format!(
                "{} on this trace (peak reserved {}, no out-of-memory); {} ran out",
                c.config,
                human(c.peak_reserved_bytes),
                failed
            ),
            WIDTH,
        ),
        None => format!("avoided by     no config tried: {}", why_none_fits(t.peak_requested(), capacity)),
    })
}

/// The warm CPU cost, split where the decision memo engaged: passes it answered cost far
/// less than those before, and one median over both would move with `--passes` unexplained.
fn cpu_cost(r: &super::run::RunReport) -> String {
    let answered = r.memo_answered_passes.iter().filter(|&&m| m).count();
    // The host's CPU over a simulated device: never a GPU's figure. The line breaks keep each
    // phrase whole within 100 columns.
    let cold = format!("{:.1} cold;\nhost CPU, simulated device", r.ns_per_op_cold);
    match (r.ns_per_op_before_memo, r.ns_per_op_with_memo) {
        (Some(before), Some(with)) => format!(
            "{before:.1} ns/op warm before the decision memo engaged (median of {} passes),\n\
             {with:.1} ns/op once it answered (median of {answered}), {cold}",
            r.memo_answered_passes.len() - answered
        ),
        (None, Some(with)) => format!("{with:.1} ns/op warm, every pass answered by the decision memo, {cold}"),
        _ => format!(
            "{:.1} ns/op warm (median of {}, decision memo {}), {cold}",
            r.ns_per_op,
            r.ns_per_op_passes.len(),
            if r.figures.config.contains("decision_memo:True") { "never engaged" } else { "off" }
        ),
    }
}

pub fn run(args: &ReplayArgs, out: Out) -> Result<Finished, Failure> {
    let json = args.trace.json;
    let opts = run_options(&args.device, &args.passes, args.summary);
    let config = parse_user_configs(&[ConfigText::resolve(args.config.as_deref())?])?.remove(0);
    let plot = args.plot.as_deref().map(PlotFile::claim).transpose()?;
    let snapshot = args.snapshot.as_deref().map(SnapshotFile::claim).transpose()?;
    let mut trace = input::load(args.trace.trace.as_deref(), args.trace.device, &args.trace.limits.limits())?;
    input::check_skipped(&trace, args.trace.strict)?;
    if args.trace.no_follow_addresses {
        trace.trace.segment_placements.clear();
    }
    let r = replay(&trace, &config, &opts)?;
    if json {
        serde_json::to_writer(&mut *out, &r).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", field("trace     ", &format!("{} ({})", trace.label(), trace.trace.describe()), WIDTH))?;
        writeln!(out, "{}", field("config    ", &r.figures.config.to_string(), WIDTH))?;
        writeln!(out, "{}", field("device    ", &format!("simulated, {}", human(r.figures.capacity_bytes)), WIDTH))?;
        writeln!(out, "peak requested  {:>12}", human(r.figures.peak_requested_bytes))?;
        writeln!(out, "peak allocated  {:>12}", human(r.figures.peak_allocated_bytes))?;
        writeln!(
            out,
            "peak reserved   {:>12}  ({:.3}x requested)",
            human(r.figures.peak_reserved_bytes),
            r.figures.reserved_over_requested
        )?;
        writeln!(
            out,
            "  all {} passes {:>12}  ({:.3}x requested)",
            r.ns_per_op_passes.len() + 1,
            human(r.peak_reserved_bytes_all_passes),
            r.peak_reserved_bytes_all_passes as f64 / r.figures.peak_requested_bytes.max(1) as f64
        )?;
        writeln!(out, "{}", field("segments+maps   ", &format!("{} obtained, {} given back (num_device_alloc/free: segments, or spans of pages mapped and unmapped)",
            r.figures.device_allocs, r.figures.device_frees
        ), WIDTH))?;
        writeln!(
            out,
            "{}",
            field(
                "driver calls    ",
                &format!(
                    "{} in the first pass, {} in the last warm pass{} (memory alloc, free, create, map, unmap, release)",
                    driver_calls(&r.device_calls_cold),
                    driver_calls(&r.device_calls_warm),
                    most_in_a_warm_pass(&r.driver_calls_passes, driver_calls(&r.device_calls_warm))
                ),
                WIDTH
            )
        )?;
        if r.segment_placements_recorded > 0 {
            let source = if r.segment_placements_inferred {
                "the trace's pointers place (--no-follow-addresses turns this off)"
            } else {
                "the snapshot recorded"
            };
            let mut text = format!(
                "{} of the {} segments {source} placed where the run placed them",
                r.segment_placements_followed, r.segment_placements_recorded
            );
            if let Some(a) = &r.segment_placements_abandoned {
                text += &format!("; {}", a.describe());
            }
            writeln!(out, "{}", field("placements      ", &text, WIDTH))?;
        }
        if r.virtual_memory {
            let (c, w) = (&r.device_calls_cold, &r.device_calls_warm);
            writeln!(out, "{}", field("virtual memory  ", &format!("first pass: {} physical handles created, {} mapped, {} unmap calls; a warm pass: {} mapped, {} unmap calls",
                c.vm_creates, c.vm_maps, c.vm_unmaps, w.vm_maps, w.vm_unmaps
            ), WIDTH))?;
        }
        let ooms = if r.warm_pass_ooms > 0 {
            format!(
                "{} in the first pass; {} in the warm passes, each run on what the pass before left cached \
                 (`cachalot fit --runs N` finds a device that holds N runs)",
                r.figures.ooms, r.warm_pass_ooms
            )
        } else {
            r.figures.ooms.to_string()
        };
        writeln!(out, "{}", field("out of memory   ", &ooms, WIDTH))?;
        writeln!(out, "{}", field("cpu cost        ", &cpu_cost(&r).to_string(), WIDTH))?;
        if let Some(oom) = &r.first_oom {
            writeln!(out, "{}", field("first OOM       ", &oom.describe().to_string(), WIDTH))?;
            writeln!(out, "{}", avoiding_config(&trace, &r.figures.config, opts.capacity)?)?;
        }
    }
    if let Some(file) = plot {
        let s = series::record(&trace, &config, opts.capacity)?;
        let path = file.write(&plot::timeline(&trace.label(), &s, args.device.capacity))?;
        wrote(&path);
    }
    if let Some(file) = snapshot {
        wrote(file.write(&trace, &config, opts.capacity)?);
    }
    if let (Some(peak), Some(end)) = (&r.summary_at_peak, &r.summary_at_end) {
        let text = format!(
            "memory summary {peak}\nmemory summary at the end of the trace (before freeing what it left live):\n{end}"
        );
        if json {
            let _ = write!(std::io::stderr(), "{text}");
        } else {
            write!(out, "\n{text}")?;
        }
    }
    Ok(if r.figures.ooms > 0 { Finished::RanOutOfMemory } else { Finished::Done })
}

/// " (the most, N, in warm pass I of P)" when a warm pass before the last made more calls than
/// it (`last`; the first such pass on ties), else nothing: a pass that moves pages between two
/// calm ones would otherwise go unseen.
fn most_in_a_warm_pass(passes: &[u64], last: u64) -> String {
    match passes.iter().copied().enumerate().max_by_key(|&(i, n)| (n, core::cmp::Reverse(i))) {
        Some((i, n)) if n > last => format!(" (the most, {n}, in warm pass {} of {})", i + 1, passes.len()),
        _ => String::new(),
    }
}
