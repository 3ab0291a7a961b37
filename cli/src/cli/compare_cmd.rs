//! `cachalot compare`: one trace under several configs side by side, with PyTorch's own
//! figures for the same trace (measured on an H200) where the trace is a reference trace.
//!
//! Invariant: the table's first column is as wide as the widest label it prints (config
//! strings as normalised, and PyTorch's rows), so every row lines up.

use cachalot_core::{Config, Policy};

use super::command_line::CompareArgs;
use super::output::Out;
use super::plot_file::PlotFile;
use super::reference::{ns_per_op, peak_reserved, PyTorchFigures};
use super::run::{driver_calls, human, run as replay, RunReport};
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
fn configs_to_compare(given: &[String]) -> Vec<ConfigText> {
    if !given.is_empty() {
        return given.iter().map(|t| ConfigText::given(t)).collect();
    }
    let mut texts: Vec<ConfigText> = DEFAULT_CONFIGS.iter().map(|t| ConfigText::given(t)).collect();
    if let Some(env) = config_from_env() {
        texts.push(ConfigText { text: env, from_env: true });
    }
    texts
}

pub fn run(args: &CompareArgs, out: Out) -> Result<(), Failure> {
    let json = args.trace.json;
    let opts = run_options(&args.device, &args.passes, false);
    let mut parsed = parse_user_configs(&configs_to_compare(&args.config))?;
    // The environment's config may be one of the defaults: one row each.
    let mut seen = Vec::new();
    parsed.retain(|c| {
        let s = c.to_config_string();
        let new = !seen.contains(&s);
        seen.push(s);
        new
    });
    let plot = args.plot.as_deref().map(PlotFile::claim).transpose()?;
    let trace = input::load(args.trace.trace.as_deref(), args.trace.device)?;
    input::check_skipped(&trace, args.trace.strict)?;
    let reports: Vec<RunReport> = parsed.iter().map(|c| replay(&trace, c, &opts)).collect::<Result<_, _>>()?;
    if let Some(file) = plot {
        let all: Vec<_> = parsed.iter().map(|c| series::record(&trace, c, opts.capacity)).collect::<Result<_, _>>()?;
        super::output::wrote(&file.write(&plot::overlay(&trace.label(), &all))?);
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
    writeln!(out, "trace {} ({})", trace.label(), trace.trace.describe())?;
    writeln!(
        out,
        "left of |: cachalot replaying on a simulated device of {}, ns/op its CPU cost on this machine\n\
         (median of warm passes); right of |: PyTorch 2.11 measured on an NVIDIA H200 (real driver, that\n\
         host's CPU). Different machines: read the two ns/op as figures of each, not as a race.\n",
        human(opts.capacity)
    )?;
    let shown: Vec<String> = parsed.iter().filter_map(pytorch_conf_name).collect();
    let pytorch_only: Vec<&serde_json::Value> =
        pytorch.rows().iter().filter(|v| !shown.iter().any(|s| v["conf"] == s.as_str())).collect();
    let labels: Vec<String> = parsed.iter().map(Config::to_config_string).collect();
    let pytorch_labels: Vec<String> =
        pytorch_only.iter().map(|v| format!("(PyTorch {})", v["conf"].as_str().unwrap_or("?"))).collect();
    let width = labels.iter().chain(&pytorch_labels).map(|l| l.chars().count()).max().unwrap_or(0).max(24);
    writeln!(
        out,
        "{:<width$}  {:>13}  {:>8}  {:>9}  {:>12}  {:>4}  {:>9}  |  {:>13}  {:>8}  {:>7}",
        "cachalot config",
        "peak reserved",
        "resv/req",
        "segs+maps",
        "driver calls",
        "OOMs",
        "sim ns/op",
        "PyTorch (H200)",
        "resv/req",
        "ns/op"
    )?;
    for ((r, c), label) in reports.iter().zip(&parsed).zip(&labels) {
        let theirs = match measured(c) {
            Some(v) => format!(
                "{:>13}  {:>8.3}  {:>7.1}",
                human(peak_reserved(v)),
                pytorch.reserved_over_requested(v),
                ns_per_op(v)
            ),
            None => format!("{:>13}  {:>8}  {:>7}", "-", "-", "-"),
        };
        writeln!(
            out,
            "{label:<width$}  {:>13}  {:>8.3}  {:>9}  {:>12}  {:>4}  {:>9.1}  |  {theirs}",
            human(r.figures.peak_reserved_bytes),
            r.figures.reserved_over_requested,
            r.figures.device_allocs,
            driver_calls(&r.device_calls_cold),
            r.figures.ooms,
            r.ns_per_op,
        )?;
    }
    for (v, label) in pytorch_only.iter().zip(&pytorch_labels) {
        writeln!(
            out,
            "{label:<width$}  {:>13}  {:>8}  {:>9}  {:>12}  {:>4}  {:>9}  |  {:>13}  {:>8.3}  {:>7.1}",
            "",
            "",
            "",
            "",
            "",
            "",
            human(peak_reserved(v)),
            pytorch.reserved_over_requested(v),
            ns_per_op(v)
        )?;
    }
    writeln!(
        out,
        "\nsegs+maps: segments allocated, or spans of pages mapped, new or moved (num_device_alloc); driver\n\
         calls: memory alloc, free, create, map, unmap and release calls; both of the first pass. PyTorch's\n\
         resv/req is over the peak its own run requested."
    )?;
    Ok(())
}
