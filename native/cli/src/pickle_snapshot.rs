//! PyTorch's memory snapshots as pickles (`torch.cuda.memory._dump_snapshot("x.pickle")`
//! writes `pickle.dump(snapshot, f)`), to and from the JSON value model the core's snapshot
//! reader takes, so a pickle and the same data as JSON give one trace.
//!
//! Reading is the core's own machine's (`cachalot_core::trace::pickle`, which says why, and
//! which the browser runs too); writing is serde-pickle's.
//!
//! Invariants: reading never imports or calls anything, keeps the reader's limits, and
//! every pickle value becomes the JSON value Python's `json.dumps` would write for it
//! (tuples and sets as lists, dict keys as strings, integers past 64 bits as floats); written
//! pickles hold only dicts, lists, strings, numbers, booleans and None, which any Python
//! `pickle.load` reads back.

use std::io::{self, BufRead, Read};

use cachalot_core::trace::pickle::{self, PickleBytes, PickleError};
use cachalot_core::trace::{EventList, FrameTable, Limit, SnapshotEvent, TraceLimits};
use serde_json::Value as Json;
use serde_pickle::SerOptions;

/// True when `bytes` start as a pickle of protocol 2 or later does (the PROTO opcode): what
/// `pickle.dump` writes by default (the core's test, [`cachalot_core::trace::is_pickle`]).
pub fn is_pickle(bytes: &[u8]) -> bool {
    cachalot_core::trace::is_pickle(bytes)
}

/// The JSON value of the pickle `bytes` within the default limits; `what` names the file in
/// messages.
pub fn to_json(bytes: &[u8], what: &str) -> Result<Json, String> {
    to_json_within(bytes, what, &TraceLimits::DEFAULT)
}

/// The JSON value of the pickle `bytes` within `limits`: its nesting, and its values written
/// out as JSON (a value the memo or DUP names counted at each use) within `limits.bytes`.
pub fn to_json_within(bytes: &[u8], what: &str, limits: &TraceLimits) -> Result<Json, String> {
    pickle::read(bytes, limits).map_err(|e| named(e, what, limits))
}

/// The JSON value of the pickle `bytes` within `limits`, as [`to_json_within`] gives it but
/// each `frames` entry its stack id in `frames`, interned as the value is built (so the
/// value never holds the frames, most of a snapshot's bytes).
pub fn to_slim_json_within(
    bytes: &[u8],
    what: &str,
    limits: &TraceLimits,
    frames: &mut FrameTable,
) -> Result<Json, String> {
    pickle::read_slim(bytes, limits, frames).map_err(|e| named(e, what, limits))
}

/// The bytes of a pickle read from `input` as the machine asks for them, so the file is never
/// held whole; a read that fails keeps its error for the caller to name.
pub struct Streamed<R> {
    input: R,
    buf: Vec<u8>,
    /// Why the bytes stopped, when it was the input's own error (a limit, gzip), not the end.
    pub error: Option<io::Error>,
}

impl<R: BufRead> Streamed<R> {
    /// Reads `input`.
    pub fn new(input: R) -> Self {
        Streamed { input, buf: Vec::new(), error: None }
    }
}

impl<R: BufRead> PickleBytes for Streamed<R> {
    fn next(&mut self, n: usize) -> Option<&[u8]> {
        self.buf.clear();
        // Most opcodes take a few bytes, and the buffer already holds them.
        match self.input.fill_buf() {
            Ok(held) if held.len() >= n => {
                self.buf.extend_from_slice(&held[..n]);
                self.input.consume(n);
                return Some(&self.buf);
            }
            Ok(_) => {}
            Err(e) => {
                self.error = Some(e);
                return None;
            }
        }
        // A long string: grown as its bytes come, so a length the file does not hold costs
        // nothing.
        if self.buf.capacity() > 1 << 20 {
            self.buf = Vec::new();
        }
        match (&mut self.input).take(n as u64).read_to_end(&mut self.buf) {
            Ok(got) if got == n => Some(&self.buf),
            Ok(_) => None,
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }
}

/// The JSON value of the pickle read from `input` within `limits`, each `frames` entry its
/// stack id in `frames`, as [`to_slim_json_within`] gives it, but the pickle never held whole
/// and each `frames` list interned as its dict is read. Err holds the input's own error when
/// reading it failed (for the caller to name), else the message.
pub fn read_slim_within(
    input: impl BufRead,
    what: &str,
    limits: &TraceLimits,
    frames: &mut FrameTable,
) -> Result<Json, Result<io::Error, String>> {
    let mut bytes = Streamed::new(input);
    let read = pickle::read_slim_from(&mut bytes, limits, frames);
    match (read, bytes.error) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some(e)) => Err(Ok(e)),
        (Err(e), None) => Err(Err(named(e, what, limits))),
    }
}

/// What is left of a snapshot once its history is handed on: the value of the rest, and each
/// device's list (`None`: nothing was handed on, and the value holds the history).
pub type SnapshotRest = (Json, Option<Vec<EventList>>);

/// The pickle read from `input` as [`read_slim_within`] reads it, each event of the snapshot's
/// history handed to `keep(d, e)` as it is read, not kept (`pickle_events.rs` in the core):
/// the value of the rest, and each device's list when the history was handed on (`None`: the
/// pickle was laid out otherwise, and the value holds it).
pub fn read_events_within(
    input: impl BufRead,
    what: &str,
    limits: &TraceLimits,
    frames: &mut FrameTable,
    keep: &mut dyn FnMut(usize, SnapshotEvent),
) -> Result<SnapshotRest, Result<io::Error, String>> {
    let mut bytes = Streamed::new(input);
    let read = pickle::read_events_from(&mut bytes, limits, frames, keep);
    match (read, bytes.error) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some(e)) => Err(Ok(e)),
        (Err(e), None) => Err(Err(named(e, what, limits))),
    }
}

/// A pickle reader's error as the tool says it, naming the file and the flag to raise.
fn named(e: PickleError, what: &str, limits: &TraceLimits) -> String {
    match e {
        PickleError::Unreadable(m) => format!("{what}: not a readable pickle: {m}"),
        PickleError::Limit(Limit::Depth(_)) => format!(
            "{what}: the pickle nests values deeper than {} (the limit on nesting); raise the limit with --max-depth N",
            limits.depth
        ),
        PickleError::Limit(_) => format!(
            "{what}: the pickle's values come to more than {} bytes written out, each use of a shared value \
             counted (the limit on bytes read); raise the limit with --max-bytes SIZE",
            limits.bytes
        ),
    }
}

/// `value` as a pickle (protocol 3, which every Python 3 reads).
pub fn from_json(value: &Json) -> Result<Vec<u8>, String> {
    serde_pickle::to_vec(value, SerOptions::new()).map_err(|e| format!("cannot write the snapshot as a pickle: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pickle written here reads back as the same value, and is told from text.
    #[test]
    fn a_snapshot_round_trips_through_a_pickle() {
        let v: Json = serde_json::from_str(
            r#"{"segments": [], "device_traces": [[{"action": "alloc", "addr": 18446744073709551615,
                "size": 512, "frames": [{"filename": "a.py", "line": 3, "name": "f"}], "x": null, "t": 1.5}]]}"#,
        )
        .unwrap();
        let bytes = from_json(&v).unwrap();
        assert!(is_pickle(&bytes));
        assert!(!is_pickle(b"{\"segments\": []}") && !is_pickle(b"Thread,Time"));
        assert_eq!(to_json(&bytes, "t").unwrap(), v);
        assert!(to_json(&[0x80, 4, 0xff], "t").unwrap_err().starts_with("t: not a readable pickle"));
    }
}
