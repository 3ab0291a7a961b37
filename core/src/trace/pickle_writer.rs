//! The pickle machine's JSON writer: the values a pickle built, out of their arena as
//! `serde_json` values.
//!
//! Invariants: a value is written only once measured (its size and nesting within the
//! limits, see `pickle::measure`); what is reached by one path only is taken out of the arena,
//! not copied, and a shared value is read in place, so writing holds at most the arena and the
//! JSON it makes; a `frames` list is written as its stack id in the table when interning.

use alloc::string::{String, ToString};

use serde_json::{Map, Number, Value as Json};

use crate::trace::frame_table::FrameTable;
use crate::trace::pickle_arena::{Arena, Value, DICT, LIST, STR};

/// Writes values out as JSON (measured first: their size and nesting are within the limits).
pub(crate) struct Writer<'a, 'b> {
    pub(crate) arena: &'a mut Arena,
    /// The table `frames` lists are interned into, and stacks read from.
    pub(crate) table: Option<&'b mut FrameTable>,
}

impl Writer<'_, '_> {
    /// `v` as JSON; each `frames` entry of a dict its stack id when `intern` (and a table is
    /// given), else its frames. When `owned` (`v` is reached by one path only: nothing above
    /// it shared), what it holds is taken out of the arena rather than copied.
    pub(crate) fn json(&mut self, v: Value, owned: bool, intern: bool) -> Json {
        match self.arena.resolve(v) {
            Value::None | Value::Mark => Json::Null,
            Value::Bool(b) => Json::Bool(b),
            Value::Int(i) => Json::from(i),
            Value::UInt(u) => Json::from(u),
            Value::Big(f) | Value::Float(f) => Number::from_f64(f).map_or(Json::Null, Json::Number),
            Value::Str(id) if owned && !self.arena.shared[STR][id] => {
                Json::String(core::mem::take(&mut self.arena.strings[id]))
            }
            Value::Str(id) => Json::String(self.arena.strings[id].clone()),
            Value::Stack(k) => {
                let (id, list) = self.arena.stacked(k);
                match list {
                    // Not kept whole by the table: its frames were kept here.
                    Some(list) => self.json(Value::List(list), false, false),
                    None => Json::Array(self.table.as_deref().map(|t| t.frames(id)).unwrap_or_default()),
                }
            }
            Value::List(id) if owned && !self.arena.shared[LIST][id] => {
                let items = core::mem::take(&mut self.arena.lists[id]);
                Json::Array(items.into_iter().map(|item| self.json(item, true, intern)).collect())
            }
            Value::List(id) => {
                // Shared: read in place (an item's own items may be taken, never this list's).
                let n = self.arena.lists[id].len();
                Json::Array((0..n).map(|i| self.json(self.arena.lists[id][i], false, intern)).collect())
            }
            Value::Dict(id) => {
                let owned = owned && !self.arena.shared[DICT][id];
                let mut map = Map::new();
                if owned {
                    for (k, item) in core::mem::take(&mut self.arena.dicts[id]) {
                        self.entry(&mut map, k, item, true, intern);
                    }
                } else {
                    for i in 0..self.arena.dicts[id].len() {
                        let (k, item) = self.arena.dicts[id][i];
                        self.entry(&mut map, k, item, false, intern);
                    }
                }
                Json::Object(map)
            }
        }
    }

    /// Writes one key and value of a dict into `map`.
    fn entry(&mut self, map: &mut Map<String, Json>, k: Value, item: Value, owned: bool, intern: bool) {
        let key = match self.json(k, owned, false) {
            Json::String(s) => s,
            other => other.to_string(),
        };
        let item = match self.arena.resolve(item) {
            Value::Stack(k) if intern && key == "frames" => Json::from(self.arena.stacked(k).0),
            item if intern && key == "frames" && self.table.is_some() => {
                // One list's value at a time, dropped once interned.
                let frames = self.json(item, owned, false);
                Json::from(self.table.as_deref_mut().map_or(0, |t| t.stack_of_frames(&frames)))
            }
            item => self.json(item, owned, intern),
        };
        map.insert(key, item);
    }
}
