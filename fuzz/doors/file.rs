//! The `file` target: any bytes through the tool's whole file reader, as `cachalot replay`
//! reads a file (gzip → pickle, JSON or CSV → trace), under small limits, so that a bomb is a
//! finding: the reader must stop at a limit, not take memory or stack past it.
//!
//! Checks: reading never panics; an error is one line that names the input; a trace read
//! holds no more operations than twice the limit on events (a row makes at most two); a
//! snapshot read with its events streamed gives the trace its whole value gives, where both
//! read it (`streamed_snapshot.rs`, `pickle_events.rs` against the core's value reader), and
//! a CSV read a line at a time from the stream (blank runs counted at once) the trace the
//! core reads from the whole text, where both read it.
//! libFuzzer's `-rss_limit_mb` (and the corpus replay's `ulimit`) catch memory past the limits.

use cachalot_cli::trace_file::{parse_from, Source};
use cachalot_core::trace::{
    is_gzip, open_bytes, parse_device_trace_within, parse_snapshot_value_within, Opened, TraceLimits,
};

/// Limits small enough that any input past them is quick to find.
pub const LIMITS: TraceLimits = TraceLimits { bytes: 1 << 20, depth: 16, events: 10_000 };

/// Runs one input; panics on a crash.
pub fn run(data: &[u8]) {
    match parse_from(data, "fuzz", None, &LIMITS, Source::Gone) {
        Ok(loaded) => {
            let ops = loaded.trace.ops.len() as u64;
            assert!(ops <= 2 * LIMITS.events, "{ops} operations read past the limit on events");
            assert_eq!(loaded.trace.ops.len(), loaded.trace.times_us.len());
            let whole = match (is_gzip(data), open_bytes(data, &LIMITS)) {
                (false, Ok(Opened::Snapshot(value))) => parse_snapshot_value_within(&value, None, &LIMITS).ok(),
                (false, Ok(Opened::Csv(text))) => parse_device_trace_within(text, None, &LIMITS).ok(),
                _ => None,
            };
            if let Some(whole) = whole {
                let t = &loaded.trace;
                assert!(t.ops == whole.ops && t.times_us == whole.times_us, "streamed events differ");
                assert!(t.positions == whole.positions && t.report == whole.report, "streamed report differs");
                assert_eq!(t.segment_placements, whole.segment_placements);
            }
        }
        Err(e) => assert!(e.contains("fuzz") && !e.contains('\n'), "an error that does not name the input: {e}"),
    }
}
