//! `cachalot advise`: replays a trace under a search of configs (PyTorch's knobs and
//! cachalot's policy) and prints them ranked, with the config strings to paste into
//! `PYTORCH_CUDA_ALLOC_CONF` and `CACHALOT_ALLOC_CONF`.

use super::args::Args;
use super::run::human;
use super::search::{as_pytorch_conf, candidates, search};
use super::{input, run_options, Failure};

pub fn run(args: &mut Args) -> Result<(), Failure> {
    let json = args.flag("json");
    let opts = run_options(args, false)?;
    args.finish(1).map_err(Failure::Usage)?;
    let trace = input::load(args.positional(0))?;
    input::check_skipped(&trace, false)?;
    let start = std::time::Instant::now();
    let ranked = search(&trace, &candidates(), opts.capacity)?;
    let secs = start.elapsed().as_secs_f64();
    if json {
        println!("{}", serde_json::to_string(&ranked).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!("trace {} ({}); simulated device of {}", trace.name, trace.trace.describe(), human(opts.capacity));
    println!("{} configs replayed in {secs:.2} s, best first:\n", ranked.len());
    let width = ranked.iter().map(|c| c.config.len()).max().unwrap_or(20);
    println!(
        "{:>4}  {:<width$}  {:>13}  {:>8}  {:>12}  {:>4}",
        "rank", "config", "peak reserved", "resv/req", "device calls", "OOMs"
    );
    for (i, c) in ranked.iter().enumerate() {
        println!(
            "{:>4}  {:<width$}  {:>13}  {:>8.3}  {:>12}  {:>4}",
            i + 1,
            c.config,
            human(c.peak_reserved_bytes),
            c.reserved_over_requested,
            c.device_calls,
            c.ooms
        );
    }
    println!();
    if let Some(best) = ranked.iter().find(|c| c.policy == "pytorch") {
        let conf = as_pytorch_conf(&best.config).unwrap_or_default();
        let conf = if conf.is_empty() { "(leave unset: PyTorch's default is best)".to_string() } else { conf };
        println!("PyTorch:   PYTORCH_CUDA_ALLOC_CONF={conf}   # peak reserved {}", human(best.peak_reserved_bytes));
    }
    if let Some(best) = ranked.first() {
        println!(
            "cachalot:  CACHALOT_ALLOC_CONF={}   # peak reserved {}",
            best.config,
            human(best.peak_reserved_bytes)
        );
    }
    Ok(())
}
