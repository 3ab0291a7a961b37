//! The pickle machine's values: scalars inline, strings, lists and dicts in one arena by id,
//! and what a value takes written out.
//!
//! Invariants: a memo reference or a DUP copies an id, never what it names, so the arena holds
//! memory in proportion to the file; an id not `shared` is held in one place only, and its slot
//! is reused once that place lets it go; [`measure`] counts every use of a shared container in
//! full and stops past the depth it is given, so a cycle or a bomb of references is a limit met,
//! not memory or stack taken.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use crate::trace::limits::Limit;

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
pub(crate) enum Value {
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
    /// A `frames` list already interned, by its index in [`Arena::stacks`].
    Stack(usize),
    /// The MARK on the stack.
    Mark,
}

/// A `frames` list interned as it was set in its dict: its stack, and what it measured.
pub(crate) struct Stacked {
    pub(crate) id: u32,
    pub(crate) size: u64,
    pub(crate) height: usize,
    /// The list, kept when the table did not keep its stack whole (it is then written from here).
    pub(crate) list: Option<usize>,
    /// Something beside the dict it was set in may read it (the list is kept, or forwarded
    /// here): its slot is never reused.
    pub(crate) held_elsewhere: bool,
}

/// Strings, lists and dicts by id. An id whose item was never memoized nor DUP'd (`shared`
/// false) is held in one place only, so once its `frames` list is interned its slot is freed
/// and reused; a shared list interned is forwarded to its [`Stacked`], so a memo reference to
/// it still reads.
#[derive(Default)]
pub(crate) struct Arena {
    pub(crate) strings: Vec<String>,
    pub(crate) lists: Vec<Vec<Value>>,
    pub(crate) dicts: Vec<Vec<(Value, Value)>>,
    /// Per kind (string, list, dict) and id: held in more than one place.
    pub(crate) shared: [Vec<bool>; 3],
    /// Per kind: ids freed, to reuse.
    pub(crate) free: [Vec<usize>; 3],
    stacks: Vec<Stacked>,
    /// Slots of `stacks` whose dict was let go, to reuse.
    pub(crate) free_stacks: Vec<usize>,
    forwarded: BTreeMap<usize, usize>,
}

pub(crate) const STR: usize = 0;
pub(crate) const LIST: usize = 1;
pub(crate) const DICT: usize = 2;

/// A slot for a new item of one kind: a freed id, or a new one.
fn slot<T>(items: &mut Vec<T>, shared: &mut Vec<bool>, free: &mut Vec<usize>, item: T) -> usize {
    match free.pop() {
        Some(id) => {
            items[id] = item;
            shared[id] = false;
            id
        }
        None => {
            items.push(item);
            shared.push(false);
            items.len() - 1
        }
    }
}

impl Arena {
    pub(crate) fn string(&mut self, s: String) -> Value {
        Value::Str(slot(&mut self.strings, &mut self.shared[STR], &mut self.free[STR], s))
    }

    pub(crate) fn list(&mut self, items: Vec<Value>) -> Value {
        Value::List(slot(&mut self.lists, &mut self.shared[LIST], &mut self.free[LIST], items))
    }

    pub(crate) fn dict(&mut self, pairs: Vec<(Value, Value)>) -> Value {
        Value::Dict(slot(&mut self.dicts, &mut self.shared[DICT], &mut self.free[DICT], pairs))
    }

    /// A slot for a stack interned: a freed one, or a new one.
    pub(crate) fn stack(&mut self, s: Stacked) -> usize {
        match self.free_stacks.pop() {
            Some(k) => {
                self.stacks[k] = s;
                k
            }
            None => {
                self.stacks.push(s);
                self.stacks.len() - 1
            }
        }
    }

    /// Lets go of the stacks the dict `id` holds that nothing else reads (the dict is being
    /// freed).
    pub(crate) fn free_stacks_of(&mut self, id: usize) {
        for &(_, v) in &self.dicts[id] {
            if let Value::Stack(k) = v {
                if !self.stacks[k].held_elsewhere {
                    self.free_stacks.push(k);
                }
            }
        }
    }

    /// Stack `k`'s id in the frame table, and its list where the table did not keep it whole.
    pub(crate) fn stacked(&self, k: usize) -> (u32, Option<usize>) {
        (self.stacks[k].id, self.stacks[k].list)
    }

    /// Reads the list `list`, interned as stack `k`, as that stack from now on.
    pub(crate) fn forward(&mut self, list: usize, k: usize) {
        self.forwarded.insert(list, k);
    }

    /// `v` as it reads now: a list interned as a `frames` list is its stack.
    pub(crate) fn resolve(&self, v: Value) -> Value {
        match v {
            Value::List(id) => self.forwarded.get(&id).map_or(v, |&k| Value::Stack(k)),
            v => v,
        }
    }

    /// `v` may now be held in more than one place (the memo, a DUP).
    pub(crate) fn share(&mut self, v: Value) {
        let (kind, id) = match v {
            Value::Str(id) => (STR, id),
            Value::List(id) => (LIST, id),
            Value::Dict(id) => (DICT, id),
            _ => return,
        };
        self.shared[kind][id] = true;
    }

    /// A frame dict (or a string) no longer held anywhere: its memory and its slot freed. A
    /// shared one is left as it is (something else may hold it).
    pub(crate) fn drop_unshared(&mut self, v: Value) {
        match v {
            Value::Str(id) if !self.shared[STR][id] => {
                self.strings[id] = String::new();
                self.free[STR].push(id);
            }
            Value::Dict(id) if !self.shared[DICT][id] => {
                for (k, item) in core::mem::take(&mut self.dicts[id]) {
                    // A frame's keys and values are strings and scalars: no deeper.
                    for v in [k, item] {
                        if let Value::Str(_) = v {
                            self.drop_unshared(v);
                        }
                    }
                }
                self.free[DICT].push(id);
            }
            _ => {}
        }
    }

    /// When `list` is what a snapshot's `frames` holds, dicts of strings and scalars (so no
    /// frame holds a container, and freeing it goes two levels deep), the bytes it takes
    /// written out as [`measure`] counts them; `None` otherwise.
    pub(crate) fn flat_frames(&self, list: usize) -> Option<u64> {
        let size = |v: &Value| match v {
            Value::Str(id) => Some(self.strings[*id].len() as u64 + 2),
            Value::List(_) | Value::Dict(_) | Value::Stack(_) | Value::Mark => None,
            _ => Some(8),
        };
        let mut total = 2u64;
        for &f in &self.lists[list] {
            let Value::Dict(d) = self.resolve(f) else { return None };
            let mut frame = 2u64;
            for (k, item) in &self.dicts[d] {
                frame = frame.saturating_add(size(k)? + 1).saturating_add(size(item)? + 1);
            }
            total = total.saturating_add(frame + 1);
        }
        Some(total)
    }
}

/// The bytes `v` takes written out as JSON (about: each scalar 8, each string its length),
/// every use of a shared container counted, and how deep it nests; an error past `depth`
/// levels (a container that holds itself never ends). Each container is measured once; `seen`
/// keeps its size, its nesting and how many containers (or the top) hold it.
pub(crate) fn measure(
    arena: &Arena,
    v: Value,
    depth: usize,
    seen: &mut BTreeMap<(bool, usize), (u64, usize, u32)>,
) -> Result<(u64, usize), PickleError> {
    let key = match arena.resolve(v) {
        Value::Str(id) => return Ok((arena.strings[id].len() as u64 + 2, 0)),
        Value::Stack(k) => {
            let s = &arena.stacks[k];
            return if s.height > depth {
                Err(PickleError::Limit(Limit::Depth(depth)))
            } else {
                Ok((s.size, s.height))
            };
        }
        Value::List(id) => (false, id),
        Value::Dict(id) => (true, id),
        _ => return Ok((8, 0)),
    };
    if let Some((size, height, uses)) = seen.get_mut(&key) {
        *uses = uses.saturating_add(1);
        let (size, height) = (*size, *height);
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
    match arena.resolve(v) {
        Value::List(id) => arena.lists[id].iter().try_for_each(|&item| add(item, seen))?,
        Value::Dict(id) => arena.dicts[id].iter().try_for_each(|&(k, item)| {
            add(k, seen)?;
            add(item, seen)
        })?,
        _ => {}
    }
    seen.insert(key, (size, height + 1, 1));
    Ok((size, height + 1))
}

pub(crate) fn bad(message: impl Into<String>) -> PickleError {
    PickleError::Unreadable(message.into())
}
