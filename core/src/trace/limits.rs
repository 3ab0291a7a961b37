//! The bounds every reader of a trace keeps, so that a file from a colleague or an issue
//! tracker cannot take the process's memory, stack or time: the bytes of text read, how deep
//! values nest, how many rows or events become operations, and how long one CSV line may be.
//! A front-end may raise them (the CLI's `--max-bytes`, `--max-depth`, `--max-events`; the
//! browser's `limits` argument), never lift them.
//!
//! Invariants: a reader that meets a bound stops there with a [`TraceErrorKind::Limit`]
//! naming it, before allocating for what lies past it; memory a reader holds is at most a
//! constant times `bytes` (text, values) plus a constant times `events` (operations).
//!
//! [`TraceErrorKind::Limit`]: crate::trace::TraceErrorKind::Limit

use core::fmt;

/// How much of a trace a reader takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceLimits {
    /// Bytes of text (after decompression): a snapshot is held whole, a CSV streamed.
    pub bytes: u64,
    /// How deep JSON arrays and objects (or a pickle's containers) may nest. A PyTorch
    /// snapshot nests 6 deep; serde_json refuses more than 127 whatever this says.
    pub depth: usize,
    /// CSV data rows, or snapshot events, read (each becomes at most two operations).
    pub events: u64,
}

impl TraceLimits {
    /// The defaults: 1 GiB of text, nesting 64 deep, 20 million rows or events (a replay
    /// holds about 40 bytes an operation: 800 MB at the limit).
    pub const DEFAULT: TraceLimits = TraceLimits { bytes: 1 << 30, depth: 64, events: 20_000_000 };
}

impl Default for TraceLimits {
    fn default() -> Self {
        TraceLimits::DEFAULT
    }
}

/// The longest CSV line read, in bytes: an RMM row is under 100; a longer line is not a
/// trace, and reading it whole would hold whatever a file without line breaks holds.
pub const LINE_BYTES: usize = 64 << 10;

/// A bound a reader met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// More text than [`TraceLimits::bytes`].
    Bytes(u64),
    /// Nesting deeper than [`TraceLimits::depth`].
    Depth(usize),
    /// More rows or events than [`TraceLimits::events`].
    Events(u64),
    /// A CSV line longer than [`LINE_BYTES`].
    LineBytes(usize),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Bytes(n) => write!(f, "more than {n} bytes of text (the limit on bytes read)"),
            Limit::Depth(n) => write!(f, "values nested deeper than {n} (the limit on nesting)"),
            Limit::Events(n) => write!(f, "more than {n} rows or events (the limit on events)"),
            Limit::LineBytes(n) => write!(f, "a line longer than {n} bytes (no RMM CSV row is)"),
        }
    }
}

/// True when JSON `text` nests arrays and objects deeper than `depth` (brackets inside
/// strings do not count): checked before parsing, so the error names the limit.
pub fn nests_deeper(text: &str, depth: usize) -> bool {
    let (mut level, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                level += 1;
                if level > depth {
                    return true;
                }
            }
            b']' | b'}' => level = level.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_counted_outside_strings() {
        assert!(!nests_deeper(r#"{"a": [[1]], "b": "[[[[[[\"[[["}"#, 3));
        assert!(nests_deeper(r#"{"a": [[1]]}"#, 2));
        assert!(!nests_deeper("[][][]", 1));
    }
}
