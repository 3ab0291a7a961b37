//! The stack frames a PyTorch snapshot records (`frames` of a segment, a block and a history
//! entry: `[{filename, line, name}]`, as the snapshot lists them), kept within fixed bounds
//! because the file is untrusted: each frame becomes one line of text, each stack a list of
//! frame ids, and both are interned, so a frame or a stack that a million events share is
//! held once.
//!
//! Invariants: a frame line holds at most [`FRAME_CHARS`] characters, a stack at most
//! [`STACK_FRAMES`] frames (the rest counted, not kept); the table holds at most
//! [`TABLE_BYTES`] bytes of frame text and [`STACKS`] stacks: past either, a stack is not
//! kept ([`NONE`]) and counted in `dropped`, so the memory taken never grows with the file
//! beyond these bounds. Stack id 0 is the empty stack.

use std::collections::HashMap;

use serde_json::Value;

/// A stack not recorded, or not kept.
pub const NONE: u32 = u32::MAX;
/// The most characters of one frame's line.
pub const FRAME_CHARS: usize = 240;
/// The most frames kept of one stack.
pub const STACK_FRAMES: usize = 32;
/// The most bytes of distinct frame text kept.
pub const TABLE_BYTES: usize = 32 << 20;
/// The most distinct stacks kept.
pub const STACKS: usize = 1 << 20;

/// Interned frames and stacks.
#[derive(Clone)]
pub struct FrameTable {
    frames: Vec<String>,
    frame_ids: HashMap<String, u32>,
    stacks: Vec<(Vec<u32>, usize)>,
    stack_ids: HashMap<Vec<u32>, u32>,
    bytes: usize,
    /// Stacks met but not kept, past a bound.
    pub dropped: u64,
}

impl Default for FrameTable {
    fn default() -> Self {
        let mut t = FrameTable {
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            stacks: Vec::new(),
            stack_ids: HashMap::new(),
            bytes: 0,
            dropped: 0,
        };
        t.stacks.push((Vec::new(), 0));
        t.stack_ids.insert(Vec::new(), 0);
        t
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
    /// The id of `entry`'s `frames` (a segment, block or history entry): 0 when it has none,
    /// [`NONE`] when the table is full.
    pub fn stack_of(&mut self, entry: &Value) -> u32 {
        match entry.get("frames") {
            // Interned already, as the JSON was read (`slim_snapshot.rs`).
            Some(Value::Number(id)) => id.as_u64().and_then(|id| u32::try_from(id).ok()).unwrap_or(NONE),
            Some(frames) => self.stack_of_frames(frames),
            None => 0,
        }
    }

    /// The id of the stack `frames` (a list of frames): 0 when empty or not a list, [`NONE`]
    /// when the table is full.
    pub fn stack_of_frames(&mut self, frames: &Value) -> u32 {
        let Some(frames) = frames.as_array() else { return 0 };
        let mut ids = Vec::with_capacity(frames.len().min(STACK_FRAMES));
        for f in frames.iter().take(STACK_FRAMES) {
            let line = line_of(f);
            let id = match self.frame_ids.get(&line) {
                Some(&id) => id,
                None if self.bytes + line.len() > TABLE_BYTES => {
                    self.dropped += 1;
                    return NONE;
                }
                None => {
                    let id = self.frames.len() as u32;
                    self.bytes += line.len();
                    self.frame_ids.insert(line.clone(), id);
                    self.frames.push(line);
                    id
                }
            };
            ids.push(id);
        }
        if let Some(&id) = self.stack_ids.get(&ids) {
            return id;
        }
        if self.stacks.len() >= STACKS {
            self.dropped += 1;
            return NONE;
        }
        let id = self.stacks.len() as u32;
        self.stack_ids.insert(ids.clone(), id);
        self.stacks.push((ids, frames.len().saturating_sub(STACK_FRAMES)));
        id
    }

    /// Stack `id` as lines, as the snapshot lists its frames, then how many were left out;
    /// empty for the empty stack or an id not kept.
    pub fn lines(&self, id: u32) -> Vec<String> {
        let Some((ids, more)) = self.stacks.get(id as usize) else { return Vec::new() };
        let mut out: Vec<String> = ids.iter().map(|&f| self.frames[f as usize].clone()).collect();
        if *more > 0 {
            out.push(format!("… {more} more frames not kept"));
        }
        out
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
}
