//! `cachalot advise`: replays a trace under a search of configs (PyTorch's knobs and
//! cachalot's policy) and prints them ranked, with the config strings to paste into
//! `PYTORCH_CUDA_ALLOC_CONF` and `CACHALOT_ALLOC_CONF`, and, where one exists, a config that
//! gives up a little memory for fewer device calls once the loop is warm.

use super::args::Args;
use super::run::human;
use super::search::{as_pytorch_conf, candidates, quieter_than_best, search, WARM_PASSES};
use super::{input, run_options, Failure};

/// How much more peak reserved memory than the best a config may take to be named for
/// making fewer device calls once warm.
const QUIETER_MARGIN: f64 = 0.01;

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
        "{:>4}  {:<width$}  {:>13}  {:>8}  {:>12}  {:>10}  {:>4}",
        "rank", "config", "peak reserved", "resv/req", "device calls", "warm calls", "OOMs"
    );
    for (i, c) in ranked.iter().enumerate() {
        println!(
            "{:>4}  {:<width$}  {:>13}  {:>8.3}  {:>12}  {:>10.0}  {:>4}",
            i + 1,
            c.config,
            human(c.peak_reserved_bytes),
            c.reserved_over_requested,
            c.device_calls,
            c.warm_device_calls,
            c.ooms
        );
    }
    println!(
        "\nPeak reserved and device calls: the first pass on an empty allocator; warm calls: device calls\n\
         per pass over the {WARM_PASSES} passes after it, on the same allocator.\n"
    );
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
    if let Some(q) = quieter_than_best(&ranked, QUIETER_MARGIN) {
        println!(
            "fewer device calls once warm: CACHALOT_ALLOC_CONF={}   # {:.0} calls a warm pass instead of {:.0}, peak reserved {}",
            q.config,
            q.warm_device_calls,
            ranked[0].warm_device_calls,
            human(q.peak_reserved_bytes)
        );
    }
    Ok(())
}
