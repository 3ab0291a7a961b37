//! `cachalot advise`: replays a trace under a search of configs (PyTorch's knobs and
//! cachalot's policy) and prints them ranked, with the config strings to paste into
//! `PYTORCH_CUDA_ALLOC_CONF` and `CACHALOT_ALLOC_CONF`, and, where one exists, a config that
//! gives up a little memory for fewer driver calls once the loop is warm.
//!
//! Invariant: a config is never recommended as a fit while it runs out of memory: when every
//! config tried does, advise says so instead of recommending one, and a PyTorch line that
//! still runs out says how often.

use super::command_line::AdviseArgs;
use super::output::Out;
use super::run::human;
use super::search::{as_pytorch_conf, candidates, quieter_than_best, search, why_none_fits, Candidate, WARM_PASSES};
use super::{input, run, Failure};

/// How much more peak reserved memory than the best a config may take to be named for
/// making fewer driver calls once warm.
const QUIETER_MARGIN: f64 = 0.01;

pub fn run(args: &AdviseArgs, out: Out) -> Result<(), Failure> {
    let json = args.trace.json;
    let capacity = args.device.capacity.unwrap_or(run::DEFAULT_CAPACITY);
    let trace = input::load(args.trace.trace.as_deref(), args.trace.device)?;
    input::check_skipped(&trace, args.trace.strict)?;
    let start = std::time::Instant::now();
    let ranked = search(&trace, &candidates(), capacity)?;
    let secs = start.elapsed().as_secs_f64();
    if json {
        serde_json::to_writer(&mut *out, &ranked).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "trace {} ({}); simulated device of {}", trace.label(), trace.trace.describe(), human(capacity))?;
    writeln!(out, "{} configs replayed in {secs:.2} s, best first:\n", ranked.len())?;
    let width = ranked.iter().map(|c| c.config.len()).max().unwrap_or(20);
    writeln!(
        out,
        "{:>4}  {:<width$}  {:>13}  {:>8}  {:>12}  {:>10}  {:>4}",
        "rank", "config", "peak reserved", "resv/req", "driver calls", "warm calls", "OOMs"
    )?;
    for (i, c) in ranked.iter().enumerate() {
        writeln!(
            out,
            "{:>4}  {:<width$}  {:>13}  {:>8.3}  {:>12}  {:>10.0}  {:>4}",
            i + 1,
            c.config,
            human(c.peak_reserved_bytes),
            c.reserved_over_requested,
            c.device_calls,
            c.warm_device_calls,
            c.ooms
        )?;
    }
    writeln!(
        out,
        "\nPeak reserved and driver calls (memory alloc, free, create, map, unmap and release calls): the\n\
         first pass on an empty allocator; warm calls: the driver calls of the last of {WARM_PASSES} passes after\n\
         it, on the same allocator.\n"
    )?;
    match ranked.first() {
        Some(best) if best.ooms > 0 => no_fit(out, best, trace.trace.peak_requested(), capacity)?,
        Some(best) => recommend(out, &ranked, best)?,
        None => {}
    }
    Ok(())
}

/// Says that every config tried ran out of memory, and why, instead of recommending one.
fn no_fit(out: Out, best: &Candidate, peak_requested: u64, capacity: u64) -> Result<(), Failure> {
    let why = why_none_fits(peak_requested, capacity);
    writeln!(
        out,
        "no config tried avoids out of memory: {why}; the fewest out-of-memory events, {}, under {}",
        best.ooms, best.config
    )?;
    Ok(())
}

/// The lines to paste: the best PyTorch config, the best overall, and a quieter one.
fn recommend(out: Out, ranked: &[Candidate], best: &Candidate) -> Result<(), Failure> {
    if let Some(p) = ranked.iter().find(|c| c.policy == "pytorch") {
        let conf = as_pytorch_conf(&p.config).unwrap_or_default();
        let conf = if conf.is_empty() { "(leave unset: PyTorch's default is best)".to_string() } else { conf };
        let still = if p.ooms > 0 {
            format!("; still {} out-of-memory events: no PyTorch config tried fits", p.ooms)
        } else {
            String::new()
        };
        writeln!(
            out,
            "PyTorch:   PYTORCH_CUDA_ALLOC_CONF={conf}   # peak reserved {}{still}",
            human(p.peak_reserved_bytes)
        )?;
    }
    writeln!(
        out,
        "cachalot:  CACHALOT_ALLOC_CONF={}   # peak reserved {}",
        best.config,
        human(best.peak_reserved_bytes)
    )?;
    if let Some(q) = quieter_than_best(ranked, QUIETER_MARGIN) {
        writeln!(
            out,
            "fewer driver calls once warm: CACHALOT_ALLOC_CONF={}   # {:.0} calls a warm pass instead of {:.0}, peak reserved {}",
            q.config,
            q.warm_device_calls,
            best.warm_device_calls,
            human(q.peak_reserved_bytes)
        )?;
    }
    Ok(())
}
