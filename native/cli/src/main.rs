//! `cachalot`: replay, compare and advise on allocation traces through cachalot's allocator.
//!
//! Exit status: 0 on success, 1 when the command could not do its job, 2 for a wrong
//! command line, 3 when `replay`'s replay ran out of memory (its report complete), 141 (what
//! a shell reports for a process that SIGPIPE ended) when whoever read stdout closed it
//! early; nothing written to a closed or full stream panics. `cachalot --help` says the same.

mod cli;

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut err = std::io::stderr();
    // Writes to stderr are best effort: if it is closed too, the exit status still says it all.
    // A name that is not UTF-8 is refused with a message: `std::env::args()` would panic.
    let argv = match cli::utf8_arguments(std::env::args_os().skip(1)) {
        Ok(argv) => argv,
        Err(msg) => {
            let _ = writeln!(err, "cachalot: error: {msg}");
            return ExitCode::from(2);
        }
    };
    match cli::main(argv) {
        Ok(cli::Finished::Done) => ExitCode::SUCCESS,
        Ok(cli::Finished::RanOutOfMemory) => ExitCode::from(3),
        Err(cli::Failure::Usage(msg)) => {
            let _ = writeln!(err, "cachalot: error: {msg}");
            ExitCode::from(2)
        }
        Err(cli::Failure::Error(msg)) => {
            let _ = writeln!(err, "cachalot: error: {msg}");
            ExitCode::FAILURE
        }
        // The reader went away (`cachalot ... | head`): nothing is wrong, and nobody to tell.
        Err(cli::Failure::Output(e)) if e.kind() == ErrorKind::BrokenPipe => ExitCode::from(141),
        Err(cli::Failure::Output(e)) => {
            let _ = writeln!(err, "cachalot: error: cannot write output: {e}");
            ExitCode::FAILURE
        }
    }
}
