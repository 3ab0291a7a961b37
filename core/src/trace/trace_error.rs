//! Why a text is not a trace the reader accepts, or cannot give the device asked for: a
//! [`TraceError`] names the line (0 when the problem is not on one) and says what is wrong;
//! a bound of the reader's that the text went past is a [`TraceErrorKind::Limit`] naming it.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::trace::limits::Limit;

/// Text that is not a readable trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// 1-based line (0 when the problem is not on one line).
    pub line: usize,
    /// What is wrong.
    pub message: String,
    /// Whether the text is malformed or the device asked for cannot be read from it.
    pub kind: TraceErrorKind,
}

/// What kind of problem a [`TraceError`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceErrorKind {
    /// The text is not a trace the reader accepts.
    Invalid,
    /// A snapshot with allocation events of several devices, and none asked for: the caller
    /// can offer the choice.
    DeviceNotChosen {
        /// The devices with allocation events, in order.
        devices: Vec<usize>,
    },
    /// The device asked for is not in the trace, or has no events while another has.
    NoSuchDevice,
    /// The text goes past one of the reader's [`TraceLimits`](crate::trace::TraceLimits):
    /// the caller can say how to raise it.
    Limit(Limit),
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let TraceErrorKind::Limit(_) = self.kind {
            match self.line {
                0 => f.write_str(&self.message),
                n => write!(f, "line {n}: {}", self.message),
            }
        } else if self.kind != TraceErrorKind::Invalid {
            f.write_str(&self.message)
        } else if self.line == 0 {
            write!(f, "invalid trace: {}", self.message)
        } else {
            write!(f, "invalid trace, line {}: {}", self.line, self.message)
        }
    }
}

pub(crate) fn error(line: usize, message: impl Into<String>) -> TraceError {
    TraceError { line, message: message.into(), kind: TraceErrorKind::Invalid }
}

impl TraceError {
    /// The error of a text that went past `limit` (at `line`, 0 when not on one): what a
    /// reader outside the core (of gzip, say) says for a limit it keeps.
    pub fn limit(line: usize, limit: Limit) -> TraceError {
        TraceError { line, message: alloc::format!("the trace holds {limit}"), kind: TraceErrorKind::Limit(limit) }
    }
}

/// [`TraceError::limit`].
pub(crate) fn over(line: usize, limit: Limit) -> TraceError {
    TraceError::limit(line, limit)
}
