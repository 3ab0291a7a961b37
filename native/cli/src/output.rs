//! Where the tool's words go: reports to stdout through a writer whose errors the commands
//! propagate, notes to stderr.
//!
//! Invariants: nothing here panics when a stream is closed or full (no `println!`); a failed
//! write to stdout becomes [`Failure::Output`], which `main` turns into a quiet exit for a
//! closed pipe and one `cannot write output` error otherwise. A note that cannot be written
//! is dropped: there is nowhere left to say so.

use std::io::{self, Write};

use super::Failure;

/// The stream reports go to: stdout, or a buffer in tests.
pub type Out<'a> = &'a mut dyn Write;

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Output(e)
    }
}

/// Prints `cachalot: note: {msg}` on stderr.
pub fn note(msg: &str) {
    let _ = writeln!(io::stderr(), "cachalot: note: {msg}");
}

/// Prints `cachalot: wrote {path}` on stderr: a file written is said, never left to guess
/// (stderr, so that `--json` keeps stdout to its one value).
pub fn wrote(path: &str) {
    let _ = writeln!(io::stderr(), "cachalot: wrote {path}");
}

/// Runs `body` with stdout as its output, then flushes it, so a write error surfaces
/// whichever write met it.
pub fn to_stdout<T>(body: impl FnOnce(Out) -> Result<T, Failure>) -> Result<T, Failure> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let result = body(&mut out);
    let flushed = out.flush();
    let value = result?;
    flushed?;
    Ok(value)
}
