//! The `cachalot` command-line tool: `replay`, `compare` and `advise` allocation traces
//! through the allocator over a simulated device.
//!
//! Invariants: every failure is one line on stderr starting with `cachalot: error:` (followed
//! by the usage for a wrong command line) and a non-zero exit status (2 for usage errors);
//! nothing panics on bad input or on a closed or full stdout; every option a command is given
//! is used, or the command fails naming it.

mod advise_cmd;
mod args;
mod compare_cmd;
mod input;
mod metadata;
mod output;
mod plot;
mod plot_file;
mod reference;
mod replay_cmd;
mod run;
mod search;
mod series;

use args::Args;
use cachalot_core::Config;

/// What went wrong, and which exit status it maps to.
pub enum Failure {
    /// The command line was wrong (exit 2).
    Usage(String),
    /// The command could not do its job (exit 1).
    Error(String),
    /// Writing to stdout failed (a closed pipe: a quiet exit; anything else: exit 1).
    Output(std::io::Error),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Error(s)
    }
}

pub const USAGE: &str = "\
usage: cachalot <command> [options]

commands:
  replay [TRACE] [--config CONF] [--capacity SIZE] [--passes N] [--device N] [--json]
         [--summary] [--plot FILE.svg] [--strict]
      Replay an allocation trace (RMM CSV, .csv.gz or PyTorch snapshot .json; default:
      the built-in gpt2_train trace) and report peak memory, segments, driver calls and
      ns/op. Out of memory is explained, with a config that avoids it on this trace.
      --summary prints memory_summary at the peak and at the end; --plot draws requested,
      allocated and reserved bytes over time; --strict rejects frees of pointers the
      trace never allocated (otherwise they are counted and skipped).
  compare [TRACE] [--config CONF]... [--capacity SIZE] [--passes N] [--device N] [--json]
          [--plot FILE.svg] [--strict]
      Replay one trace under several configs side by side (default: PyTorch's default,
      max_split_size_mb:128, expandable_segments:True and cachalot's default), with
      PyTorch's measured figures for a built-in trace; --plot overlays their reserved bytes.
  advise [TRACE] [--capacity SIZE] [--device N] [--json]
      Replay a trace under a search of configs and rank them (out-of-memory events, peak
      reserved, driver calls), with the strings to paste for PyTorch and for cachalot.

options:
  --capacity SIZE  the simulated device's memory (default 140GiB, an H200's)
  --passes N       warm passes timed after the first (cold) pass, on the same allocator:
                   3 to 1000 (default 5); ns/op is their median
  --device N       the GPU whose events to replay, for a snapshot that recorded several
  --json           one JSON value on stdout instead of the report
  -h, --help       print this help

TRACE is a path or a built-in trace name: gpt2_train, resnet50_train, mixed_fc_conv.
CONF uses PYTORCH_CUDA_ALLOC_CONF syntax, e.g. policy:pytorch,max_split_size_mb:128;
without policy:pytorch it runs cachalot's policy, which maps pages, so PyTorch's
max_split_size_mb, max_non_split_rounding_mb and expandable_segments do nothing there.
SIZE takes units: 80GiB, 141GB, 512MiB, 1.5GiB.
Counts: segments+maps are segments allocated plus spans of pages mapped, new or moved
(PyTorch's num_device_alloc); driver calls are cuMemAlloc, cuMemFree, cuMemCreate,
cuMemMap, cuMemUnmap and cuMemRelease calls.";

/// Every option of the tool, so a command can tell one it does not take from a typo.
const TOOL_OPTIONS: &[&str] = &["config", "capacity", "passes", "device", "json", "summary", "plot", "strict"];

/// Runs the tool on `argv` (without the program name).
pub fn main(argv: Vec<String>) -> Result<(), Failure> {
    let mut it = argv.into_iter();
    let command = it.next().ok_or_else(|| Failure::Usage("missing command".into()))?;
    let rest: Vec<String> = it.collect();
    let mut args = Args::new(&command, TOOL_OPTIONS, rest.clone());
    output::to_stdout(|out| match command.as_str() {
        "replay" | "compare" | "advise" if args.wants_help() => Ok(writeln!(out, "{USAGE}")?),
        "replay" => replay_cmd::run(&mut args, out),
        "compare" => compare_cmd::run(&mut args, out),
        "advise" => advise_cmd::run(&mut args, out),
        "help" | "--help" | "-h" => {
            nothing_more(&command, &rest, true)?;
            Ok(writeln!(out, "{USAGE}")?)
        }
        "--version" | "version" => {
            nothing_more(&command, &rest, false)?;
            Ok(writeln!(out, "cachalot {}", env!("CARGO_PKG_VERSION"))?)
        }
        other => Err(Failure::Usage(format!("unknown command '{other}'"))),
    })
}

/// The commands `help` may name.
const COMMANDS: &[&str] = &["replay", "compare", "advise"];

/// Refuses arguments after `help` (but one command name) or `version`, so that a mistyped
/// command line is not taken for a request for help.
fn nothing_more(command: &str, rest: &[String], command_name_allowed: bool) -> Result<(), Failure> {
    let skip = usize::from(command_name_allowed && rest.first().is_some_and(|c| COMMANDS.contains(&c.as_str())));
    match rest.get(skip) {
        None => Ok(()),
        Some(extra) if command_name_allowed && skip == 0 && !extra.starts_with('-') => {
            Err(Failure::Usage(format!("unknown command '{extra}' (commands: {})", COMMANDS.join(", "))))
        }
        Some(extra) => Err(Failure::Usage(format!(
            "{command} takes {} (got '{extra}')",
            if command_name_allowed { "at most a command name" } else { "no arguments" }
        ))),
    }
}

/// Reads `--capacity`: the simulated device's size in bytes.
fn capacity_option(args: &mut Args) -> Result<u64, Failure> {
    let Some(text) = args.value("capacity").map_err(Failure::Usage)? else { return Ok(run::DEFAULT_CAPACITY) };
    let capacity = args::parse_size(&text).map_err(|e| Failure::Usage(format!("--capacity: {e}")))?;
    if capacity < cachalot_core::size::SMALL_BUFFER {
        return Err(Failure::Usage(format!(
            "--capacity {text} ({capacity} bytes) is too small: a device needs room for at least one 2 MiB segment"
        )));
    }
    let most = cachalot::shared_allocator::MAX_SIMULATED_CAPACITY;
    if capacity > most {
        return Err(Failure::Usage(format!(
            "--capacity {text} ({capacity} bytes) is too large: the simulated device holds at most {most} bytes (1 TiB, its address space)"
        )));
    }
    Ok(capacity)
}

/// Reads the options of the commands that time one replay per config.
fn run_options(args: &mut Args, summary: bool) -> Result<run::RunOptions, Failure> {
    let capacity = capacity_option(args)?;
    let warm_passes = match args.value("passes").map_err(Failure::Usage)? {
        Some(p) => p.parse::<usize>().ok().filter(|&n| (3..=1000).contains(&n)).ok_or_else(|| {
            Failure::Usage(format!("--passes {p}: expected the number of warm passes after the first, 3 to 1000"))
        })?,
        None => 5,
    };
    Ok(run::RunOptions { capacity, warm_passes, summary })
}

/// Reads `--device`: which device's events of a snapshot to replay.
fn device_option(args: &mut Args) -> Result<Option<usize>, Failure> {
    let Some(text) = args.value("device").map_err(Failure::Usage)? else { return Ok(None) };
    let device = text
        .parse::<usize>()
        .map_err(|_| Failure::Usage(format!("--device {text}: expected a device number (0, 1, ...)")))?;
    Ok(Some(device))
}

/// Parses the configs the user gave (a bad one is a usage error), noting on stderr, once per
/// key, each PyTorch key that has no effect under cachalot's policy: a silently ignored
/// setting would read as a measured one.
fn parse_user_configs(texts: &[String]) -> Result<Vec<Config>, Failure> {
    let configs: Vec<Config> = texts
        .iter()
        .map(|t| Config::parse(t).map_err(|e| Failure::Usage(format!("--config '{t}': {e}"))))
        .collect::<Result<_, _>>()?;
    let mut noted: Vec<String> = Vec::new();
    for note in configs.iter().flat_map(Config::moot_key_notes) {
        if !noted.contains(&note) {
            output::note(&note);
            noted.push(note);
        }
    }
    Ok(configs)
}
