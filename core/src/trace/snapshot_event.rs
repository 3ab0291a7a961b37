//! One event of a snapshot's history (`device_traces[d][i]`) as the reader needs it: its
//! action, the four numbers it may carry, and its stack id, in a fixed record of
//! [`SnapshotEvent::BYTES`] bytes. A reader that streams a snapshot keeps its events so, out
//! of memory, instead of as JSON values (hundreds of bytes each, and the whole history at
//! once); what a record drops of the value (the text of an unknown action, a field's value
//! that is not a whole number) is what only a message needs, and [`EventList`] keeps it
//! for the first event that needs it.
//!
//! Invariants: [`SnapshotEvent::of`] reads a value as the snapshot reader always read one (a
//! field that is absent, a whole number, or anything else); `decode(encode(e)) == e`.

use serde_json::Value;

/// What an event does, by its `action`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Action {
    /// `alloc`: a block handed out.
    Alloc,
    /// `free_requested`: the program freed a block.
    FreeRequested,
    /// `free_completed`: its memory may be used again.
    FreeCompleted,
    /// `oom`: an allocation failed.
    Oom,
    /// `segment_alloc`: a segment the run made, and where.
    SegmentAlloc,
    /// An action the replay makes anew or that carries no operation (`segment_free`,
    /// `segment_map`, `segment_unmap`, `snapshot`).
    Ignored,
    /// Any other action, or none.
    #[default]
    Unknown,
}

impl Action {
    /// The action named `name`.
    pub fn named(name: &str) -> Action {
        match name {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "oom" => Action::Oom,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" | "segment_map" | "segment_unmap" | "snapshot" => Action::Ignored,
            _ => Action::Unknown,
        }
    }

    /// The name messages give it (`Unknown` has none of its own).
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::Oom => "oom",
            Action::SegmentAlloc => "segment_alloc",
            Action::Ignored | Action::Unknown => "",
        }
    }

    const ALL: [Action; 7] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::Oom,
        Action::SegmentAlloc,
        Action::Ignored,
        Action::Unknown,
    ];
}

/// A numeric field of an event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Field {
    /// Not in the event.
    #[default]
    Absent,
    /// A whole number.
    Number(u64),
    /// Present, but not a whole number (a string, a float, a negative number...).
    Other,
}

impl Field {
    fn of(v: Option<&Value>) -> Field {
        match v {
            None => Field::Absent,
            Some(x) => x.as_u64().map_or(Field::Other, Field::Number),
        }
    }

    /// The number, if the field is one.
    pub fn number(self) -> Option<u64> {
        match self {
            Field::Number(n) => Some(n),
            _ => None,
        }
    }
}

/// One history event, without its frames (which are a stack id).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotEvent {
    /// What it does.
    pub action: Action,
    /// `addr`: the block's or segment's address.
    pub addr: Field,
    /// `size`: its bytes.
    pub size: Field,
    /// `stream`: the stream it was allocated on.
    pub stream: Field,
    /// `time_us`: when, in microseconds.
    pub time_us: Field,
    /// The event's stack in the reader's [`FrameTable`] (0: none recorded).
    pub stack: u32,
}

impl SnapshotEvent {
    /// The size of an encoded event.
    pub const BYTES: usize = 40;

    /// The event `e` of a snapshot's value, its stack the id that `slim_json` put in place of
    /// its `frames` (0 where there is none: frames left as a list are not read here).
    pub fn of(e: &Value) -> SnapshotEvent {
        let stack = e.get("frames").and_then(Value::as_u64).and_then(|id| u32::try_from(id).ok()).unwrap_or(0);
        SnapshotEvent {
            action: Action::named(action_of(e)),
            addr: Field::of(e.get("addr")),
            size: Field::of(e.get("size")),
            stream: Field::of(e.get("stream")),
            time_us: Field::of(e.get("time_us")),
            stack,
        }
    }

    /// The record of the event: action, the fields' kinds (two bits each), the stack id, then
    /// the four numbers, little-endian.
    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0] = Action::ALL.iter().position(|&a| a == self.action).unwrap_or(6) as u8;
        let fields = [self.addr, self.size, self.stream, self.time_us];
        for (k, f) in fields.iter().enumerate() {
            let (kind, n) = match *f {
                Field::Absent => (0u8, 0),
                Field::Number(n) => (1, n),
                Field::Other => (2, 0),
            };
            out[1] |= kind << (2 * k);
            out[8 + 8 * k..16 + 8 * k].copy_from_slice(&n.to_le_bytes());
        }
        out[4..8].copy_from_slice(&self.stack.to_le_bytes());
        out
    }

    /// The event a record holds (see [`SnapshotEvent::encode`]); bytes no encoding makes read
    /// as an unknown action and fields that are not numbers.
    pub fn decode(bytes: &[u8; Self::BYTES]) -> SnapshotEvent {
        let field = |k: usize| {
            let mut n = [0u8; 8];
            n.copy_from_slice(&bytes[8 + 8 * k..16 + 8 * k]);
            match (bytes[1] >> (2 * k)) & 3 {
                0 => Field::Absent,
                1 => Field::Number(u64::from_le_bytes(n)),
                _ => Field::Other,
            }
        };
        let mut stack = [0u8; 4];
        stack.copy_from_slice(&bytes[4..8]);
        SnapshotEvent {
            action: Action::ALL.get(usize::from(bytes[0])).copied().unwrap_or(Action::Unknown),
            addr: field(0),
            size: field(1),
            stream: field(2),
            time_us: field(3),
            stack: u32::from_le_bytes(stack),
        }
    }
}

/// A history entry's `action`, or "" for an entry without one.
pub(crate) fn action_of(e: &Value) -> &str {
    e.get("action").and_then(|a| a.as_str()).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_gives_back_the_event() {
        let values = [
            r#"{"action": "alloc", "addr": 4096, "size": 512, "stream": 7, "time_us": 99, "frames": 12}"#,
            r#"{"action": "free_requested", "addr": 18446744073709551615, "size": -1, "stream": "s"}"#,
            r#"{"action": "segment_map", "addr": 1.5}"#,
            r#"{"action": "allocate"}"#,
            r#"{"addr": 1}"#,
        ];
        for text in values {
            let v: Value = serde_json::from_str(text).unwrap();
            let e = SnapshotEvent::of(&v);
            assert_eq!(SnapshotEvent::decode(&e.encode()), e, "{text}");
        }
        let v: Value = serde_json::from_str(values[1]).unwrap();
        let e = SnapshotEvent::of(&v);
        assert_eq!(
            (e.action, e.addr, e.size, e.stream, e.time_us),
            (Action::FreeRequested, Field::Number(u64::MAX), Field::Other, Field::Other, Field::Absent)
        );
        let first: Value = serde_json::from_str(values[0]).unwrap();
        assert_eq!(SnapshotEvent::of(&first).stack, 12);
        assert_eq!(SnapshotEvent::decode(&[0xff; SnapshotEvent::BYTES]).action, Action::Unknown);
    }
}
