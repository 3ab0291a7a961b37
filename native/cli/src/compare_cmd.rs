//! `cachalot compare`: one trace under several configs side by side, with PyTorch's own
//! figures for the same trace (measured on an H200) where the trace is a reference trace.
//!
//! Two tables, cachalot's simulated figures and then PyTorch's measured ones, each row named
//! by its config, so that figures of different machines never share a row.
//!
//! Invariant: each table's rows line up (see [`Table`]) and, unless `--wide`, fit 100
//! columns.

use cachalot_core::{Config, Policy};

use super::byte_size::human;
use super::command_line::CompareArgs;
use super::output::Out;
use super::paragraph::fill;
use super::plot_file::PlotFile;
use super::reference::{ns_per_op, peak_reserved, PyTorchFigures};
use super::run::{driver_calls, run as replay, RunReport};
use super::table::{Align, Table, DEFAULT_WIDTH};
use super::{config_from_env, input, parse_user_configs, plot, run_options, series, ConfigText, Failure};

/// The configs compared when none are given.
pub const DEFAULT_CONFIGS: [&str; 4] =
    ["policy:pytorch", "policy:pytorch,max_split_size_mb:128", "policy:pytorch,expandable_segments:True", ""];

/// PyTorch's name for the configuration a `policy:pytorch` config reproduces.
pub fn pytorch_conf_name(config: &Config) -> Option<String> {
    if config.policy != Policy::PyTorch {
        return None;
    }
    let s = config.to_config_string();
    let rest = s.strip_prefix("policy:pytorch").unwrap_or(&s).trim_start_matches(',');
    Some(if rest.is_empty() { "default".into() } else { rest.into() })
}

/// The configs to compare: those given, else the defaults and `$CACHALOT_ALLOC_CONF`'s.
fn configs_to_compare(given: &[String]) -> Result<Vec<ConfigText>, Failure> {
    if !given.is_empty() {
        return Ok(given.iter().map(|t| ConfigText::given(t)).collect());
    }
    let mut texts: Vec<ConfigText> = DEFAULT_CONFIGS.iter().map(|t| ConfigText::given(t)).collect();
    if let Some(env) = config_from_env()? {
        texts.push(ConfigText { text: env, from_env: true });
    }
    Ok(texts)
}

pub fn run(args: &CompareArgs, out: Out) -> Result<(), Failure> {
    let json = args.trace.json;
    let opts = run_options(&args.device, &args.passes, false);
    let mut parsed = parse_user_configs(&configs_to_compare(&args.config)?)?;
    // The environment's config may be one of the defaults: one row each.
    let mut seen = Vec::new();
    parsed.retain(|c| {
        let s = c.to_config_string();
        let new = !seen.contains(&s);
        seen.push(s);
        new
    });
    let plot = args.plot.as_deref().map(PlotFile::claim).transpose()?;
    let mut trace = input::load(args.trace.trace.as_deref(), args.trace.device, &args.trace.limits.limits())?;
    input::check_skipped(&trace, args.trace.strict)?;
    if args.trace.no_follow_addresses {
        trace.trace.segment_placements.clear();
    }
    let reports: Vec<RunReport> = parsed.iter().map(|c| replay(&trace, c, &opts)).collect::<Result<_, _>>()?;
    if let Some(file) = plot {
        let all: Vec<_> = parsed.iter().map(|c| series::record(&trace, c, opts.capacity)).collect::<Result<_, _>>()?;
        super::output::wrote(&file.write(&plot::overlay(&trace.label(), &all, args.device.capacity))?);
    }
    let pytorch = PyTorchFigures::for_trace(&trace);
    let measured = |c: &Config| pytorch_conf_name(c).and_then(|n| pytorch.row(&n));
    if json {
        let rows: Vec<serde_json::Value> = reports
            .iter()
            .zip(&parsed)
            .map(|(r, c)| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                if let Some(row) = measured(c) {
                    v["pytorch"] = row.clone();
                }
                v
            })
            .collect();
        serde_json::to_writer(&mut *out, &rows).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    let width = (!args.wide).then_some(DEFAULT_WIDTH);
    let fit = |text: &str| fill(text, width.unwrap_or(usize::MAX), "  ");
    writeln!(out, "{}", fit(&format!("trace {}: {}", trace.label(), trace.trace.describe())))?;
    writeln!(
        out,
        "\n{}",
        fit(&format!(
            "cachalot, replaying on a simulated device of {}; sim ns/op: its CPU cost on this \
             machine (median of warm passes):",
            human(opts.capacity)
        ))
    )?;
    let labels: Vec<String> = parsed.iter().map(Config::to_config_string).collect();
    let mut ours = Table::new(&[
        ("config", Align::Label),
        ("peak resv", Align::Figure),
        ("resv/req", Align::Figure),
        ("segs+maps", Align::Figure),
        ("drv calls", Align::Figure),
        ("OOMs", Align::Figure),
        ("sim ns/op", Align::Figure),
    ]);
    for (r, label) in reports.iter().zip(&labels) {
        ours.row(vec![
            label.clone(),
            human(r.figures.peak_reserved_bytes),
            format!("{:.3}", r.figures.reserved_over_requested),
            r.figures.device_allocs.to_string(),
            driver_calls(&r.device_calls_cold).to_string(),
            r.figures.ooms.to_string(),
            format!("{:.1}", r.ns_per_op),
        ]);
    }
    for line in ours.render(width) {
        writeln!(out, "{line}")?;
    }
    // PyTorch's own figures: those of the configs above that it was measured under, then
    // those of its configs cachalot cannot run (cudaMallocAsync).
    let shown: Vec<String> = parsed.iter().filter_map(pytorch_conf_name).collect();
    let mut theirs = Table::new(&[
        ("config", Align::Label),
        ("peak resv", Align::Figure),
        ("resv/req", Align::Figure),
        ("ns/op", Align::Figure),
    ]);
    let mut row = |label: String, v: &serde_json::Value| {
        theirs.row(vec![
            label,
            human(peak_reserved(v)),
            format!("{:.3}", pytorch.reserved_over_requested(v)),
            format!("{:.1}", ns_per_op(v)),
        ])
    };
    let mut any = false;
    for (c, label) in parsed.iter().zip(&labels) {
        if let Some(v) = measured(c) {
            row(label.clone(), v);
            any = true;
        }
    }
    for v in pytorch.rows().iter().filter(|v| !shown.iter().any(|s| v["conf"] == s.as_str())) {
        row(format!("(PyTorch {})", v["conf"].as_str().unwrap_or("?")), v);
        any = true;
    }
    if any {
        writeln!(
            out,
            "\n{}",
            fit("PyTorch (H200): PyTorch 2.11's own allocator under each config, measured on an NVIDIA \
                 H200 (real driver, that host's CPU) by native/gpu/replay_torch.py in a process of its own, \
                 one run (2026-11-29); separate processes there spread widely (386.6-722.2 ns/op on \
                 gpt2_train), and docs/benchmarks.md gives the side-by-side reference. A different \
                 machine: read the two ns/op as figures of each, not as a race:")
        )?;
        for line in theirs.render(width) {
            writeln!(out, "{line}")?;
        }
    }
    writeln!(
        out,
        "\n{}",
        fit("segs+maps: segments allocated, or spans of pages mapped, new or moved (num_device_alloc); \
             drv calls: driver calls, the memory alloc, free, create, map, unmap and release calls; both \
             of the first pass. PyTorch's resv/req is over the peak its own run requested.")
    )?;
    Ok(())
}
