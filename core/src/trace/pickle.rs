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

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use serde_json::{Map, Number, Value as Json};

use crate::trace::frame_table::FrameTable;
use crate::trace::limits::{Limit, TraceLimits};

/// Why the bytes are not a pickle this machine reads.
#[derive(Debug, PartialEq)]
pub enum PickleError {
    /// Not a pickle of the kinds a snapshot holds; the message says what.
    Unreadable(String),
    /// Past one of the reader's limits.
    Limit(Limit),
}

/// A value: scalars inline, everything with a length an id into the arena.
#[derive(Clone, Copy, Debug)]
enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer past `i64` that fits `u64` (addresses).
    UInt(u64),
    /// An integer past 64 bits, as a float (as `json.dumps` would lose it too).
    Big(f64),
    Float(f64),
    /// A string or bytes (decoded as UTF-8, lossily), by id.
    Str(usize),
    /// A list, tuple or set, by id.
    List(usize),
    /// A dict, by id.
    Dict(usize),
    /// The MARK on the stack.
    Mark,
}

#[derive(Default)]
struct Arena {
    strings: Vec<String>,
    lists: Vec<Vec<Value>>,
    dicts: Vec<Vec<(Value, Value)>>,
}

/// Reads the pickle `bytes` into its JSON value within `limits`.
pub fn read(bytes: &[u8], limits: &TraceLimits) -> Result<Json, PickleError> {
    read_into(bytes, limits, &mut None)
}

/// Reads the pickle `bytes` as [`read`] does, but every `frames` entry of a dict becomes its
/// stack id in `frames` as the value is built (as `slim_json` reads JSON): the value then
/// never holds a snapshot's frames, most of its bytes.
pub fn read_slim(bytes: &[u8], limits: &TraceLimits, frames: &mut FrameTable) -> Result<Json, PickleError> {
    read_into(bytes, limits, &mut Some(frames))
}

fn read_into(bytes: &[u8], limits: &TraceLimits, frames: &mut Option<&mut FrameTable>) -> Result<Json, PickleError> {
    let mut m = Machine { bytes, at: 0, arena: Arena::default(), stack: Vec::new(), memo: BTreeMap::new() };
    let top = m.run()?;
    let (size, _) = measure(&m.arena, top, limits.depth, &mut BTreeMap::new()).map_err(|e| match e {
        PickleError::Limit(Limit::Depth(_)) => PickleError::Limit(Limit::Depth(limits.depth)),
        other => other,
    })?;
    if size > limits.bytes {
        return Err(PickleError::Limit(Limit::Bytes(limits.bytes)));
    }
    Ok(to_json(&m.arena, top, frames))
}

/// The bytes `v` takes written out as JSON (about: each scalar 8, each string its length),
/// every use of a shared container counted, and how deep it nests; an error past `depth`
/// levels (a container that holds itself never ends). Each container is measured once.
fn measure(
    arena: &Arena,
    v: Value,
    depth: usize,
    seen: &mut BTreeMap<(bool, usize), (u64, usize)>,
) -> Result<(u64, usize), PickleError> {
    let key = match v {
        Value::Str(id) => return Ok((arena.strings[id].len() as u64 + 2, 0)),
        Value::List(id) => (false, id),
        Value::Dict(id) => (true, id),
        _ => return Ok((8, 0)),
    };
    if let Some(&(size, height)) = seen.get(&key) {
        return if height > depth { Err(PickleError::Limit(Limit::Depth(depth))) } else { Ok((size, height)) };
    }
    let inner = depth.checked_sub(1).ok_or(PickleError::Limit(Limit::Depth(depth)))?;
    let (mut size, mut height) = (2u64, 0usize);
    let mut add = |item: Value, seen: &mut BTreeMap<_, _>| -> Result<(), PickleError> {
        let (s, h) = measure(arena, item, inner, seen)?;
        size = size.saturating_add(s + 1);
        height = height.max(h);
        Ok(())
    };
    match v {
        Value::List(id) => arena.lists[id].iter().try_for_each(|&item| add(item, seen))?,
        Value::Dict(id) => arena.dicts[id].iter().try_for_each(|&(k, item)| {
            add(k, seen)?;
            add(item, seen)
        })?,
        _ => {}
    }
    seen.insert(key, (size, height + 1));
    Ok((size, height + 1))
}

fn bad(message: impl Into<String>) -> PickleError {
    PickleError::Unreadable(message.into())
}

struct Machine<'a> {
    bytes: &'a [u8],
    at: usize,
    arena: Arena,
    stack: Vec<Value>,
    memo: BTreeMap<u64, Value>,
}

impl Machine<'_> {
    fn take(&mut self, n: u64) -> Result<&[u8], PickleError> {
        let n = usize::try_from(n).map_err(|_| bad("a length past the end of the data"))?;
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or_else(|| bad("truncated data"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
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
        self.arena.strings.push(s);
        self.stack.push(Value::Str(self.arena.strings.len() - 1));
        Ok(())
    }

    fn list(&mut self, items: Vec<Value>) {
        self.arena.lists.push(items);
        self.stack.push(Value::List(self.arena.lists.len() - 1));
    }

    fn dict(&mut self, items: Vec<Value>) -> Result<(), PickleError> {
        if items.len() % 2 != 0 {
            return Err(bad("a dict's items are not key, value pairs"));
        }
        self.arena.dicts.push(items.chunks(2).map(|p| (p[0], p[1])).collect());
        self.stack.push(Value::Dict(self.arena.dicts.len() - 1));
        Ok(())
    }

    /// Adds `items` to the list or dict (or set) `target`.
    fn extend(&mut self, target: Value, items: Vec<Value>, pairs: bool) -> Result<(), PickleError> {
        match (target, pairs) {
            (Value::List(id), false) => self.arena.lists[id].extend(items),
            (Value::Dict(id), true) if items.len() % 2 == 0 => {
                self.arena.dicts[id].extend(items.chunks(2).map(|p| (p[0], p[1])))
            }
            _ => return Err(bad("items added to something that is not a list or dict")),
        }
        Ok(())
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
                b']' | 0x8f => self.list(Vec::new()), // EMPTY_LIST, EMPTY_SET
                b')' => self.list(Vec::new()),        // EMPTY_TUPLE
                b'}' => self.dict(Vec::new())?,       // EMPTY_DICT
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
                    self.memo.insert(i, v);
                } // BINPUT, LONG_BINPUT
                0x94 => {
                    let (i, v) = (self.memo.len() as u64, self.top()?);
                    self.memo.insert(i, v);
                } // MEMOIZE
                b'h' | b'j' => {
                    let i = self.uint(if op == b'h' { 1 } else { 4 })?;
                    let v = *self.memo.get(&i).ok_or_else(|| bad(format!("memo entry {i} was never stored")))?;
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

/// `v` as JSON (measured first: its size and nesting are within the limits), each `frames`
/// entry interned into `frames` when a table is given.
fn to_json(arena: &Arena, v: Value, frames: &mut Option<&mut FrameTable>) -> Json {
    match v {
        Value::None | Value::Mark => Json::Null,
        Value::Bool(b) => Json::Bool(b),
        Value::Int(i) => Json::from(i),
        Value::UInt(u) => Json::from(u),
        Value::Big(f) | Value::Float(f) => Number::from_f64(f).map_or(Json::Null, Json::Number),
        Value::Str(id) => Json::String(arena.strings[id].clone()),
        Value::List(id) => Json::Array(arena.lists[id].iter().map(|&item| to_json(arena, item, frames)).collect()),
        Value::Dict(id) => {
            let mut map = Map::new();
            for &(k, item) in &arena.dicts[id] {
                let key = match to_json(arena, k, &mut None) {
                    Json::String(s) => s,
                    other => other.to_string(),
                };
                let item = match frames.as_deref_mut() {
                    // One list's value at a time, dropped once interned.
                    Some(table) if key == "frames" => {
                        Json::from(table.stack_of_frames(&to_json(arena, item, &mut None)))
                    }
                    _ => to_json(arena, item, frames),
                };
                map.insert(key, item);
            }
            Json::Object(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
