//! `cachalot`: replay and compare allocation traces through cachalot's allocator.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::main(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(cli::Failure::Usage(msg)) => {
            eprintln!("cachalot: error: {msg}\n\n{}", cli::USAGE);
            ExitCode::from(2)
        }
        Err(cli::Failure::Error(msg)) => {
            eprintln!("cachalot: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
