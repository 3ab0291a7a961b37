//! `cachalot`: replay, compare and advise on allocation traces through cachalot's allocator.
//!
//! Exit status: 0 on success, 1 when the command could not do its job, 2 for a wrong
//! command line, 3 when `replay`'s replay ran out of memory (its report complete), 141 (what
//! a shell reports for a process that SIGPIPE ended) when whoever read stdout closed it
//! early; nothing written to a closed or full stream panics. `cachalot --help` says the same.
//!
//! Invariants: every failure is one line on stderr starting with `cachalot: error:` (a wrong
//! command line adds one line saying where the help is) and a non-zero exit status (see
//! [`command_line::AFTER_HELP`]); nothing panics on bad input or on a closed or full stdout;
//! every option a command is given is used, or clap refuses it naming it.

mod advise_cmd;
mod axis_ticks;
mod byte_size;
mod command_line;
mod compare_cmd;
mod equal_results;
mod fit;
mod fit_cmd;
mod input;
mod margin;
mod metadata;
mod oom_location;
mod output;
mod paragraph;
mod pass;
mod placements;
mod plot;
mod plot_file;
mod reference;
mod replay_cmd;
mod run;
mod search;
mod series;
mod snapshot_file;
mod table;
mod usage_error;

use cachalot_core::Config;
use clap::error::ErrorKind;
use clap::Parser;
use command_line::{Command, CommandLine};
use std::io::{self, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut err = std::io::stderr();
    // Writes to stderr are best effort: if it is closed too, the exit status still says it all.
    // A name that is not UTF-8 is refused with a message: `std::env::args()` would panic.
    let argv = match utf8_arguments(std::env::args_os().skip(1)) {
        Ok(argv) => argv,
        Err(msg) => {
            let _ = writeln!(err, "cachalot: error: {msg}");
            return ExitCode::from(2);
        }
    };
    match run_command(argv) {
        Ok(Finished::Done) => ExitCode::SUCCESS,
        Ok(Finished::RanOutOfMemory) => ExitCode::from(3),
        Err(Failure::Usage(msg)) => {
            let _ = writeln!(err, "cachalot: error: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Error(msg)) => {
            let _ = writeln!(err, "cachalot: error: {msg}");
            ExitCode::FAILURE
        }
        // The reader went away (`cachalot ... | head`): nothing is wrong, and nobody to tell.
        Err(Failure::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(141),
        Err(Failure::Output(e)) => {
            let _ = writeln!(err, "cachalot: error: cannot write output: {e}");
            ExitCode::FAILURE
        }
    }
}
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

/// How a command that did its job ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Finished {
    /// Nothing to report beyond the output (exit 0).
    Done,
    /// `replay`'s replay ran out of memory; the report is complete (exit 3).
    RanOutOfMemory,
}

/// The environment variable the library reads its config from; the tool reads it too.
pub const CONFIG_ENV: &str = "CACHALOT_ALLOC_CONF";

/// Runs the tool on `argv` (without the program name).
fn run_command(argv: Vec<String>) -> Result<Finished, Failure> {
    let parsed = CommandLine::try_parse_from(std::iter::once("cachalot".to_string()).chain(argv.iter().cloned()));
    let command_line = match parsed {
        Ok(c) => c,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let text = e.render().to_string();
            return output::to_stdout(|out| Ok(write!(out, "{text}")?)).map(|()| Finished::Done);
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            return Err(Failure::Usage(
                "missing command (replay, compare, advise or fit)\nsee 'cachalot --help'".into(),
            ))
        }
        Err(e) => return Err(Failure::Usage(usage_error::message(&e, &argv))),
    };
    output::to_stdout(|out| match &command_line.command {
        Command::Replay(a) => replay_cmd::run(a, out),
        Command::Compare(a) => compare_cmd::run(a, out).map(|()| Finished::Done),
        Command::Advise(a) => advise_cmd::run(a, out).map(|()| Finished::Done),
        Command::Fit(a) => fit_cmd::run(a, out).map(|()| Finished::Done),
    })
}

/// The options of the commands that time one replay per config.
fn run_options(device: &command_line::DeviceArgs, passes: &command_line::PassArgs, summary: bool) -> run::RunOptions {
    run::RunOptions {
        capacity: device.capacity.unwrap_or(run::DEFAULT_CAPACITY),
        warm_passes: usize::from(passes.passes),
        summary,
    }
}

/// The arguments as text; one that is not UTF-8 is an error naming it (its bytes shown with
/// `\xNN` escapes), never a panic: clap and the trace names take text.
pub fn utf8_arguments(args: impl Iterator<Item = std::ffi::OsString>) -> Result<Vec<String>, String> {
    args.enumerate()
        .map(|(i, a)| {
            a.into_string()
                .map_err(|a| format!("argument {} is not valid UTF-8: '{}'", i + 1, escaped(a.as_encoded_bytes())))
        })
        .collect()
}

/// `bytes` as text, each byte that is not part of UTF-8 written `\xNN`.
fn escaped(bytes: &[u8]) -> String {
    bytes.utf8_chunks().fold(String::new(), |mut s, chunk| {
        s.push_str(chunk.valid());
        chunk.invalid().iter().for_each(|b| s.push_str(&format!("\\x{b:02x}")));
        s
    })
}

/// The config text `$CACHALOT_ALLOC_CONF` holds, if set (an empty value counts as unset, as
/// the library takes it: the defaults). A value that is not UTF-8 is a usage error, as the
/// library refuses it: replaying under the defaults instead would report figures of a config
/// nobody asked for.
fn config_from_env() -> Result<Option<String>, Failure> {
    match std::env::var(CONFIG_ENV) {
        Ok(v) => Ok(Some(v).filter(|v| !v.trim().is_empty())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(Failure::Usage(format!("{CONFIG_ENV} is not valid UTF-8: '{}'", escaped(v.as_encoded_bytes()))))
        }
    }
}

/// A config the user gave, and where: how a bad one is named.
pub struct ConfigText {
    pub text: String,
    pub from_env: bool,
}

impl ConfigText {
    fn given(text: &str) -> ConfigText {
        ConfigText { text: text.into(), from_env: false }
    }

    /// `--config`'s value, else `$CACHALOT_ALLOC_CONF`, else the defaults.
    fn resolve(given: Option<&str>) -> Result<ConfigText, Failure> {
        Ok(match (given, config_from_env()?) {
            (Some(t), _) => ConfigText::given(t),
            (None, Some(env)) => ConfigText { text: env, from_env: true },
            (None, None) => ConfigText::given(""),
        })
    }
}

/// Parses the configs the user gave (a bad one is a usage error naming where it came from),
/// noting on stderr, once per note, each key that has no effect here: a silently ignored
/// setting would read as a measured one.
fn parse_user_configs(texts: &[ConfigText]) -> Result<Vec<Config>, Failure> {
    let configs: Vec<Config> = texts
        .iter()
        .map(|t| {
            Config::parse(&t.text).map_err(|e| {
                let origin = if t.from_env { CONFIG_ENV.to_string() } else { "--config".into() };
                // Said as key and problem: "invalid ... key" would read as an unknown key for a bad value.
                let what = if e.key.is_empty() { e.to_string() } else { format!("key '{}': {}", e.key, e.message) };
                Failure::Usage(format!("{origin} '{}': {what}", t.text))
            })
        })
        .collect::<Result<_, _>>()?;
    let mut noted: Vec<String> = Vec::new();
    let unsimulated = texts.iter().flat_map(|t| Config::unsimulated_key_notes(&t.text));
    for note in configs.iter().flat_map(Config::moot_key_notes).chain(unsimulated) {
        if !noted.contains(&note) {
            output::note(&note);
            noted.push(note);
        }
    }
    Ok(configs)
}
