//! `cachalot fit`: the smallest device a trace runs on under PyTorch's default, expandable
//! segments, cachalot's default policy and each config given, with the driver calls at that
//! size, the calm device where they come near those with room, each config's driver
//! calls on the device PyTorch's default needs (what a user whose card fits the run under
//! PyTorch pays there), and whether the run fits the named cards (see `fit.rs`).
//!
//! Invariants: with `--json`, stdout holds exactly one JSON object; the text report's table
//! fits 100 columns and names the usable bytes assumed for every card it names.

use std::time::Instant;

use super::byte_size::human;
use super::command_line::FitArgs;
use super::fit::{
    calls_all_at, fit_all, Card, Fit, CALM_CALLS, CALM_CALLS_PER_OPERATION, CARDS, CUDA_CONTEXT, GRANULE,
};
use super::output::Out;
use super::paragraph::fill;
use super::table::{Align, Table, DEFAULT_WIDTH};
use super::{input, parse_user_configs, ConfigText, Failure};

/// The configs searched always: PyTorch's two backends a user picks between, and cachalot's.
pub const ALWAYS: [&str; 3] = ["policy:pytorch", "policy:pytorch,expandable_segments:True", ""];

/// The configs to search: [`ALWAYS`], then those given, each once.
fn configs(given: &[String]) -> Result<Vec<cachalot_core::Config>, Failure> {
    let texts: Vec<ConfigText> =
        ALWAYS.iter().copied().chain(given.iter().map(String::as_str)).map(ConfigText::given).collect();
    let mut parsed = parse_user_configs(&texts)?;
    let mut seen = Vec::new();
    parsed.retain(|c| {
        let s = c.to_config_string();
        let new = !seen.contains(&s);
        seen.push(s);
        new
    });
    Ok(parsed)
}

/// The `--json` value.
#[derive(serde::Serialize)]
struct Report<'a> {
    trace: String,
    operations: usize,
    granule_bytes: u64,
    cuda_context_bytes: u64,
    cards: &'a [Card],
    fits: &'a [Fit],
    where_pytorch_fits: WherePyTorchFits,
    seconds: f64,
}

/// Every config's driver calls on the device PyTorch's default needs.
#[derive(serde::Serialize)]
struct WherePyTorchFits {
    capacity_bytes: u64,
    /// One per config, in `fits`' order: the calls, or null where the config runs out of memory.
    driver_calls: Vec<Option<u64>>,
}

pub fn run(args: &FitArgs, out: Out) -> Result<(), Failure> {
    let parsed = configs(&args.config)?;
    let mut trace = input::load(args.trace.trace.as_deref(), args.trace.device, &args.trace.limits.limits())?;
    input::check_skipped(&trace, args.trace.strict)?;
    if args.trace.no_follow_addresses {
        trace.trace.segment_placements.clear();
    }
    let start = Instant::now();
    let fits = fit_all(&trace, &parsed, args.runs)?;
    // ALWAYS puts PyTorch's default first, whose calls there are its own fit's.
    let pytorch_needs = fits[0].capacity_bytes;
    let mut driver_calls = vec![Some(fits[0].driver_calls)];
    driver_calls.extend(calls_all_at(&trace, &parsed[1..], pytorch_needs, args.runs)?);
    let where_pytorch_fits = WherePyTorchFits { capacity_bytes: pytorch_needs, driver_calls };
    let seconds = start.elapsed().as_secs_f64();
    if args.trace.json {
        let r = Report {
            trace: trace.label(),
            operations: trace.ops.len(),
            granule_bytes: GRANULE,
            cuda_context_bytes: CUDA_CONTEXT,
            cards: &CARDS,
            fits: &fits,
            where_pytorch_fits,
            seconds: (seconds * 1000.0).round() / 1000.0,
        };
        serde_json::to_writer(&mut *out, &r).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    let requested = fits.first().map_or(0, |f| f.peak_requested_bytes);
    writeln!(out, "trace     {} ({} operations), peak requested {}", trace.label(), trace.ops.len(), human(requested))?;
    if args.runs > 1 {
        writeln!(out, "runs      {} in a row on one allocator, each on what the one before left cached", args.runs)?;
    }
    writeln!(out)?;
    let mut columns = vec![
        ("config", Align::Label),
        ("smallest", Align::Figure),
        ("x requested", Align::Figure),
        ("calls", Align::Figure),
        ("retries", Align::Figure),
        ("unbounded", Align::Figure),
    ];
    columns.extend(CARDS.iter().map(|c| (c.name, Align::Figure)));
    let mut table = Table::new(&columns);
    for f in &fits {
        let mut row = vec![
            f.config.clone(),
            human(f.capacity_bytes),
            format!("{:.3}", f.capacity_over_requested),
            format!("{}", f.driver_calls),
            format!("{}", f.alloc_retries),
            format!("{:.3}", f.unbounded_peak_reserved_bytes as f64 / f.peak_requested_bytes.max(1) as f64),
        ];
        row.extend(f.cards.iter().map(|c| if c.fits { "fits" } else { "no" }.to_string()));
        table.row(row);
    }
    for line in table.render(Some(DEFAULT_WIDTH)) {
        writeln!(out, "{line}")?;
    }
    let beside: Vec<String> = fits
        .iter()
        .zip(&where_pytorch_fits.driver_calls)
        .map(|(f, calls)| match calls {
            Some(n) => format!("{} {n}", f.config),
            None => format!("{} out of memory", f.config),
        })
        .collect();
    let line = format!("Calls on the {} device PyTorch's default needs: {}.", human(pytorch_needs), beside.join("; "));
    writeln!(out, "\n{}", fill(&line, DEFAULT_WIDTH, ""))?;
    let calm: Vec<String> = fits
        .iter()
        .map(|f| {
            let ratio = f.calm_capacity_bytes as f64 / f.peak_requested_bytes.max(1) as f64;
            let above = match (f.calm_capacity_bytes - f.capacity_bytes) / GRANULE {
                0 => "the smallest".to_string(),
                1 => "1 page above the smallest".to_string(),
                n => format!("{n} pages above the smallest"),
            };
            let (n, roomy, on) = (f.calm_driver_calls, f.roomy_driver_calls, human(f.roomy_capacity_bytes));
            format!("{} {} ({ratio:.3}x, {above}), {n} calls ({roomy} on {on})", f.config, human(f.calm_capacity_bytes))
        })
        .collect();
    let line = format!(
        "Calm device, where fitting no longer costs a storm of driver calls (its calls; those on the device with room): {}.",
        calm.join("; ")
    );
    writeln!(out, "\n{}", fill(&line, DEFAULT_WIDTH, ""))?;
    if args.runs > 1 {
        // A later run may move pages the first did not: the total alone would hide which.
        let each: Vec<String> = fits
            .iter()
            .map(|f| {
                let runs: Vec<String> = f.driver_calls_runs.iter().map(u64::to_string).collect();
                format!("{} ({}): {}", f.config, human(f.capacity_bytes), runs.join(", "))
            })
            .collect();
        let line = format!("Calls of each run on its smallest device: {}.", each.join("; "));
        writeln!(out, "\n{}", fill(&line, DEFAULT_WIDTH, ""))?;
    }
    let cards: Vec<String> = CARDS
        .iter()
        .map(|c| format!("{} ({}): {} of {}", c.name, c.examples, human(c.usable_bytes), human(c.total_bytes)))
        .collect();
    // Each fit's replays, and one for each other config on the device PyTorch's default needs.
    let probes: u32 = fits.iter().map(|f| f.probes + 1).sum::<u32>() - 1;
    let replay = if args.runs > 1 {
        format!("{} replays of the trace in a row on one allocator finish", args.runs)
    } else {
        "a replay of the trace finishes".to_string()
    };
    let text = format!(
        "Smallest: the least device capacity, to {}, on which {replay} with no \
         out-of-memory (the allocator may free its cache and retry: 'retries'); 'x requested' is it over \
         the peak requested bytes, 'unbounded' the peak reserved bytes on an unbounded device over them. \
         Calls: the driver calls cuMemAlloc, cuMemFree, cuMemCreate, cuMemMap, cuMemUnmap and cuMemRelease of the \
         replay (all its runs) at the smallest device. Calm: the least capacity the search finds at which the \
         calls are within {}% of those with room plus one per {} operations replayed; near its smallest device a \
         policy may move the same pages again and again, and a larger device may still make more calls. With \
         room: the unbounded peak reserved bytes, to {} up (doubled until the run finishes there), the least \
         device the run never fills. A card's usable memory is the total PyTorch reports for it less \
         {} for the CUDA context: {}. Searched in {seconds:.1} s ({probes} replays).",
        human(GRANULE),
        CALM_CALLS * 100.0,
        (1.0 / CALM_CALLS_PER_OPERATION).round(),
        human(GRANULE),
        human(CUDA_CONTEXT),
        cards.join("; ")
    );
    writeln!(out, "\n{}", fill(&text, DEFAULT_WIDTH, ""))?;
    Ok(())
}
