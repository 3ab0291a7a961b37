//! The tool's command line, declared once for clap: the commands, their options, what each
//! option means, and the exit statuses. clap parses it, prints each command's `--help` and
//! suggests the option a typo meant.
//!
//! Invariants: every option a command takes is declared on that command and nowhere else
//! (shared groups are flattened in), so a command's help lists exactly what it accepts and
//! an option it does not take is refused; values that can be checked alone (sizes, counts)
//! are checked here, so a wrong one is a usage error before any trace is read.

use cachalot_core::trace::TraceLimits;
use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand};

use super::byte_size::parse_size;

/// What every command's help ends with: where traces and configs come from, and what the
/// exit status says.
pub const AFTER_HELP: &str = "\
TRACE is a path, '-' for stdin, or a built-in trace: gpt2_train, resnet50_train, mixed_fc_conv
(default gpt2_train). A path is an RMM CSV (.csv, .csv.gz) or a PyTorch snapshot: JSON, or the
pickle torch.cuda.memory._dump_snapshot() writes (.pickle); gzip is recognised by its bytes.

A trace is read within limits (--max-bytes, --max-depth, --max-events): a file past one is
refused, naming the limit.

CONF uses PYTORCH_CUDA_ALLOC_CONF syntax (key:value,...) and takes every key PyTorch 2.11 to
2.15 takes there or in PYTORCH_ALLOC_CONF; pytorch_version:2.11|...|2.15 (2.15 by default)
picks the release whose keys are checked and whose decisions policy:pytorch makes. Those that
do not change a simulated device (backend, pinned_*, release_lock_on_cudamalloc,
graph_capture_record_stream_reuse, expandable_segments_reserve*) are accepted with a note. Without policy:pytorch it runs cachalot's policy, which maps pages, so
max_split_size_mb, max_non_split_rounding_mb and expandable_segments do nothing there.
Without --config, CACHALOT_ALLOC_CONF is read, as the library reads it; --config wins.

Exit status: 0 done; 1 the trace could not be read or replayed, or output failed;
2 a wrong command line; 3 (replay only) the replay ran out of memory: the report is
complete, the status tells a script; 141 stdout was closed early (cachalot ... | head).";

/// Replay, compare and advise on allocation traces through cachalot's allocator over a
/// simulated device.
#[derive(Parser, Debug)]
#[command(name = "cachalot", version, after_help = AFTER_HELP, max_term_width = 100)]
pub struct CommandLine {
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Replay a trace under one config and report peak memory, segments, driver calls and
    /// CPU cost; an out of memory is located and explained, with a config that avoids it.
    #[command(after_help = AFTER_HELP)]
    Replay(ReplayArgs),
    /// Replay one trace under several configs side by side, with PyTorch's figures measured
    /// on an H200 for a built-in trace.
    #[command(after_help = AFTER_HELP)]
    Compare(CompareArgs),
    /// Replay a trace under a search of configs, rank them and print the strings to paste.
    ///
    /// Configs that give the same figures are shown as one row (--all shows each). A config
    /// is recommended over PyTorch's default (or, for cachalot, over its default policy) only
    /// with fewer out-of-memory events, or as many and at least 1% less peak reserved memory
    /// with at most 10% more driver calls in the first pass, or at least 5% less peak reserved
    /// memory whatever its driver calls; otherwise advise says to keep the default.
    #[command(after_help = AFTER_HELP)]
    Advise(AdviseArgs),
    /// Find the smallest device each config replays a trace on without an out-of-memory
    /// (to 2 MiB), with the driver calls at that size and the named cards it fits.
    ///
    /// Configs: PyTorch's default, expandable segments and cachalot's default policy, then
    /// each --config given. A card's usable memory is the total PyTorch reports for it less
    /// 512 MiB for the CUDA context; the report lists the figures assumed.
    #[command(after_help = AFTER_HELP)]
    Fit(FitArgs),
}

/// Which trace, and which of a snapshot's devices.
#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    /// The trace (see below); '-' reads stdin.
    #[arg(value_name = "TRACE")]
    pub trace: Option<String>,
    /// The GPU whose events to replay, for a snapshot that recorded several.
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,
    /// Refuse a trace with frees of pointers it never allocated, or allocations at a
    /// pointer still live (otherwise they are counted, noted and skipped).
    #[arg(long)]
    pub strict: bool,
    /// One JSON value on stdout instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Place segments where the simulated device chooses, not where the trace's addresses
    /// (a snapshot's segment_alloc entries, or a CSV's pointers) say the run placed them:
    /// best-fit ties between equal free blocks may then break otherwise than in the run.
    #[arg(long)]
    pub no_follow_addresses: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// How much of a trace file is read: a file from someone else cannot take more.
#[derive(Args, Debug, Clone)]
pub struct LimitArgs {
    /// The most bytes of trace read, after decompression (a CSV is streamed; a snapshot is
    /// held, and a pickle's values are counted as JSON, each use of a shared one in full)
    /// [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_bytes: Option<u64>,
    /// How deep a snapshot's values may nest (a PyTorch snapshot nests 6 deep; JSON stops
    /// at 127 whatever this says).
    #[arg(long, value_name = "N", default_value_t = TraceLimits::DEFAULT.depth,
          value_parser = clap::value_parser!(u16).range(1..=1000).map(usize::from))]
    pub max_depth: usize,
    /// The most CSV rows or snapshot events read (a replay holds about 40 bytes an operation).
    #[arg(long, value_name = "N", default_value_t = TraceLimits::DEFAULT.events)]
    pub max_events: u64,
}

impl LimitArgs {
    /// The limits the reader keeps.
    pub fn limits(&self) -> TraceLimits {
        TraceLimits {
            bytes: self.max_bytes.unwrap_or(TraceLimits::DEFAULT.bytes),
            depth: self.max_depth,
            events: self.max_events,
        }
    }
}

/// The simulated device and the timing.
#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// The simulated device's memory, e.g. 80GiB, 141GB, 512MiB, 1.5GiB [default: 140GiB, an H200's].
    #[arg(long, value_name = "SIZE", value_parser = parse_capacity)]
    pub capacity: Option<u64>,
}

/// How many warm passes to time.
#[derive(Args, Debug, Clone)]
pub struct PassArgs {
    /// Warm passes timed after the first (cold) pass, on the same allocator, 3 to 1000;
    /// ns/op is their median.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u16).range(3..=1000))]
    pub passes: u16,
}

/// `cachalot replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// The allocator config [default: $CACHALOT_ALLOC_CONF, else cachalot's policy].
    #[arg(long, value_name = "CONF")]
    pub config: Option<String>,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub passes: PassArgs,
    /// Print memory_summary at the peak of reserved memory and at the end of the trace.
    #[arg(long)]
    pub summary: bool,
    /// Draw requested, allocated and reserved bytes over the trace into FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
    /// Write the replayed run's snapshot in PyTorch's schema (segments with their blocks,
    /// device_traces with the input's frames and times), as JSON or as the pickle PyTorch's
    /// memory viewer (torch/cuda/_memory_viz.py) reads, by the extension: .json or .pickle.
    #[arg(long, value_name = "OUT.json|OUT.pickle")]
    pub snapshot: Option<String>,
}

/// `cachalot compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// A config to compare; repeat it for several [default: PyTorch's default,
    /// max_split_size_mb:128, expandable_segments:True and cachalot's default, with
    /// $CACHALOT_ALLOC_CONF added when set].
    #[arg(long, value_name = "CONF")]
    pub config: Vec<String>,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub passes: PassArgs,
    /// Overlay the configs' reserved bytes over the trace into FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
    /// Let the tables be as wide as the configs make them, instead of wrapping long
    /// configs to fit 100 columns.
    #[arg(long)]
    pub wide: bool,
}

/// `cachalot advise`.
#[derive(Args, Debug)]
pub struct AdviseArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Print every config replayed, not only one row per distinct result.
    #[arg(long)]
    pub all: bool,
    /// Let the tables be as wide as the configs make them, instead of wrapping long
    /// configs to fit 100 columns.
    #[arg(long)]
    pub wide: bool,
}

/// `cachalot fit`.
#[derive(Args, Debug)]
pub struct FitArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// A config to search besides the three searched always; repeat it for several.
    #[arg(long, value_name = "CONF")]
    pub config: Vec<String>,
    /// Times the trace runs in a row on one allocator, each run on what the one before left
    /// cached, as a loop repeating the recorded steps does (a second run may need a little more
    /// than the first); 1 to 100. Each probe replays the trace N times, so the search takes N times
    /// as long or more.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
}

/// `--capacity`: a size a simulated device can have.
fn parse_capacity(text: &str) -> Result<u64, String> {
    let capacity = parse_size(text)?;
    if capacity < cachalot_core::size::SMALL_BUFFER {
        return Err(format!(
            "{text} ({capacity} bytes) is too small: a device needs room for at least one 2 MiB segment"
        ));
    }
    let most = cachalot::shared_allocator::MAX_SIMULATED_CAPACITY;
    if capacity > most {
        return Err(format!(
            "{text} ({capacity} bytes) is too large: the simulated device holds at most {most} bytes (1 TiB, its address space)"
        ));
    }
    Ok(capacity)
}
