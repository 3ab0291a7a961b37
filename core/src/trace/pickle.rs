//! A small pickle machine of our own over the opcodes `pickle.dump` writes for PyTorch's
//! memory snapshots (protocols 2 to 5: dicts, lists, tuples, sets, strings, bytes, integers,
//! floats, booleans, None, the memo and frames), giving the JSON value `json.dumps` would.
//!
//! It lives in the core (no_std + alloc), so the CLI and the browser read a pickle with one
//! machine under the same [`TraceLimits`].
//!
//! Why not serde-pickle, which read these before: its conversion recurses once per level of
//! nesting with no bound (10,000 nested lists in 20 KB overflowed the stack), and every memo
//! reference or DUP clones the value it names, so a 1 KiB string doubled 40 times through the
//! memo asked for a terabyte. No maintained crate bounds either.
//!
//! Invariants: the machine holds memory in proportion to the file: containers live in one
//! arena and the stack, memo and containers hold arena ids, so a memo reference or a DUP
//! costs one id however large what it names; nothing is imported or called (GLOBAL, REDUCE
//! and the like are refused); the JSON written out counts every use of a shared value in
//! full against `TraceLimits::bytes`, and its nesting against `TraceLimits::depth`, before
//! it is allocated, so a reference cycle or a bomb of references ends in a `Limit`, not in
//! memory taken; the conversion recurses at most `depth` deep.
//!
//! Read slim (with a [`FrameTable`]), a `frames` list of frame dicts is interned the moment it
//! is set in its dict, measured then (its size and nesting kept with its stack and counted at
//! each use, as the list's own would be), and freed with its frames unless the memo or a DUP
//! holds them too: an item neither memoized nor DUP'd is held in one place only, so once that
//! place takes its stack nothing can read it. A shared list is forwarded to its stack, so a
//! memo reference to it reads as the frames the table gives back (or the list itself, where
//! the table cut the stack). A frame dict is read as it stands when its list is set, which is
//! when `pickle.dump` has written it whole.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use serde_json::Value as Json;

use crate::trace::frame_table::FrameTable;
use crate::trace::limits::{Limit, TraceLimits};
pub use crate::trace::pickle_arena::PickleError;
use crate::trace::pickle_arena::{bad, measure, Arena, Stacked, Value, DICT, LIST};
pub use crate::trace::pickle_bytes::PickleBytes;
use crate::trace::pickle_events::{Parts, PickleEvents};
use crate::trace::pickle_writer::Writer;
use crate::trace::snapshot_event::SnapshotEvent;
use crate::trace::snapshot_reader::EventList;

/// Reads the pickle `bytes` into its JSON value within `limits`.
pub fn read(bytes: &[u8], limits: &TraceLimits) -> Result<Json, PickleError> {
    read_into(bytes, limits, None)
}

/// Reads the pickle `bytes` as [`read`] does, but every `frames` entry of a dict becomes its
/// stack id in `frames` (as `slim_json` reads JSON): the value then never holds a snapshot's
/// frames, most of its bytes.
pub fn read_slim(bytes: &[u8], limits: &TraceLimits, frames: &mut FrameTable) -> Result<Json, PickleError> {
    read_into(bytes, limits, Some(frames))
}

/// [`read_slim`] from bytes read as the machine asks for them: with a stream, the pickle is
/// never held whole, and a `frames` list is interned the moment it is set in its dict, its
/// frames freed then unless the memo or a DUP holds them too (what is left of a snapshot is
/// its events and segments, as `slim_json` keeps of JSON).
pub fn read_slim_from(
    bytes: impl PickleBytes,
    limits: &TraceLimits,
    frames: &mut FrameTable,
) -> Result<Json, PickleError> {
    read_into(bytes, limits, Some(frames))
}

/// Reads a pickled snapshot as [`read_slim_from`] does,
/// handing each event of `device_traces[d]` to `keep(d, e)` as it is read. Returns the value
/// of the rest and, when the history was handed on, each device's [`EventList`] (the value's
/// `device_traces` then holds empty lists); `None` when the pickle was laid out otherwise and
/// nothing was handed on (the value then holds the history, as [`read_slim_from`] gives it).
pub fn read_events_from(
    bytes: impl PickleBytes,
    limits: &TraceLimits,
    frames: &mut FrameTable,
    keep: &mut dyn FnMut(usize, SnapshotEvent),
) -> Result<(Json, Option<Vec<EventList>>), PickleError> {
    let (json, events) = read_machine(bytes, limits, Some(frames), Some(PickleEvents::new(keep)))?;
    match events {
        Some(events) => events.finish(&json).map(|lists| (json, lists)),
        None => Ok((json, None)),
    }
}

fn read_into(
    bytes: impl PickleBytes,
    limits: &TraceLimits,
    table: Option<&mut FrameTable>,
) -> Result<Json, PickleError> {
    read_machine(bytes, limits, table, None).map(|(json, _)| json)
}

/// Runs the machine over `bytes` and writes out what it built (see [`read_into`]), handing a
/// snapshot's events to `events` when given.
pub(crate) fn read_machine<'a>(
    bytes: impl PickleBytes,
    limits: &'a TraceLimits,
    table: Option<&'a mut FrameTable>,
    events: Option<PickleEvents<'a>>,
) -> Result<(Json, Option<PickleEvents<'a>>), PickleError> {
    let mut m = Machine {
        bytes,
        at: 0,
        arena: Arena::default(),
        stack: Vec::new(),
        memo: BTreeMap::new(),
        memo_next: 0,
        limits,
        table,
        events,
    };
    let top = m.run()?;
    let mut seen = BTreeMap::new();
    let (size, _) = measure(&m.arena, top, limits.depth, &mut seen).map_err(|e| match e {
        PickleError::Limit(Limit::Depth(_)) => PickleError::Limit(Limit::Depth(limits.depth)),
        other => other,
    })?;
    if size > limits.bytes {
        return Err(PickleError::Limit(Limit::Bytes(limits.bytes)));
    }
    let Machine { bytes, mut arena, table, stack, memo, events, .. } = m;
    // The memo and the stack let go: a container that one container alone holds now (all
    // `pickle.dump` memoized but used once) is taken out as it is written, not copied.
    drop((bytes, stack, memo));
    for ((dict, id), (_, _, uses)) in seen {
        arena.shared[if dict { DICT } else { LIST }][id] = uses > 1;
    }
    // Room the arena grew into and will not use: the value is built beside it.
    arena.strings.shrink_to_fit();
    arena.dicts.shrink_to_fit();
    arena.lists.shrink_to_fit();
    let mut out = Writer { arena: &mut arena, table };
    Ok((out.json(top, true, true), events))
}

pub(crate) struct Machine<'a, B> {
    bytes: B,
    at: usize,
    pub(crate) arena: Arena,
    pub(crate) stack: Vec<Value>,
    pub(crate) memo: BTreeMap<u64, Value>,
    /// The index MEMOIZE gives next (the memo's size, but for the events taken out of it).
    memo_next: u64,
    pub(crate) limits: &'a TraceLimits,
    /// Where `frames` lists are interned as they are set in a dict; none for [`read`].
    pub(crate) table: Option<&'a mut FrameTable>,
    /// Where a snapshot's events are handed on as they are read ([`read_events_from`]).
    pub(crate) events: Option<PickleEvents<'a>>,
}

impl<B: PickleBytes> Machine<'_, B> {
    fn take(&mut self, n: u64) -> Result<&[u8], PickleError> {
        let n = usize::try_from(n).map_err(|_| bad("a length past the end of the data"))?;
        let s = self.bytes.next(n).ok_or_else(|| bad("truncated data"))?;
        self.at += n;
        Ok(s)
    }

    fn uint(&mut self, n: u64) -> Result<u64, PickleError> {
        Ok(self.take(n)?.iter().rev().fold(0, |acc, &b| acc << 8 | u64::from(b)))
    }

    fn pop(&mut self) -> Result<Value, PickleError> {
        match self.stack.pop() {
            Some(Value::Mark) | None => Err(bad("stack underflow")),
            Some(v) => Ok(v),
        }
    }

    /// Hands `items`, appended to the device list `list`, on as events (see `pickle_events`).
    fn hand_on(&mut self, list: usize, items: Vec<Value>) -> Result<(), PickleError> {
        let Some(events) = self.events.as_mut() else { return Err(bad("events with nowhere to go")) };
        let parts = Parts {
            arena: &mut self.arena,
            table: self.table.as_deref_mut(),
            memo: &mut self.memo,
            limits: self.limits,
        };
        events.hand_on(list, items, parts)
    }

    fn top(&self) -> Result<Value, PickleError> {
        self.stack.last().copied().filter(|v| !matches!(v, Value::Mark)).ok_or_else(|| bad("stack underflow"))
    }

    /// The values above the topmost MARK, which is taken off.
    fn since_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let mark = self.stack.iter().rposition(|v| matches!(v, Value::Mark)).ok_or_else(|| bad("no MARK"))?;
        let items = self.stack.split_off(mark + 1);
        self.stack.pop();
        Ok(items)
    }

    fn string(&mut self, n: u64) -> Result<(), PickleError> {
        let s = String::from_utf8_lossy(self.take(n)?).into_owned();
        let v = self.arena.string(s);
        self.stack.push(v);
        Ok(())
    }

    fn list(&mut self, items: Vec<Value>) {
        let v = self.arena.list(items);
        self.stack.push(v);
    }

    fn dict(&mut self, items: Vec<Value>) -> Result<(), PickleError> {
        if items.len() % 2 != 0 {
            return Err(bad("a dict's items are not key, value pairs"));
        }
        let pairs = self.pairs(items);
        let v = self.arena.dict(pairs);
        self.stack.push(v);
        Ok(())
    }

    /// Adds `items` to the list or dict (or set) `target`.
    fn extend(&mut self, target: Value, items: Vec<Value>, pairs: bool) -> Result<(), PickleError> {
        match (self.arena.resolve(target), pairs) {
            (Value::List(id), false) if self.events.as_ref().is_some_and(|e| e.is_event_list(id)) => {
                self.hand_on(id, items)?
            }
            (Value::List(id), false) => self.arena.lists[id].extend(items),
            (Value::Dict(id), true) if items.len() % 2 == 0 => {
                let pairs = self.pairs(items);
                self.arena.dicts[id].extend(pairs)
            }
            _ => return Err(bad("items added to something that is not a list or dict")),
        }
        Ok(())
    }

    /// `items` as a dict's key, value pairs, each `frames` list interned as it is set (when
    /// reading slim).
    fn pairs(&mut self, items: Vec<Value>) -> Vec<(Value, Value)> {
        let mut pairs: Vec<(Value, Value)> = items.chunks(2).map(|p| (p[0], p[1])).collect();
        if self.table.is_some() {
            for (k, item) in &mut pairs {
                if matches!(*k, Value::Str(id) if self.arena.strings[id] == "frames") {
                    *item = self.intern(*item);
                }
            }
        }
        pairs
    }

    /// `item`, set as a dict's `frames`, as its stack ([`Value::Stack`]) when it is a list of
    /// frames within the limits, its frames then freed unless held elsewhere; otherwise as it
    /// is (interned when the value is written out, as before).
    fn intern(&mut self, item: Value) -> Value {
        let Value::List(list) = self.arena.resolve(item) else { return item };
        let Some(size) = self.arena.flat_frames(list) else { return item };
        // A list of dicts of scalars: as `measure` would find it.
        let height = if self.arena.lists[list].is_empty() { 1 } else { 2 };
        if size > self.limits.bytes || height > self.limits.depth {
            return item;
        }
        let Some(table) = self.table.as_deref_mut() else { return item };
        let json = Writer { arena: &mut self.arena, table: None }.json(item, false, false);
        let id = table.stack_of_frames(&json);
        let whole = table.kept_whole(id);
        let held_elsewhere = !whole || self.arena.shared[LIST][list];
        let k = self.arena.stack(Stacked { id, size, height, list: (!whole).then_some(list), held_elsewhere });
        if whole {
            // The table gives these frames back exactly: the list's own are no longer needed.
            for f in core::mem::take(&mut self.arena.lists[list]) {
                self.arena.drop_unshared(f);
            }
            if self.arena.shared[LIST][list] {
                self.arena.forward(list, k);
            } else {
                self.arena.free[LIST].push(list);
            }
        }
        Value::Stack(k)
    }

    fn integer(&mut self, n: u64) -> Result<(), PickleError> {
        let b = self.take(n)?;
        let negative = b.last().is_some_and(|&x| x & 0x80 != 0);
        let v = if b.len() <= 8 {
            let mut raw = [if negative { 0xff } else { 0 }; 8];
            raw[..b.len()].copy_from_slice(b);
            Value::Int(i64::from_le_bytes(raw))
        } else if !negative && b[8..].iter().all(|&x| x == 0) {
            Value::UInt(b[..8].iter().rev().fold(0, |acc, &x| acc << 8 | u64::from(x)))
        } else {
            // Past 64 bits: a float, as Python's json would hold it in JavaScript.
            let magnitude = b.iter().rev().fold(0f64, |acc, &x| acc * 256.0 + f64::from(x));
            let span = b.iter().fold(1f64, |acc, _| acc * 256.0);
            Value::Big(if negative { magnitude - span } else { magnitude })
        };
        self.stack.push(v);
        Ok(())
    }

    fn run(&mut self) -> Result<Value, PickleError> {
        loop {
            let op = *self.take(1)?.first().unwrap_or(&0);
            match op {
                0x80 => {
                    self.take(1)?;
                } // PROTO
                0x95 => {
                    self.take(8)?;
                } // FRAME
                b'.' => return self.pop(), // STOP
                b'(' => self.stack.push(Value::Mark),
                b'0' => {
                    self.pop()?;
                } // POP
                b'1' => {
                    self.since_mark()?;
                } // POP_MARK
                b'2' => {
                    let v = self.top()?;
                    self.arena.share(v);
                    if let Some(events) = self.events.as_mut() {
                        events.note_reference(v);
                    }
                    self.stack.push(v)
                } // DUP
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'J' => {
                    let v = self.uint(4)? as u32 as i32;
                    self.stack.push(Value::Int(i64::from(v)))
                }
                b'K' => {
                    let v = self.uint(1)?;
                    self.stack.push(Value::Int(v as i64))
                }
                b'M' => {
                    let v = self.uint(2)?;
                    self.stack.push(Value::Int(v as i64))
                }
                0x8a => {
                    let n = self.uint(1)?;
                    self.integer(n)?
                } // LONG1
                0x8b => {
                    let n = self.uint(4)?;
                    self.integer(n)?
                } // LONG4
                b'G' => {
                    let v = self.uint(8)?.swap_bytes();
                    self.stack.push(Value::Float(f64::from_bits(v)))
                }
                0x8c | b'C' => {
                    let n = self.uint(1)?;
                    self.string(n)?
                } // SHORT_BINUNICODE, SHORT_BINBYTES
                b'X' | b'B' => {
                    let n = self.uint(4)?;
                    self.string(n)?
                } // BINUNICODE, BINBYTES
                0x8d | 0x8e | 0x96 => {
                    let n = self.uint(8)?;
                    self.string(n)?
                } // BINUNICODE8, BINBYTES8, BYTEARRAY8
                b']' => {
                    self.list(Vec::new());
                    if let Some(events) = self.events.as_mut() {
                        events.note_new_list(&self.stack, &self.arena);
                    }
                } // EMPTY_LIST
                0x8f => self.list(Vec::new()),  // EMPTY_SET
                b')' => self.list(Vec::new()),  // EMPTY_TUPLE
                b'}' => self.dict(Vec::new())?, // EMPTY_DICT
                b'l' | b't' | 0x91 => {
                    let items = self.since_mark()?;
                    self.list(items)
                } // LIST, TUPLE, FROZENSET
                b'd' => {
                    let items = self.since_mark()?;
                    self.dict(items)?
                } // DICT
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let at = self.stack.len().checked_sub(n).ok_or_else(|| bad("stack underflow"))?;
                    let items = self.stack.split_off(at);
                    if items.iter().any(|v| matches!(v, Value::Mark)) {
                        return Err(bad("stack underflow"));
                    }
                    self.list(items)
                } // TUPLE1..3
                b'a' => {
                    let v = self.pop()?;
                    let target = self.top()?;
                    self.extend(target, vec![v], false)?
                } // APPEND
                b'e' | 0x90 => {
                    let items = self.since_mark()?;
                    let target = self.top()?;
                    self.extend(target, items, false)?
                } // APPENDS, ADDITEMS
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let target = self.top()?;
                    self.extend(target, vec![k, v], true)?
                } // SETITEM
                b'u' => {
                    let items = self.since_mark()?;
                    let target = self.top()?;
                    self.extend(target, items, true)?
                } // SETITEMS
                b'q' | b'r' => {
                    let i = self.uint(if op == b'q' { 1 } else { 4 })?;
                    let v = self.top()?;
                    self.arena.share(v);
                    if let Some(events) = self.events.as_mut() {
                        events.note_memo(i, v);
                    }
                    self.memo.insert(i, v);
                } // BINPUT, LONG_BINPUT
                0x94 => {
                    let (i, v) = (self.memo_next, self.top()?);
                    self.memo_next += 1;
                    self.arena.share(v);
                    if let Some(events) = self.events.as_mut() {
                        events.note_memo(i, v);
                    }
                    self.memo.insert(i, v);
                } // MEMOIZE
                b'h' | b'j' => {
                    let i = self.uint(if op == b'h' { 1 } else { 4 })?;
                    let v = *self.memo.get(&i).ok_or_else(|| {
                        bad(format!("memo entry {i} was never stored (or is an event of the history, already read)"))
                    })?;
                    if let Some(events) = self.events.as_mut() {
                        events.note_reference(v);
                    }
                    self.stack.push(v)
                } // BINGET, LONG_BINGET
                b'c' | 0x93 | b'R' | b'b' | 0x81 | 0x92 | b'i' | b'o' => {
                    return Err(bad(format!(
                        "opcode {op:#04x} imports or calls code, which a snapshot never needs and this reader refuses"
                    )))
                }
                _ => return Err(bad(format!("opcode {op:#04x} at byte {} is not one a snapshot uses", self.at - 1))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::frame_table::FrameBounds;
    use alloc::string::ToString;

    fn limits(bytes: u64, depth: usize) -> TraceLimits {
        TraceLimits { bytes, depth, events: 1 }
    }

    /// 10,000 nested lists in 20 KB overflowed serde-pickle's stack; here the nesting is a
    /// limit, met without recursing past it.
    #[test]
    fn nesting_past_the_limit_is_refused() {
        let deep = |n: usize| [&b"\x80\x02"[..], &b"]".repeat(n), &b"a".repeat(n - 1), b"."].concat();
        assert_eq!(read(&deep(64), &limits(1 << 20, 64)).map(|_| ()), Ok(()));
        assert_eq!(read(&deep(65), &limits(1 << 20, 64)), Err(PickleError::Limit(Limit::Depth(64))));
        assert_eq!(read(&deep(10_000), &limits(1 << 20, 64)), Err(PickleError::Limit(Limit::Depth(64))));
        // A list that holds itself (through the memo) never ends: the same limit.
        let cycle = b"\x80\x02]q\x00h\x00a.";
        assert_eq!(read(cycle, &limits(1 << 20, 64)), Err(PickleError::Limit(Limit::Depth(64))));
    }

    /// A 1 KiB string doubled 40 times through DUP asked serde-pickle for a terabyte; a
    /// string used 3,000 times through the memo for 3 GB. Each use counts against the
    /// limit on bytes, measured before anything is written out.
    #[test]
    fn shared_values_count_at_each_use() {
        let doubled =
            |n: usize| [&b"\x80\x02X"[..], &1024u32.to_le_bytes(), &[b'B'; 1024], &b"2\x86".repeat(n), b"."].concat();
        let json = read(&doubled(3), &limits(1 << 20, 64)).unwrap();
        assert_eq!(json.to_string().len(), 8 * 1026 + 7 * 3, "eight copies, in nested pairs");
        assert_eq!(read(&doubled(40), &limits(1 << 30, 64)), Err(PickleError::Limit(Limit::Bytes(1 << 30))));
        let mib = 1u32 << 20;
        let memo = |uses: usize| {
            let text = [&b"X"[..], &mib.to_le_bytes(), &vec![b'm'; mib as usize], b"q\x00"].concat();
            [&b"\x80\x02]("[..], &text, &b"h\x00".repeat(uses - 1), b"e."].concat()
        };
        assert_eq!(read(&memo(3), &limits(4 << 20, 64)).unwrap().as_array().unwrap().len(), 3);
        assert_eq!(read(&memo(3000), &limits(1 << 30, 64)), Err(PickleError::Limit(Limit::Bytes(1 << 30))));
    }

    /// Read slim, a pickle gives the value `read` gives with each `frames` entry its stack id,
    /// and holds no frame text (`slim_json` reads JSON alike).
    #[test]
    fn frames_are_interned_as_the_value_is_built() {
        // {"device_traces": [[{"frames": [f, f], "addr": 1}]]}, f = {"name": "f"}: one dict
        // memoized and used twice, as pickle.dump writes a shared object.
        // pickle.dumps(..., protocol=4) of that, the frame dict `f` listed twice.
        let p: [u8; 79] = [
            128, 4, 149, 68, 0, 0, 0, 0, 0, 0, 0, 125, 148, 140, 13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99,
            101, 115, 148, 93, 148, 93, 148, 125, 148, 40, 140, 6, 102, 114, 97, 109, 101, 115, 148, 93, 148, 40, 125,
            148, 140, 4, 110, 97, 109, 101, 148, 140, 1, 102, 148, 115, 104, 7, 101, 140, 4, 97, 100, 100, 114, 148,
            75, 1, 117, 97, 97, 115, 46,
        ];
        let limits = limits(1 << 20, 64);
        let mut whole = read(&p, &limits).unwrap();
        assert_eq!(whole["device_traces"][0][0]["frames"][1]["name"], "f", "{whole}");
        let mut t = FrameTable::default();
        let slim = read_slim(&p, &limits, &mut t).unwrap();
        let id = t.stack_of(&slim["device_traces"][0][0]);
        assert_eq!(t.lines(id), ["f (?:0)", "f (?:0)"]);
        assert!(!slim.to_string().contains("name"), "{slim}");
        FrameTable::default().slim(&mut whole);
        assert_eq!(whole, slim);
    }

    /// A `frames` list interned as it is set stays readable through the memo: the list used
    /// again (as a dict's other entry) and a frame used again (as a value of its own) read as
    /// `read` gives them, whether the table keeps the stack whole or cuts it.
    #[test]
    fn a_memoized_frames_list_still_reads_once_interned() {
        // pickle.dumps({"a": [{"frames": F, "x": 1}, {"frames": F, "y": F}], "z": F[0]},
        // protocol=4), F = [{"filename": "a.py", "line": 1, "name": "f"}, {... "b.py", 2, "g"}].
        let p: [u8; 132] = [
            128, 4, 149, 121, 0, 0, 0, 0, 0, 0, 0, 125, 148, 40, 140, 1, 97, 148, 93, 148, 40, 125, 148, 40, 140, 6,
            102, 114, 97, 109, 101, 115, 148, 93, 148, 40, 125, 148, 40, 140, 8, 102, 105, 108, 101, 110, 97, 109, 101,
            148, 140, 4, 97, 46, 112, 121, 148, 140, 4, 108, 105, 110, 101, 148, 75, 1, 140, 4, 110, 97, 109, 101, 148,
            140, 1, 102, 148, 117, 125, 148, 40, 104, 7, 140, 4, 98, 46, 112, 121, 148, 104, 9, 75, 2, 104, 10, 140, 1,
            103, 148, 117, 101, 140, 1, 120, 148, 75, 1, 117, 125, 148, 40, 104, 4, 104, 5, 140, 1, 121, 148, 104, 5,
            117, 101, 140, 1, 122, 148, 104, 6, 117, 46,
        ];
        let limits = limits(1 << 20, 64);
        let whole = read(&p, &limits).unwrap();
        assert_eq!(whole["a"][1]["y"][1]["name"], "g", "{whole}");
        let one_frame = FrameBounds { stack_frames: 1, ..FrameBounds::BROWSER };
        for bounds in [FrameBounds::BROWSER, FrameBounds::within(1 << 20), one_frame] {
            let mut t = FrameTable::new(bounds);
            let slim = read_slim_from(&p[..], &limits, &mut t).unwrap();
            let mut expected = whole.clone();
            FrameTable::new(bounds).slim(&mut expected);
            assert_eq!(slim, expected, "{bounds:?}");
            assert_eq!(slim["a"][0]["frames"], slim["a"][1]["frames"]);
        }
    }

    /// Frames that nothing else holds are freed as their list is interned, their slots used
    /// again: the arena holds one event's frames at a time, not the file's.
    #[test]
    fn frames_held_once_are_freed_when_interned() {
        let s = |text: &str| [&[0x8c, text.len() as u8][..], text.as_bytes()].concat();
        let frame = |i: u32| {
            [&b"}("[..], &s("filename"), &s(&alloc::format!("f{}.py", i % 5)), &s("line"), b"K\x07", b"u"].concat()
        };
        let event = |i: u32| {
            let frames: Vec<u8> = (0..12).flat_map(|k| frame(i + k)).collect();
            [&b"}("[..], &s("action"), &s("alloc"), &s("frames"), b"](", &frames, b"e", b"u"].concat()
        };
        let events: Vec<u8> = (0..500).flat_map(event).collect();
        let p = [&b"\x80\x04}("[..], &s("device_traces"), b"](](", &events, b"ee", b"u."].concat();
        let limits = limits(1 << 24, 64);
        let mut t = FrameTable::new(FrameBounds::within(1 << 24));
        let mut m = Machine {
            bytes: &p[..],
            at: 0,
            arena: Arena::default(),
            stack: Vec::new(),
            memo: BTreeMap::new(),
            memo_next: 0,
            limits: &limits,
            table: Some(&mut t),
            events: None,
        };
        m.run().unwrap();
        // 500 events of 12 frames read: the top dict, 500 events and their 1,500 strings held,
        // and one event's frames (12 dicts, 36 strings) at the most; held, the frames were
        // 6,000 dicts and 18,000 strings.
        assert!(m.arena.dicts.len() <= 1 + 500 + 12, "{} dicts", m.arena.dicts.len());
        assert!(m.arena.strings.len() <= 1 + 1500 + 36, "{} strings", m.arena.strings.len());
        assert!(m.arena.lists.len() <= 3, "{}", m.arena.lists.len());
        let slim = read_slim(&p, &limits, &mut FrameTable::new(FrameBounds::within(1 << 24))).unwrap();
        let mut expected = read(&p, &limits).unwrap();
        FrameTable::new(FrameBounds::within(1 << 24)).slim(&mut expected);
        assert_eq!(slim, expected);
    }

    #[test]
    fn code_and_broken_pickles_are_refused() {
        let global = b"\x80\x02cos\nsystem\nq\x00.";
        assert!(
            matches!(read(global, &TraceLimits::DEFAULT), Err(PickleError::Unreadable(m)) if m.contains("imports or calls"))
        );
        for broken in [&b"\x80\x02"[..], b"\x80\x02a.", b"\x80\x02h\x05.", b"\x80\x02X\xff\xff\xff\xff", b"\x80\x02(."]
        {
            assert!(matches!(read(broken, &TraceLimits::DEFAULT), Err(PickleError::Unreadable(_))), "{broken:?}");
        }
    }
}
