//! The `cachalot` command-line tool: `replay` and `compare` allocation traces through the
//! allocator over a simulated device.
//!
//! Invariant: every failure is one line on stderr starting with `cachalot: error:` and a
//! non-zero exit status (2 for usage errors); nothing panics on bad input.

mod advise_cmd;
mod args;
mod compare_cmd;
mod input;
mod metadata;
mod plot;
mod replay_cmd;
mod run;
mod search;
mod series;

use args::Args;

/// What went wrong, and which exit status it maps to.
pub enum Failure {
    /// The command line was wrong (exit 2).
    Usage(String),
    /// The command could not do its job (exit 1).
    Error(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Error(s)
    }
}

pub const USAGE: &str = "\
usage: cachalot <command> [options]

commands:
  replay [TRACE] [--config CONF] [--capacity SIZE] [--passes N] [--json] [--summary]
         [--plot FILE.svg] [--strict]
      Replay an allocation trace (RMM CSV, .csv.gz or PyTorch snapshot .json; default:
      the built-in gpt2_train trace) and report peak memory, device calls and ns/op.
      Out of memory is explained, with a config that avoids it on this trace.
      --summary prints memory_summary at the peak and at the end; --plot draws requested,
      allocated and reserved bytes over time; --strict rejects frees of pointers the
      trace never allocated (otherwise they are counted and skipped).
  compare [TRACE] [--config CONF]... [--capacity SIZE] [--passes N] [--json] [--plot FILE.svg]
      Replay one trace under several configs side by side (default: PyTorch's default,
      max_split_size_mb:128, expandable_segments:True and cachalot's default), with
      PyTorch's measured figures; --plot overlays their reserved bytes.
  advise TRACE [--capacity SIZE] [--json]
      Replay a trace under a search of configs and rank them (out-of-memory events, peak
      reserved, device calls), with the strings to paste for PyTorch and for cachalot.

TRACE is a path or a built-in trace name: gpt2_train, resnet50_train, mixed_fc_conv.
CONF uses PYTORCH_CUDA_ALLOC_CONF syntax, e.g. policy:pytorch,max_split_size_mb:128.
SIZE takes units: 80GiB, 141GB, 512MiB.";

/// Runs the tool on `argv` (without the program name).
pub fn main(argv: Vec<String>) -> Result<(), Failure> {
    let mut it = argv.into_iter();
    let command = it.next().ok_or_else(|| Failure::Usage("missing command".into()))?;
    let mut args = Args::new(it);
    match command.as_str() {
        "replay" => replay_cmd::run(&mut args),
        "compare" => compare_cmd::run(&mut args),
        "advise" => advise_cmd::run(&mut args),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        "--version" | "version" => {
            println!("cachalot {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        other => Err(Failure::Usage(format!("unknown command '{other}'"))),
    }
}

/// Reads the options every replaying command shares.
fn run_options(args: &mut Args, summary: bool) -> Result<run::RunOptions, Failure> {
    let capacity = match args.value("capacity").map_err(Failure::Usage)? {
        Some(c) => args::parse_size(&c).map_err(Failure::Usage)?,
        None => run::DEFAULT_CAPACITY,
    };
    if capacity < cachalot_core::size::SMALL_BUFFER {
        return Err(Failure::Usage(format!(
            "--capacity {capacity} bytes is too small: a device needs room for at least one 2 MiB segment"
        )));
    }
    let most = cachalot::shared_allocator::MAX_SIMULATED_CAPACITY;
    if capacity > most {
        return Err(Failure::Usage(format!(
            "--capacity {capacity} bytes is too large: the simulated device holds at most {most} bytes (1 TiB, its address space)"
        )));
    }
    let warm_passes = match args.value("passes").map_err(Failure::Usage)? {
        Some(p) => p
            .parse::<usize>()
            .ok()
            .filter(|&n| (3..=1000).contains(&n))
            .ok_or_else(|| Failure::Usage(format!("--passes {p}: expected a number from 3 to 1000")))?,
        None => 5,
    };
    Ok(run::RunOptions { capacity, warm_passes, summary })
}

fn parse_config(text: &str) -> Result<cachalot_core::Config, Failure> {
    cachalot_core::Config::parse(text).map_err(|e| Failure::Error(e.to_string()))
}
