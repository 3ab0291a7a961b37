//! The trace readers' doors: a trace in either format (RAPIDS RMM's logging CSV, read by
//! `csv.rs`, or PyTorch snapshot JSON, read here), one device's or each device's, into the
//! [`Trace`] that `operations.rs` builds. Rows a replay cannot use (frees of pointers the trace
//! never allocated, `allocate failure` rows, zero-byte allocations) are counted in its report,
//! never fatal. Malformed text is a [`TraceError`] naming the line.
//!
//! A snapshot also says when a free had to wait: PyTorch logs `free_requested` when the
//! program frees a block and `free_completed` when the memory may be reused, later when the
//! block was used on another stream (`record_stream`) whose work had not finished. Such a free
//! becomes a `TraceOp::FreeDeferred` on a *lane*, and its completion a
//! `TraceOp::FreeCompleted` of that lane, so a replay keeps the block from reuse exactly as
//! long as the recorded run did.
//!
//! Every operation keeps the [`Position`] of the row or event it came from, and each kind of
//! row skipped keeps the position of its first, so a report can say where to look.
//!
//! Every reader keeps [`TraceLimits`] (the `*_within` functions take them; the others take
//! the defaults): text past `bytes`, JSON nested past `depth` or rows and events past `events`
//! are a [`TraceErrorKind::Limit`], not memory taken. Invariant: the readers only feed the
//! builder; the trace's own invariants are `operations.rs`'.

use alloc::string::ToString;
use alloc::vec::Vec;

use crate::trace::limits::{nests_deeper, Limit, TraceLimits};
use crate::trace::operations::Trace;
pub use crate::trace::position::Position;
use crate::trace::snapshot_event::SnapshotEvent;
use crate::trace::snapshot_reader::{EventList, SnapshotReader};
use crate::trace::trace_error::{error, over};
pub use crate::trace::trace_error::{TraceError, TraceErrorKind};

/// Reads a trace in either format: JSON when the text starts with `{`, CSV otherwise. A
/// snapshot with allocation events of several devices is refused: see
/// [`parse_device_trace`].
pub fn parse_trace(text: &str) -> Result<Trace, TraceError> {
    parse_device_trace(text, None)
}

/// Reads a trace as [`parse_trace`] does, keeping one device's events of a snapshot:
/// `device`'s, or with `None` the only device's that has allocations (several are an error
/// of kind [`TraceErrorKind::DeviceNotChosen`], which lists them). An RMM CSV records one
/// device, so asking for one is an error.
pub fn parse_device_trace(text: &str, device: Option<usize>) -> Result<Trace, TraceError> {
    parse_device_trace_within(text, device, &TraceLimits::DEFAULT)
}

/// [`parse_device_trace`] within `limits`.
pub fn parse_device_trace_within(text: &str, device: Option<usize>, limits: &TraceLimits) -> Result<Trace, TraceError> {
    let text = without_bom(text);
    if is_snapshot(text) {
        parse_snapshot_value_within(&json(text, limits)?, device, limits)
    } else if let Some(d) = device {
        let message = alloc::format!("device {d} asked for, but an RMM CSV trace records one device");
        Err(TraceError { line: 0, message, kind: TraceErrorKind::NoSuchDevice })
    } else {
        crate::trace::csv::parse_csv_within(text, limits)
    }
}

/// Reads a snapshot already parsed into a JSON value (a pickle converted, say), as
/// [`parse_device_trace`] reads its text: the same reader, so both give the same trace.
pub fn parse_snapshot_value(snapshot: &serde_json::Value, device: Option<usize>) -> Result<Trace, TraceError> {
    parse_snapshot_value_within(snapshot, device, &TraceLimits::DEFAULT)
}

/// [`parse_snapshot_value`] within `limits` (on events: the value is already held).
pub fn parse_snapshot_value_within(
    snapshot: &serde_json::Value,
    device: Option<usize>,
    limits: &TraceLimits,
) -> Result<Trace, TraceError> {
    let lists = snapshot_lists(snapshot)?;
    read_lists(lists, crate::trace::snapshot_device::choose(lists, device)?, limits)
}

/// Reads RMM's logging CSV (`Thread,Time,Action,Pointer,Size,Stream`; columns found by name).
pub fn parse_csv(text: &str) -> Result<Trace, TraceError> {
    crate::trace::csv::parse_csv_within(text, &TraceLimits::DEFAULT)
}

/// Reads the `device_traces` of a PyTorch snapshot (`torch.cuda.memory._snapshot()`):
/// `alloc` entries allocate, `free_requested` entries free (deferred until their
/// `free_completed` when that does not follow at once), `oom` entries count as failures, and
/// `segment_alloc` entries become the trace's `segment_placements`; other actions are ignored. One device's list is read, as [`parse_device_trace`] chooses it.
pub fn parse_snapshot_json(text: &str) -> Result<Trace, TraceError> {
    let limits = TraceLimits::DEFAULT;
    let v = json(without_bom(text), &limits)?;
    let lists = snapshot_lists(&v)?;
    read_lists(lists, crate::trace::snapshot_device::choose(lists, None)?, &limits)
}

/// Reads a trace in either format, as [`parse_trace`] does, but a snapshot's every device
/// with allocations becomes a trace of its own (its `device` set when the snapshot listed
/// several), in device order: one parse for a page that offers each GPU. A CSV, or a
/// snapshot without allocations, gives one trace.
pub fn parse_each_device(text: &str) -> Result<Vec<Trace>, TraceError> {
    parse_each_device_within(text, &TraceLimits::DEFAULT)
}

/// [`parse_each_device`] within `limits` (the events of each device's trace are counted
/// apart: each is held as one trace would be).
pub fn parse_each_device_within(text: &str, limits: &TraceLimits) -> Result<Vec<Trace>, TraceError> {
    let text = without_bom(text);
    if !is_snapshot(text) {
        return Ok(alloc::vec![crate::trace::csv::parse_csv_within(text, limits)?]);
    }
    parse_each_device_value_within(&json(text, limits)?, limits)
}

/// [`parse_each_device_within`] of a snapshot already parsed into a JSON value (a pickle
/// converted, say).
pub fn parse_each_device_value_within(v: &serde_json::Value, limits: &TraceLimits) -> Result<Vec<Trace>, TraceError> {
    let lists = snapshot_lists(v)?;
    let devices = crate::trace::snapshot_device::with_allocations(lists);
    if devices.is_empty() {
        return Ok(alloc::vec![read_lists(lists, None, limits)?]);
    }
    devices.into_iter().map(|d| read_lists(lists, Some(d), limits)).collect()
}

/// The text without a byte-order mark, as some editors write.
pub(crate) fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// True for JSON (a PyTorch snapshot, or a list that is not one), false for an RMM CSV.
fn is_snapshot(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
}

/// The JSON value of `text`, within `limits`' bytes and nesting (checked first: serde_json's
/// own bound is 127 and its error does not say which limit).
fn json(text: &str, limits: &TraceLimits) -> Result<serde_json::Value, TraceError> {
    if text.len() as u64 > limits.bytes {
        return Err(over(0, Limit::Bytes(limits.bytes)));
    }
    if nests_deeper(text, limits.depth) {
        return Err(over(0, Limit::Depth(limits.depth)));
    }
    serde_json::from_str(text).map_err(|e| error(e.line(), e.to_string()))
}

/// A snapshot's `device_traces`, each checked to be a list.
fn snapshot_lists(v: &serde_json::Value) -> Result<&[serde_json::Value], TraceError> {
    if v.is_array() {
        let message = "a JSON list, not a PyTorch memory snapshot (an object with 'device_traces', as \
                       torch.cuda.memory._snapshot() returns)";
        return Err(error(0, message));
    }
    let lists = v
        .get("device_traces")
        .and_then(|t| t.as_array())
        .ok_or_else(|| error(0, "no 'device_traces' list: not a PyTorch memory snapshot"))?;
    if let Some(d) = lists.iter().position(|l| !l.is_array()) {
        return Err(error(0, alloc::format!("device_traces[{d}] is not a list")));
    }
    Ok(lists)
}

/// Hands each event of `snapshot`'s `device_traces[d]` to `keep(d, e)`, in order, and returns
/// what a first pass learns of each list: a snapshot already held as a value (a pickle's),
/// kept as [`streamed_snapshot`](crate::trace::streamed_snapshot) keeps one it parses.
pub fn snapshot_events(
    snapshot: &serde_json::Value,
    keep: &mut impl FnMut(usize, SnapshotEvent) -> Result<(), TraceError>,
) -> Result<Vec<EventList>, TraceError> {
    let lists = snapshot_lists(snapshot)?;
    let mut out = Vec::with_capacity(lists.len());
    for (d, l) in lists.iter().enumerate() {
        let mut list = EventList::default();
        for v in l.as_array().map_or(&[][..], |l| l.as_slice()) {
            let e = SnapshotEvent::of(v);
            list.see(&e, v);
            keep(d, e)?;
        }
        out.push(list);
    }
    Ok(out)
}

/// The trace of device `chosen`'s list, or (`None`: no device has allocations, nothing to
/// replay) of every list, for what they count (`oom` entries) and for their errors: the
/// events fed to a [`SnapshotReader`], as a reader that streams them feeds it.
fn read_lists(lists: &[serde_json::Value], chosen: Option<usize>, limits: &TraceLimits) -> Result<Trace, TraceError> {
    let mut reader = SnapshotReader::new(chosen, lists.len(), *limits);
    let read: Vec<usize> = match chosen {
        Some(d) => alloc::vec![d],
        None => (0..lists.len()).collect(),
    };
    for d in read {
        let entries = lists[d].as_array().map_or(&[][..], |l| l.as_slice());
        let mut list = EventList::default();
        for e in entries {
            list.see(&SnapshotEvent::of(e), e);
        }
        reader.begin(d, &list)?;
        for e in entries {
            reader.event(SnapshotEvent::of(e))?;
        }
    }
    reader.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::operations::TraceOp;
    use alloc::string::String;

    const CSV: &str = "Thread,Time,Action,Pointer,Size,Stream\n\
        0,10,allocate,0x1000,100,0x0\n\
        0,11,allocate,0x2000,200,0x0\n\
        0,12,free,0x1000,100,0x0\n\
        0,13,allocate,0x3000,300,0x7\n\
        0,14,free,0x9999,5,0x0\n\
        0,15,allocate failure,0x0,5,0x0\n";

    #[test]
    fn csv_assigns_reused_slots() {
        let t = parse_csv(CSV).unwrap();
        assert_eq!(
            t.ops,
            [
                TraceOp::Alloc { slot: 0, size: 100, stream: 0 },
                TraceOp::Alloc { slot: 1, size: 200, stream: 0 },
                TraceOp::Free { slot: 0 },
                TraceOp::Alloc { slot: 0, size: 300, stream: 7 },
            ]
        );
        assert_eq!(t.slots, 2);
        assert_eq!(t.report.unknown_frees, 1);
        assert_eq!(t.report.alloc_failures, 1);
        assert_eq!(t.report.live_at_end, 2);
        assert_eq!(t.report.streams, 2);
        assert_eq!(t.peak_requested(), 500);
        // The first pointer starts a 2 MiB segment that the others lie in.
        assert_eq!(t.segment_placements, [(0x1000, 2 << 20)]);
        assert!(t.placements_inferred);
    }

    /// A trace's pointers place its segments where none are recorded; a snapshot's own
    /// `segment_alloc` entries win over them.
    #[test]
    fn pointers_imply_segments_unless_the_snapshot_recorded_them() {
        let t = parse_csv(
            "Time,Action,Pointer,Size
1,allocate,0x7f0000000000,3145728
2,allocate,0x7f0000400000,100
                           3,allocate,0x7f0001400000,100
",
        )
        .unwrap();
        // 3 MiB makes a 20 MiB segment, which the second pointer lies in; the third is past it.
        assert_eq!(t.segment_placements, [(0x7f00_0000_0000, 20 << 20), (0x7f00_0140_0000, 2 << 20)]);
        let alloc = r#"{"action": "alloc", "addr": 8388608, "size": 100, "stream": 0}"#;
        let recorded = r#"{"action": "segment_alloc", "addr": 4194304, "size": 20971520, "stream": 0}"#;
        let bare = parse_trace(&alloc::format!(r#"{{"device_traces": [[{alloc}]]}}"#)).unwrap();
        assert_eq!((bare.segment_placements.as_slice(), bare.placements_inferred), (&[(8 << 20, 2 << 20)][..], true));
        let t = parse_trace(&alloc::format!(r#"{{"device_traces": [[{recorded}, {alloc}]]}}"#)).unwrap();
        assert_eq!((t.segment_placements.as_slice(), t.placements_inferred), (&[(4 << 20, 20 << 20)][..], false));
    }

    #[test]
    fn clock_times_and_reordered_columns() {
        let t = parse_csv("Action,Pointer,Size,Time\nallocate,0x10,512,01:00:00.5\n").unwrap();
        assert_eq!(t.times_us, [3_600_500_000]);
    }

    #[test]
    fn malformed_rows_name_their_line() {
        let e = parse_csv("Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0xZZ,5,0x0\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("pointer"));
        let e = parse_csv("Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,5\n").unwrap_err();
        assert!(e.message.contains("fields"));
        assert!(parse_csv("Pointer,Size\n").unwrap_err().message.contains("'Time'"));
        assert!(parse_csv("").is_err());
        let e = parse_csv("Thread,Time,Action,Pointer,Size,Stream\n0,1,steal,0x10,5,0x0\n").unwrap_err();
        assert!(e.message.contains("steal"));
    }

    #[test]
    fn snapshot_json_reads_device_traces() {
        let json = r#"{"segments": [], "device_traces": [[
            {"action": "segment_alloc", "addr": 0, "size": 2097152, "stream": 0},
            {"action": "alloc", "addr": 4096, "size": 100, "stream": 0, "time_us": 5},
            {"action": "free_requested", "addr": 4096, "size": 100, "stream": 0},
            {"action": "free_completed", "addr": 4096, "size": 100, "stream": 0},
            {"action": "oom", "addr": 0, "size": 100, "stream": 0}
        ]]}"#;
        let t = parse_trace(json).unwrap();
        assert_eq!(t.ops, [TraceOp::Alloc { slot: 0, size: 100, stream: 0 }, TraceOp::Free { slot: 0 }]);
        assert_eq!(t.report.alloc_failures, 1);
        assert_eq!(t.segment_placements, [(0, 2097152)]);
        assert!(parse_trace("{\"segments\": []}").unwrap_err().message.contains("device_traces"));
        assert!(parse_trace("{not json").is_err());
        // A bare list (the device_traces alone, say) is named as JSON, not as a CSV header.
        for list in ["[]", " [[{\"action\": \"alloc\"}]]"] {
            let e = parse_trace(list).unwrap_err();
            assert!(e.message.contains("a JSON list, not a PyTorch memory snapshot"), "{list}: {}", e.message);
        }
    }

    /// A free whose completion comes later (the block was used on another stream) becomes a
    /// deferred free on a lane, completed where the snapshot says; a free completed at once,
    /// or one in a snapshot that logs no completions at all, is a plain free.
    #[test]
    fn a_free_completed_later_waits_on_a_lane() {
        let entry = |action: &str, addr: u64| {
            alloc::format!(r#"{{"action": "{action}", "addr": {addr}, "size": 512, "stream": 0}}"#)
        };
        let snapshot = |entries: &[String]| alloc::format!(r#"{{"device_traces": [[{}]]}}"#, entries.join(","));
        let t = parse_trace(&snapshot(&[
            entry("alloc", 4096),
            entry("alloc", 8192),
            entry("free_requested", 4096),
            entry("free_requested", 8192),
            entry("free_completed", 8192),
            entry("alloc", 16384),
            entry("free_completed", 4096),
            entry("free_requested", 16384),
        ]))
        .unwrap();
        let (alloc, free) = (|slot| TraceOp::Alloc { slot, size: 512, stream: 0 }, |slot| TraceOp::Free { slot });
        assert_eq!(
            t.ops,
            [
                alloc(0),
                alloc(1),
                TraceOp::FreeDeferred { slot: 0, lane: 0 },
                free(1),
                alloc(1),
                TraceOp::FreeCompleted { lane: 0 },
                // Never completed in the snapshot: it waits to the end.
                TraceOp::FreeDeferred { slot: 1, lane: 0 },
            ]
        );
        assert_eq!((t.lanes, t.report.deferred_frees, t.report.frees), (1, 2, 3));
        assert_eq!(t.ops.len(), t.times_us.len());
        assert!(t.describe().contains("2 frees that waited for another stream"), "{}", t.describe());
        let older =
            parse_trace(&snapshot(&[entry("alloc", 4096), entry("alloc", 8192), entry("free_requested", 4096)]));
        assert_eq!(older.unwrap().ops, [alloc(0), alloc(1), free(0)]);
    }

    /// Two GPUs' events read as one device's doubled their memory (the browser demo read
    /// every list); now one device is read, and which one is never guessed.
    #[test]
    fn a_snapshot_is_read_one_device_at_a_time() {
        // `n` allocations, then `segments` recorded segment placements.
        let list = |n: u64, segments: u64| {
            let mut events: Vec<String> = (0..n)
                .map(|i| alloc::format!(r#"{{"action": "alloc", "addr": {}, "size": 512}}"#, 4096 * (i + 1)))
                .collect();
            events.extend((0..segments).map(|i| {
                alloc::format!(r#"{{"action": "segment_alloc", "addr": {}, "size": 2097152}}"#, (i + 1) << 30)
            }));
            alloc::format!("[{}]", events.join(","))
        };
        let snapshot = |lists: &[String]| alloc::format!(r#"{{"device_traces": [{}]}}"#, lists.join(","));
        let both = snapshot(&[list(1, 2), list(3, 1)]);
        let e = parse_trace(&both).unwrap_err();
        assert_eq!(e.kind, TraceErrorKind::DeviceNotChosen { devices: alloc::vec![0, 1] });
        assert_eq!(
            e.to_string(),
            "the snapshot holds allocation events of devices 0 and 1; a replay simulates one GPU"
        );
        let one = parse_device_trace(&both, Some(1)).unwrap();
        assert_eq!((one.ops.len(), one.device, one.segment_placements.len()), (3, Some(1), 1));
        let zero = parse_device_trace(&both, Some(0)).unwrap();
        assert_eq!((zero.ops.len(), zero.segment_placements.len()), (1, 2), "placements are the device's own");
        let each = parse_each_device(&both).unwrap();
        assert_eq!(each.iter().map(|t| (t.device, t.ops.len())).collect::<Vec<_>>(), [(Some(0), 1), (Some(1), 3)]);
        let e = parse_device_trace(&both, Some(2)).unwrap_err();
        assert_eq!(e.kind, TraceErrorKind::NoSuchDevice);
        assert!(e.message.contains("records devices 0 to 1 (with allocation events: 0 and 1)"), "{e}");
        // Allocations on one device only (the other's list holds a free alone): that one,
        // without asking; asking for the other is refused.
        let second = snapshot(&[r#"[{"action": "free_requested", "addr": 8192, "size": 512}]"#.into(), list(2, 0)]);
        assert_eq!(parse_trace(&second).unwrap().device, Some(1));
        assert_eq!(parse_each_device(&second).unwrap().len(), 1);
        assert!(parse_device_trace(&second, Some(0)).unwrap_err().message.contains("no allocation events of device 0"));
        // A device whose only allocation has zero bytes has nothing to replay: the other one
        // is read, as the replay skips zero-byte allocations.
        let zero_bytes = r#"[{"action": "alloc", "addr": 4096, "size": 0, "stream": 0}]"#.to_string();
        let third = snapshot(&[zero_bytes, list(2, 0)]);
        assert_eq!(parse_trace(&third).unwrap().device, Some(1));
        assert_eq!(parse_each_device(&third).unwrap().iter().map(|t| t.device).collect::<Vec<_>>(), [Some(1)]);
        // One list: no device to name.
        assert_eq!(parse_device_trace(&snapshot(&[list(2, 0)]), Some(0)).unwrap().device, None);
        let e = parse_device_trace(r#"{"device_traces": []}"#, Some(0)).unwrap_err();
        assert_eq!(e.message, "device 0 asked for, but the snapshot records no devices");
        let three = snapshot(&[list(1, 0), list(1, 0), list(1, 0)]);
        assert!(parse_trace(&three).unwrap_err().message.contains("devices 0, 1 and 2;"));
        // Every list is checked, chosen or not.
        let e = parse_device_trace(&alloc::format!(r#"{{"device_traces": [5, {}]}}"#, list(1, 0)), Some(1));
        assert_eq!(e.unwrap_err().message, "device_traces[0] is not a list");
        let csv = "Time,Action,Pointer,Size\n1,allocate,0x10,512\n";
        assert_eq!(parse_device_trace(csv, Some(0)).unwrap_err().kind, TraceErrorKind::NoSuchDevice);
        assert_eq!(parse_each_device(csv).unwrap().len(), 1);
        assert_eq!(parse_trace("{not json").unwrap_err().kind, TraceErrorKind::Invalid);
    }

    /// A snapshot past the limits is refused naming the limit: nesting before serde_json
    /// recurses, events before their operations are held, text before it is parsed.
    #[test]
    fn a_snapshot_past_a_limit_names_it() {
        let limits = TraceLimits { bytes: 1 << 20, depth: 6, events: 2 };
        let events = |n: usize| {
            let e = r#"{"action": "alloc", "addr": 4096, "size": 512, "frames": [{"name": "f"}]}"#;
            alloc::format!(r#"{{"device_traces": [[{}]]}}"#, alloc::vec![e; n].join(","))
        };
        assert_eq!(parse_device_trace_within(&events(1), None, &limits).unwrap().ops.len(), 1);
        let kind = |text: &str, l: &TraceLimits| parse_device_trace_within(text, None, l).unwrap_err().kind;
        assert_eq!(kind(&events(3), &limits), TraceErrorKind::Limit(Limit::Events(2)));
        let deep = alloc::format!(r#"{{"device_traces": [[{}1{}]]}}"#, "[".repeat(5), "]".repeat(5));
        assert_eq!(kind(&deep, &limits), TraceErrorKind::Limit(Limit::Depth(6)));
        assert_eq!(kind(&events(1), &TraceLimits { bytes: 10, ..limits }), TraceErrorKind::Limit(Limit::Bytes(10)));
        let each = parse_each_device_within(&events(3), &limits).unwrap_err();
        assert_eq!(each.kind, TraceErrorKind::Limit(Limit::Events(2)));
    }

    #[test]
    fn zero_sizes_and_repeated_pointers_are_counted() {
        let t =
            parse_csv("Time,Action,Pointer,Size\n1,allocate,0x10,0\n2,allocate,0x20,5\n3,allocate,0x20,6\n").unwrap();
        assert_eq!(t.report.zero_size, 1);
        assert_eq!(t.report.implicit_frees, 1);
        assert_eq!(t.ops.len(), 3);
    }

    /// Each operation keeps its line or event, and each kind of skipped row the place of its
    /// first: a double free is told from a free of a pointer never seen, and an unknown
    /// snapshot action is counted, not passed over in silence.
    #[test]
    fn operations_and_skipped_rows_keep_where_they_came_from() {
        let t = parse_csv(
            "Time,Action,Pointer,Size\n\
             1,allocate,0x10,512\n\
             \n\
             2,free,0x10,512\n\
             3,free,0x10,512\n\
             4,free,0x99,512\n\
             5,allocate,0x20,512\n\
             6,allocate,0x20,512\n",
        )
        .unwrap();
        let lines: Vec<Position> = [2, 4, 7, 8, 8].into_iter().map(Position::Line).collect();
        assert_eq!(t.positions, lines, "the implicit free and its allocation both come from line 8");
        let r = &t.report;
        assert_eq!((r.double_frees, r.first_double_free), (1, Some(Position::Line(5))));
        assert_eq!((r.unknown_frees, r.first_unknown_free), (1, Some(Position::Line(6))));
        assert_eq!((r.implicit_frees, r.first_implicit_free), (1, Some(Position::Line(8))));
        assert!(t.describe().contains("1 double frees skipped"), "{}", t.describe());
        let snap = r#"{"device_traces": [[
            {"action": "segment_map", "addr": 0, "size": 2097152},
            {"action": "alloc", "addr": 4096, "size": 512},
            {"action": "allocate", "addr": 8192, "size": 512},
            {"action": "free_requested", "addr": 4096, "size": 512},
            {"addr": 8192, "size": 512}
        ]]}"#;
        let t = parse_trace(snap).unwrap();
        assert_eq!(t.positions, [Position::Event(1), Position::Event(3)]);
        assert_eq!(t.report.unknown_actions, 2, "segment_map is known; 'allocate' and a missing action are not");
        let first = t.report.first_unknown_action.clone().unwrap();
        assert_eq!((first.at, first.action.as_str()), (Position::Event(2), "allocate"));
        let value: serde_json::Value = serde_json::from_str(snap).unwrap();
        let from_value = parse_snapshot_value(&value, None).unwrap();
        assert_eq!((from_value.ops, from_value.report), (t.ops, t.report));
    }
}
