//! The `browser` target: any bytes through the browser's file reader, as `TraceFile.parse`
//! and `TraceFile.parse_each_device` read a file a person opened in the page
//! (`cachalot_wasm::reader`, called natively), under small limits so that a bomb is a finding.
//!
//! Checks: reading never panics; an error is one line that starts with the file's name; a
//! trace read holds no more operations than twice the limit on events (a row makes at most
//! two), one time per operation, and every slot below its slot count; each device's trace of
//! `read_each_device` is the trace `read_trace` gives for that device; what the page then shows
//! (`describe`, the report's JSON) works. libFuzzer's `-rss_limit_mb` and `-timeout` catch
//! memory and time past the limits.

use cachalot_core::trace::TraceLimits;
use cachalot_core::{Trace, TraceOp};
use cachalot_wasm::describe;
use cachalot_wasm::reader::{read_each_device, read_trace};

/// Limits small enough that any input past them is quick to find.
pub const LIMITS: TraceLimits = TraceLimits { bytes: 1 << 20, depth: 16, events: 10_000 };

/// Runs one input; panics on a crash.
pub fn run(data: &[u8]) {
    let one = read_trace(data, "fuzz.json", None, &LIMITS);
    match &one {
        Ok(trace) => check(trace),
        Err(e) => check_error(e),
    }
    match read_each_device(data, "fuzz.json", &LIMITS) {
        Ok(traces) => {
            assert!(!traces.is_empty(), "read_each_device read no trace and no error");
            for t in &traces {
                check(t);
                // The page offers each GPU; reading that GPU alone must give the same trace.
                if let Some(d) = t.device {
                    let alone = read_trace(data, "fuzz.json", Some(d), &LIMITS)
                        .unwrap_or_else(|e| panic!("device {d} read with the others but not alone: {e}"));
                    assert_eq!(alone.ops, t.ops, "device {d}: its trace differs read alone");
                }
            }
            if let (Ok(t), [only]) = (&one, traces.as_slice()) {
                assert_eq!(t.ops, only.ops, "one trace read two ways differs");
            }
        }
        Err(e) => check_error(&e),
    }
}

/// An error must be one line starting with the file's name.
pub fn check_error(e: &str) {
    assert!(e.starts_with("fuzz.json: ") && !e.contains('\n'), "an error that does not name the file: {e}");
}

/// What must hold of every trace the reader gives.
pub fn check(trace: &Trace) {
    let ops = trace.ops.len() as u64;
    assert!(ops <= 2 * LIMITS.events, "{ops} operations read past the limit on events");
    assert_eq!(trace.ops.len(), trace.times_us.len(), "one time per operation");
    for op in &trace.ops {
        if let TraceOp::Alloc { slot, .. } | TraceOp::Free { slot } | TraceOp::FreeDeferred { slot, .. } = op {
            assert!(*slot < trace.slots, "slot {slot} past the trace's {} slots", trace.slots);
        }
    }
    for i in [0, trace.ops.len().saturating_sub(1), trace.ops.len()] {
        let words = describe(trace, i);
        assert_eq!(words.is_empty(), i >= trace.ops.len(), "operation {i} in words: {words:?}");
    }
    let _ = trace.describe();
}
