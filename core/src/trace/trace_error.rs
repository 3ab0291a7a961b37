//! Why a text is not a trace the reader accepts, or cannot give the device asked for: a
//! [`TraceError`] names the line (0 when the problem is not on one) and says what is wrong.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

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
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind != TraceErrorKind::Invalid {
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
