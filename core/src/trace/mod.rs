//! Allocation traces read from text (RAPIDS RMM CSV, PyTorch snapshot JSON) into operations on
//! slots, within [`TraceLimits`]; a CSV may be fed a line at a time ([`CsvReader`]).

pub(crate) mod csv;
pub(crate) mod inferred_segments;
pub(crate) mod limits;
pub(crate) mod operations;
pub(crate) mod position;
pub(crate) mod reader;
pub(crate) mod snapshot_device;
pub(crate) mod trace_error;

pub use csv::CsvReader;
pub use limits::{nests_deeper, Limit, TraceLimits, LINE_BYTES};
pub use operations::{Trace, TraceOp, TraceReport, UnknownAction};
pub use reader::*;
