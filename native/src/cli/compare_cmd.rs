//! `cachalot compare`: one trace under several configs side by side, with PyTorch's own
//! figures for the same trace (measured on an H200) where the trace is a reference trace.

use cachalot_core::{Config, Policy};

use super::args::Args;
use super::run::{human, run as replay, RunReport};
use super::{input, parse_config, plot, run_options, series, Failure};

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

pub fn run(args: &mut Args) -> Result<(), Failure> {
    let json = args.flag("json");
    let strict = args.flag("strict");
    let plot = args.value("plot").map_err(Failure::Usage)?;
    let mut configs = args.values("config").map_err(Failure::Usage)?;
    let opts = run_options(args, false)?;
    args.finish(1).map_err(Failure::Usage)?;
    if configs.is_empty() {
        configs = DEFAULT_CONFIGS.iter().map(|s| s.to_string()).collect();
    }
    let parsed: Vec<Config> = configs.iter().map(|c| parse_config(c)).collect::<Result<_, _>>()?;
    let trace = input::load(args.positional(0))?;
    input::check_skipped(&trace, strict)?;
    let reports: Vec<RunReport> = parsed.iter().map(|c| replay(&trace, c, &opts)).collect::<Result<_, _>>()?;
    if let Some(path) = plot {
        let all: Vec<_> = parsed.iter().map(|c| series::record(&trace, c, opts.capacity)).collect::<Result<_, _>>()?;
        std::fs::write(&path, plot::overlay(&trace.name, &all)).map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    if json {
        let rows: Vec<serde_json::Value> = reports
            .iter()
            .zip(&parsed)
            .map(|(r, c)| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                if let Some(reference) = pytorch_conf_name(c).and_then(|n| input::pytorch_reference(&r.trace, &n)) {
                    v["pytorch"] = reference;
                }
                v
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    println!("trace {} ({})", trace.name, trace.trace.describe());
    println!("simulated device of {}; ns/op: median of warm passes on this machine\n", human(opts.capacity));
    let refs = input::pytorch_references(&trace.name);
    let width = configs.iter().map(|c| c.len()).max().unwrap_or(0).max(24);
    println!(
        "{:<width$}  {:>13}  {:>8}  {:>6}  {:>4}  {:>7}  |  {:>13}  {:>8}  {:>7}",
        "cachalot config",
        "peak reserved",
        "resv/req",
        "allocs",
        "OOMs",
        "ns/op",
        "PyTorch (H200)",
        "resv/req",
        "ns/op"
    );
    for (r, c) in reports.iter().zip(&parsed) {
        let reference = pytorch_conf_name(c).and_then(|n| input::pytorch_reference(&r.trace, &n));
        let theirs = match reference {
            Some(v) => {
                let resv = v["peak_reserved"].as_u64().unwrap_or(0);
                format!(
                    "{:>13}  {:>8.3}  {:>7.1}",
                    human(resv),
                    resv as f64 / r.peak_requested_bytes.max(1) as f64,
                    v["ns_per_op_warm_median"].as_f64().unwrap_or(0.0)
                )
            }
            None => format!("{:>13}  {:>8}  {:>7}", "-", "-", "-"),
        };
        println!(
            "{:<width$}  {:>13}  {:>8.3}  {:>6}  {:>4}  {:>7.1}  |  {theirs}",
            c.to_config_string(),
            human(r.peak_reserved_bytes),
            r.reserved_over_requested,
            r.device_allocs,
            r.ooms,
            r.ns_per_op,
        );
    }
    let shown: Vec<String> = parsed.iter().filter_map(pytorch_conf_name).collect();
    let requested = reports.first().map(|r| r.peak_requested_bytes).unwrap_or(1).max(1);
    for v in refs.iter().filter(|v| !shown.iter().any(|s| v["conf"] == s.as_str())) {
        let resv = v["peak_reserved"].as_u64().unwrap_or(0);
        println!(
            "{:<width$}  {:>13}  {:>8}  {:>6}  {:>4}  {:>7}  |  {:>13}  {:>8.3}  {:>7.1}",
            format!("(PyTorch {})", v["conf"].as_str().unwrap_or("?")),
            "",
            "",
            "",
            "",
            "",
            human(resv),
            resv as f64 / requested as f64,
            v["ns_per_op_warm_median"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(())
}
