//! The stack frames a PyTorch snapshot records (`frames` of a segment, a block and a history
//! entry: `[{filename, line, name}]`, as the snapshot lists them), kept within fixed bounds
//! because the file is untrusted: each frame is kept once as its JSON text, each stack as a
//! list of frame ids, and both are interned, so a frame or a stack that a million events share
//! is held once. The browser shows a stack as lines ([`FrameTable::lines`]); the command-line
//! tool writes its frames back as the snapshot had them ([`FrameTable::frames`]).
//!
//! Invariants: a frame line shown holds at most [`FRAME_CHARS`] characters; a stack keeps at
//! most `bounds.stack_frames` frames (the rest counted, not kept); the table holds at most
//! `bounds.text_bytes` bytes of frame text and `bounds.stacks` stacks: past either, a stack is
//! not kept ([`NONE`]) and counted in `dropped`, so the memory taken never grows with the file
//! beyond these bounds. Stack id 0 is the empty stack.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use alloc::collections::BTreeMap;
use serde_json::Value;

/// A stack not recorded, or not kept.
pub const NONE: u32 = u32::MAX;
/// The most characters of one frame's line.
pub const FRAME_CHARS: usize = 240;
/// The most frames kept of one stack, in the browser.
pub const STACK_FRAMES: usize = 32;
/// The most bytes of distinct frame text kept, in the browser.
pub const TABLE_BYTES: usize = 32 << 20;
/// The most distinct stacks kept, in the browser.
pub const STACKS: usize = 1 << 20;

/// How much a [`FrameTable`] keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameBounds {
    /// The most frames kept of one stack.
    pub stack_frames: usize,
    /// The most bytes of distinct frame text (each frame's JSON) kept.
    pub text_bytes: usize,
    /// The most distinct stacks kept (below [`NONE`]).
    pub stacks: usize,
}

impl FrameBounds {
    /// The page's: a stack shown is at most [`STACK_FRAMES`] deep, and the table fits beside
    /// the page's other memory whatever the file.
    pub const BROWSER: FrameBounds =
        FrameBounds { stack_frames: STACK_FRAMES, text_bytes: TABLE_BYTES, stacks: STACKS };

    /// Every stack of a snapshot of at most `text_bytes` bytes kept whole: the command-line
    /// tool writes frames back as the input had them. Distinct frame text is never more than
    /// the file's, and a stack takes at least a frame's text, so this too is bounded by what
    /// the reader's limit on bytes lets in, not by what the file repeats.
    pub fn within(text_bytes: u64) -> FrameBounds {
        let text_bytes = usize::try_from(text_bytes).unwrap_or(usize::MAX);
        FrameBounds { stack_frames: usize::MAX, text_bytes, stacks: (NONE - 1) as usize }
    }
}

/// Interned frames and stacks.
#[derive(Clone)]
pub struct FrameTable {
    bounds: FrameBounds,
    /// Each distinct frame's compact JSON text.
    frames: Vec<String>,
    frame_ids: BTreeMap<String, u32>,
    /// Each stack's frame ids, and how many frames past the bound were not kept.
    stacks: Vec<(Vec<u32>, usize)>,
    stack_ids: BTreeMap<Vec<u32>, u32>,
    bytes: usize,
    /// Stacks met but not kept, past a bound.
    pub dropped: u64,
}

impl Default for FrameTable {
    fn default() -> Self {
        FrameTable::new(FrameBounds::BROWSER)
    }
}

/// One frame as a line: "name (filename:line)", cut at [`FRAME_CHARS`] characters.
fn line_of(frame: &Value) -> String {
    let text = |k: &str| frame.get(k).and_then(Value::as_str).unwrap_or("?");
    let line = frame.get("line").and_then(Value::as_u64).unwrap_or(0);
    let full = format!("{} ({}:{line})", text("name"), text("filename"));
    match full.char_indices().nth(FRAME_CHARS) {
        Some((cut, _)) => format!("{}…", &full[..cut]),
        None => full,
    }
}

impl FrameTable {
    /// An empty table keeping what `bounds` allow.
    pub fn new(bounds: FrameBounds) -> FrameTable {
        let mut t = FrameTable {
            bounds,
            frames: Vec::new(),
            frame_ids: BTreeMap::new(),
            stacks: Vec::new(),
            stack_ids: BTreeMap::new(),
            bytes: 0,
            dropped: 0,
        };
        t.stacks.push((Vec::new(), 0));
        t.stack_ids.insert(Vec::new(), 0);
        t
    }

    /// The id of `entry`'s `frames` (a segment, block or history entry): 0 when it has none,
    /// [`NONE`] when the table is full.
    pub fn stack_of(&mut self, entry: &Value) -> u32 {
        match entry.get("frames") {
            // Interned already, as the JSON was read (`slim_json.rs`).
            Some(Value::Number(id)) => id.as_u64().and_then(|id| u32::try_from(id).ok()).unwrap_or(NONE),
            Some(frames) => self.stack_of_frames(frames),
            None => 0,
        }
    }

    /// The id of the stack `frames` (a list of frames): 0 when empty or not a list, [`NONE`]
    /// when the table is full.
    pub fn stack_of_frames(&mut self, frames: &Value) -> u32 {
        let Some(frames) = frames.as_array() else { return 0 };
        let kept = frames.len().min(self.bounds.stack_frames);
        let mut ids = Vec::with_capacity(kept);
        for f in &frames[..kept] {
            // A Value always writes as JSON; the text is the frame's identity.
            let text = serde_json::to_string(f).unwrap_or_default();
            let id = match self.frame_ids.get(&text) {
                Some(&id) => id,
                None if self.bytes.saturating_add(text.len()) > self.bounds.text_bytes => {
                    self.dropped += 1;
                    return NONE;
                }
                None => {
                    let id = self.frames.len() as u32;
                    self.bytes += text.len();
                    self.frame_ids.insert(text.clone(), id);
                    self.frames.push(text);
                    id
                }
            };
            ids.push(id);
        }
        if let Some(&id) = self.stack_ids.get(&ids) {
            return id;
        }
        if self.stacks.len() >= self.bounds.stacks.min(NONE as usize) {
            self.dropped += 1;
            return NONE;
        }
        let id = self.stacks.len() as u32;
        self.stack_ids.insert(ids.clone(), id);
        self.stacks.push((ids, frames.len() - kept));
        id
    }

    /// Every `frames` entry within `value` replaced by its stack id, as
    /// [`crate::trace::slim_json`] does while parsing: for a value already built.
    pub fn slim(&mut self, value: &mut Value) {
        match value {
            Value::Array(items) => items.iter_mut().for_each(|v| self.slim(v)),
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    if key == "frames" {
                        let id = self.stack_of_frames(v);
                        *v = Value::from(id);
                    } else {
                        self.slim(v);
                    }
                }
            }
            _ => {}
        }
    }

    /// True when stack `id` is kept with every frame (so [`FrameTable::frames`] gives the
    /// whole list back); false for [`NONE`] or a stack cut at the bound.
    pub fn kept_whole(&self, id: u32) -> bool {
        self.stacks.get(id as usize).is_some_and(|(_, more)| *more == 0)
    }

    /// Stack `id` as lines, as the snapshot lists its frames, then how many were left out;
    /// empty for the empty stack or an id not kept.
    pub fn lines(&self, id: u32) -> Vec<String> {
        let Some((ids, more)) = self.stacks.get(id as usize) else { return Vec::new() };
        let mut out: Vec<String> = ids.iter().map(|&f| line_of(&self.frame(f))).collect();
        if *more > 0 {
            out.push(format!("… {more} more frames not kept"));
        }
        out
    }

    /// Stack `id`'s frames as the snapshot listed them (those kept); empty for the empty
    /// stack or an id not kept.
    pub fn frames(&self, id: u32) -> Vec<Value> {
        let Some((ids, _)) = self.stacks.get(id as usize) else { return Vec::new() };
        ids.iter().map(|&f| self.frame(f)).collect()
    }

    /// Frame `id` as a value again (its text was written from one).
    fn frame(&self, id: u32) -> Value {
        self.frames.get(id as usize).and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(frames: &[(&str, u64, &str)]) -> Value {
        let f: Vec<Value> = frames
            .iter()
            .map(|(file, line, name)| serde_json::json!({"filename": file, "line": line, "name": name}))
            .collect();
        serde_json::json!({ "frames": f })
    }

    #[test]
    fn stacks_are_interned_as_lines() {
        let mut t = FrameTable::default();
        let a = t.stack_of(&entry(&[("train.py", 10, "forward"), ("module.py", 1736, "_call_impl")]));
        let b = t.stack_of(&entry(&[("train.py", 10, "forward"), ("module.py", 1736, "_call_impl")]));
        assert_eq!(a, b);
        assert_eq!(t.lines(a), ["forward (train.py:10)", "_call_impl (module.py:1736)"]);
        assert_eq!(t.stack_of(&serde_json::json!({})), 0);
        assert_eq!(t.stack_of(&entry(&[])), 0);
        assert!(t.lines(0).is_empty() && t.lines(NONE).is_empty());
        assert_eq!(t.stacks.len(), 2);
    }

    #[test]
    fn bounds_hold_against_a_hostile_file() {
        let mut t = FrameTable::default();
        let long = "x".repeat(10_000);
        let deep: Vec<(&str, u64, &str)> = (0..100).map(|i| (long.as_str(), i, "f")).collect();
        let id = t.stack_of(&entry(&deep));
        let lines = t.lines(id);
        assert_eq!(lines.len(), STACK_FRAMES + 1);
        assert_eq!(lines[STACK_FRAMES], "… 68 more frames not kept");
        assert!(lines.iter().all(|l| l.chars().count() <= FRAME_CHARS + 1));
        // Distinct frames past the byte bound are refused, counted, not kept.
        let name = "y".repeat(200);
        let mut n = 0u64;
        while t.stack_of(&entry(&[("f.py", n, name.as_str())])) != NONE {
            n += 1;
            assert!(n < 1 << 20, "the table never filled");
        }
        assert!(t.bytes <= TABLE_BYTES && t.dropped == 1, "{n} kept");
    }

    /// The command-line tool's table gives a stack's frames back exactly, whatever they hold
    /// (keys PyTorch may add, numbers as numbers), and a value slimmed in place holds ids.
    #[test]
    fn frames_come_back_as_the_snapshot_had_them() {
        let frames = serde_json::json!([
            {"filename": "a.py", "line": 3, "name": "f", "fx_node_op": "call_function"},
            {"filename": "b.py", "line": 7, "name": "g"}
        ]);
        let mut v = serde_json::json!({"device_traces": [[{"action": "alloc", "frames": frames.clone()}]],
                                       "segments": [{"frames": frames.clone(), "blocks": [{"frames": []}]}]});
        let mut t = FrameTable::new(FrameBounds::within(1 << 20));
        t.slim(&mut v);
        let id = t.stack_of(&v["device_traces"][0][0]);
        assert_eq!(v["segments"][0]["frames"], Value::from(id));
        assert_eq!(v["segments"][0]["blocks"][0]["frames"], Value::from(0));
        assert_eq!(Value::Array(t.frames(id)), frames);
        assert!(t.frames(0).is_empty());
        assert!(!serde_json::to_string(&v).unwrap().contains("a.py"), "no frame text left in the value");
    }
}
