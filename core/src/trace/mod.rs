//! Allocation traces read from text (RAPIDS RMM CSV, PyTorch snapshot JSON) into operations on
//! slots, within [`TraceLimits`]; a CSV may be fed a line at a time ([`CsvReader`]).

pub(crate) mod csv;
pub mod file_format;
pub mod frame_table;
pub(crate) mod inferred_segments;
pub(crate) mod late_frees;
pub(crate) mod limits;
pub(crate) mod operations;
pub mod pickle;
pub(crate) mod pickle_arena;
pub(crate) mod pickle_bytes;
pub(crate) mod pickle_events;
pub(crate) mod pickle_writer;
pub(crate) mod position;
pub(crate) mod reader;
pub mod slim_json;
pub(crate) mod snapshot_device;
pub mod snapshot_event;
pub mod snapshot_reader;
pub mod streamed_snapshot;
pub(crate) mod trace_error;

pub use csv::CsvReader;
pub use file_format::{format_of, is_gzip, is_pickle, open_bytes, Format, Opened, GZIP_MAGIC};
pub use frame_table::{FrameBounds, FrameTable};
pub use limits::{nests_deeper, Limit, TraceLimits, LINE_BYTES};
pub use operations::{Trace, TraceOp, TraceReport, UnknownAction};
pub use reader::*;
pub use snapshot_device::{choose_among, choose_list};
pub use snapshot_event::{Action, Field, SnapshotEvent};
pub use snapshot_reader::{EventList, SnapshotReader};
