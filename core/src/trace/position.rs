//! Where in its input a trace's operation, or a row the reader skipped, came from: the
//! 1-based line of an RMM CSV, or the 0-based index of an event in a snapshot's list of the
//! device read (`device_traces[d][i]`, the index PyTorch's own tools show).
//!
//! Invariant: a trace's positions are all lines or all events, as its format is, and they
//! never decrease along its operations.

use core::fmt;

/// A place in a trace's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Position {
    /// A CSV line, 1-based as an editor counts (the header is line 1).
    Line(u32),
    /// A snapshot event, 0-based within the device's list.
    Event(u32),
}

impl Default for Position {
    fn default() -> Self {
        Position::Line(0)
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Line(n) => write!(f, "line {n}"),
            Position::Event(i) => write!(f, "event {i}"),
        }
    }
}
