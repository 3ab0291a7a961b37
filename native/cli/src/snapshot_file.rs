//! `replay --snapshot OUT.json|OUT.pickle`: the replayed run's snapshot in the schema of
//! PyTorch's `torch.cuda.memory._snapshot()`, so that a replay under another config opens in
//! PyTorch's memory viewer (`torch/cuda/_memory_viz.py`, pytorch.org/memory_viz) next to the
//! recorded run. Segments and blocks are the allocator's at the end of the trace (before what
//! it left live is freed); `device_traces` is its history of the whole trace.
//!
//! Frames and times come from the input: the k-th `alloc` entry of the history is the k-th
//! allocation the replay made, so it takes that operation's recorded time and, for a
//! snapshot, the frames its event recorded; `free_requested` and `oom` entries likewise;
//! a `segment_alloc` or `segment_map` takes the allocation it was made for (the next one), any
//! other entry the operation before it. A live block carries the frames of the allocation
//! that holds it.
//!
//! Invariants: the path ends in `.json` or `.pickle` (checked before any replay); every
//! history entry of the replay is written, none dropped (the history holds them all); an
//! `oom` entry carries `device_free`, which PyTorch's viewer reads.

use std::path::Path;

use cachalot_cli::pickle_snapshot;
use cachalot_cli::trace_file::Input;
use cachalot_core::replay::Step;
use cachalot_core::{Allocator, Config, Replayer, SimDevice};
use serde_json::{json, Value};

use super::input::NamedTrace;
use super::Failure;

/// How the snapshot is written, by the file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Pickle,
}

/// A checked `--snapshot` path.
pub struct SnapshotFile {
    path: String,
    encoding: Encoding,
}

impl SnapshotFile {
    /// Checks `path`'s extension and folder, before any replay runs.
    pub fn claim(path: &str) -> Result<SnapshotFile, Failure> {
        let p = Path::new(path);
        let encoding = match p.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("json") => Encoding::Json,
            Some("pickle" | "pkl") => Encoding::Pickle,
            _ => {
                return Err(Failure::Usage(format!(
                "--snapshot {path}: name a file ending in .json or .pickle (PyTorch's memory viewer reads the pickle)"
            )))
            }
        };
        if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
            return Err(Failure::Error(format!("cannot write snapshot {path}: folder {} does not exist", d.display())));
        }
        Ok(SnapshotFile { path: path.into(), encoding })
    }

    /// Replays `t` under `config` and writes its snapshot; returns the path written.
    pub fn write(&self, t: &NamedTrace, config: &Config, capacity: u64) -> Result<&str, Failure> {
        let snapshot = replayed_snapshot(t, config, capacity)?;
        let bytes = match self.encoding {
            Encoding::Json => serde_json::to_vec(&snapshot).map_err(|e| e.to_string())?,
            Encoding::Pickle => pickle_snapshot::from_json(&snapshot)?,
        };
        std::fs::write(&self.path, bytes).map_err(|e| format!("cannot write snapshot {}: {e}", self.path))?;
        Ok(&self.path)
    }
}

/// What a history entry is anchored to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Anchor {
    Alloc,
    Free,
    Oom,
}

/// The snapshot of a replay of `t` under `config`, frames and times from the input.
pub fn replayed_snapshot(t: &NamedTrace, config: &Config, capacity: u64) -> Result<Value, String> {
    let mut config = config.clone();
    // Every entry of the trace kept: each operation makes a few (segment, map, free completed).
    config.history_entries = t.ops.len().saturating_mul(6).saturating_add(64);
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, &t.trace), config);
    let mut replayer = Replayer::new(t.trace.slots);
    let (mut allocs, mut frees, mut ooms) = (Vec::new(), Vec::new(), Vec::new());
    // Each operation's time and place, for its entries: the snapshot's history holds a few
    // entries per operation anyway.
    let (mut times, mut positions) = (Vec::with_capacity(t.ops.len()), Vec::with_capacity(t.ops.len()));
    t.pieces(|p| {
        times.extend_from_slice(&p.times_us);
        positions.extend_from_slice(&p.positions);
        for (k, op) in p.ops.iter().enumerate() {
            let i = p.first + k;
            match replayer.step(&mut alloc, op).map_err(|e| format!("{}: operation {i}: {e}", t.name))? {
                Step::Allocated(_) => allocs.push(i),
                Step::Freed(_) => frees.push(i),
                Step::OutOfMemory(_) => ooms.push(i),
                Step::Skipped => {}
            }
        }
        Ok(())
    })?;
    let mut snapshot = serde_json::to_value(alloc.snapshot(0)).map_err(|e| e.to_string())?;
    let entries = snapshot["device_traces"][0].as_array_mut().map(std::mem::take).unwrap_or_default();
    let anchored = anchor_ops(&entries, &allocs, &frees, &ooms);
    let frames_of = |op: usize| input_frames(t, positions.get(op));
    let mut live_frames: std::collections::HashMap<u64, Value> = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    for (mut e, op) in entries.into_iter().zip(anchored) {
        if let Some(op) = op {
            if let Some(&time) = times.get(op) {
                e["time_us"] = json!(time);
            }
            e["frames"] = frames_of(op);
        }
        let addr = e["addr"].as_u64().unwrap_or(0);
        match e["action"].as_str() {
            Some("alloc") => {
                live_frames.insert(addr, e["frames"].clone());
            }
            Some("free_completed") => {
                live_frames.remove(&addr);
            }
            Some("oom") => e["device_free"] = json!(addr),
            _ => {}
        }
        out.push(e);
    }
    snapshot["device_traces"][0] = Value::Array(out);
    for segment in snapshot["segments"].as_array_mut().into_iter().flatten() {
        for block in segment["blocks"].as_array_mut().into_iter().flatten() {
            if block["state"] != "inactive" {
                if let Some(f) = block["address"].as_u64().and_then(|a| live_frames.get(&a)) {
                    block["frames"] = f.clone();
                }
            }
        }
    }
    snapshot["allocator_settings"] = json!({ "cachalot_config": alloc.config().to_config_string() });
    Ok(snapshot)
}

/// The operation each history entry belongs to (see the module's comment).
fn anchor_ops(entries: &[Value], allocs: &[usize], frees: &[usize], ooms: &[usize]) -> Vec<Option<usize>> {
    let kind = |e: &Value| match e["action"].as_str() {
        Some("alloc") => Some(Anchor::Alloc),
        Some("free_requested") => Some(Anchor::Free),
        Some("oom") => Some(Anchor::Oom),
        _ => None,
    };
    let (mut a, mut f, mut o) = (0, 0, 0);
    let mut own: Vec<Option<usize>> = entries
        .iter()
        .map(|e| {
            let (list, k) = match kind(e)? {
                Anchor::Alloc => (allocs, &mut a),
                Anchor::Free => (frees, &mut f),
                Anchor::Oom => (ooms, &mut o),
            };
            *k += 1;
            list.get(*k - 1).copied()
        })
        .collect();
    // Entries between anchors: made for the next allocation, or after the previous operation.
    let mut next: Option<usize> = None;
    let mut made_for_next = vec![None; entries.len()];
    for i in (0..entries.len()).rev() {
        if kind(&entries[i]).is_some() {
            next = own[i];
        } else if matches!(entries[i]["action"].as_str(), Some("segment_alloc" | "segment_map")) {
            made_for_next[i] = next;
        }
    }
    let mut previous: Option<usize> = None;
    for i in 0..entries.len() {
        if kind(&entries[i]).is_some() {
            previous = own[i];
        } else {
            own[i] = made_for_next[i].or(previous).or(next);
        }
    }
    own
}

/// The frames the input recorded for the operation at `position` (an empty list for a CSV).
fn input_frames(t: &NamedTrace, position: Option<&cachalot_core::Position>) -> Value {
    let (Input::Snapshot { frames, .. }, Some(&cachalot_core::Position::Event(i))) = (&t.input, position) else {
        return json!([]);
    };
    Value::Array(t.input.snapshot_event(i).map_or_else(Vec::new, |e| frames.frames(e.stack)))
}
