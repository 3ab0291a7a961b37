//! What `TraceFile` tells JavaScript of the recorded run itself (`recorded_run.rs`): its
//! figures, its bytes after each operation, the stack frames of its events, segments and
//! blocks, and every allocation's lifetime as a band (the active-memory timeline's input).
//!
//! Invariants: the per-operation arrays have one value (or one band per allocation) in
//! operation order; a trace not read from a snapshot (RMM CSV) has no recorded run
//! (`undefined`), but has bands, with no stack ([`NONE`]).

use cachalot_core::TraceOp;
use wasm_bindgen::prelude::*;

use crate::error::js_error;
use crate::js_argument::whole;
use crate::trace_file::TraceFile;
use cachalot_core::trace::frame_table::NONE;

/// Numbers of one band: first operation, the operation that frees it (the trace's length
/// when never freed), its size in bytes, its stack id.
pub const BAND_FIELDS: usize = 4;

/// Each allocation of `ops` as `[start, end, size, stack]`, in operation order.
pub fn bands(ops: &[TraceOp], stacks: &[u32]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let end_of = |out: &mut Vec<f64>, open: &mut Vec<usize>, slot: u32, at: usize| {
        if let Some(b) = open.get_mut(slot as usize).filter(|b| **b != usize::MAX) {
            out[*b * BAND_FIELDS + 1] = at as f64;
            *b = usize::MAX;
        }
    };
    for (i, op) in ops.iter().enumerate() {
        match *op {
            TraceOp::Alloc { slot, size, .. } => {
                let slot = slot as usize;
                if open.len() <= slot {
                    open.resize(slot + 1, usize::MAX);
                }
                open[slot] = out.len() / BAND_FIELDS;
                let stack = stacks.get(i).copied().unwrap_or(NONE);
                out.extend([i as f64, ops.len() as f64, size as f64, f64::from(stack)]);
            }
            TraceOp::Free { slot } | TraceOp::FreeDeferred { slot, .. } => end_of(&mut out, &mut open, slot, i),
            TraceOp::FreeCompleted { .. } => {}
        }
    }
    out
}

#[wasm_bindgen]
impl TraceFile {
    /// The recorded run's own figures as JSON (`recorded_run::RecordedFigures`: peaks,
    /// segments, device allocations, OOMs, what was held before the history), or
    /// `undefined` for a trace not read from a snapshot.
    pub fn recorded_json(&self) -> Option<String> {
        self.recorded.as_ref().map(|r| serde_json::to_string(&r.figures).unwrap_or_default())
    }

    /// The recorded run's reserved bytes after each operation (`undefined` without a snapshot).
    pub fn recorded_reserved(&self) -> Option<Vec<f64>> {
        self.recorded.as_ref().map(|r| r.reserved.clone())
    }

    /// The recorded run's allocated bytes after each operation (`undefined` without a snapshot).
    pub fn recorded_allocated(&self) -> Option<Vec<f64>> {
        self.recorded.as_ref().map(|r| r.allocated.clone())
    }

    /// Every allocation as a band, `[start, end, size, stack]` each (Float64Array): the
    /// operation that makes it, the one that frees it (the trace's length if none does), its
    /// size as recorded, and its stack id (4294967295: none kept).
    pub fn bands(&self) -> Vec<f64> {
        let stacks = self.recorded.as_ref().map_or(&[][..], |r| r.op_stacks.as_slice());
        bands(&self.trace.ops, stacks)
    }

    /// Per segment of `snapshot_map()`, in its order: the segment's stack id, its block
    /// count, then each block's stack id (Uint32Array; empty without a snapshot).
    pub fn segment_stacks(&self) -> Vec<u32> {
        self.recorded.as_ref().map_or_else(Vec::new, |r| r.segment_stacks.clone())
    }

    /// Stack `id`'s frames, one line each ("name (filename:line)"), as the snapshot lists
    /// them; empty for none. Throws if `id` is not a whole number.
    pub fn stack_frames(&self, id: &JsValue) -> Result<Vec<String>, JsError> {
        let id = whole(id, "stack id")?;
        let id = u32::try_from(id).map_err(|_| js_error(format!("stack id {id} is past any stack")))?;
        Ok(self.recorded.as_ref().map_or_else(Vec::new, |r| r.frames.lines(id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_allocation_is_a_band_from_its_alloc_to_its_free() {
        let t = cachalot_core::parse_trace(
            "Time,Action,Pointer,Size\n1,allocate,0x10,2048\n2,allocate,0x20,512\n3,free,0x10,2048\n4,allocate,0x10,100\n",
        )
        .unwrap();
        let b = bands(&t.ops, &[7]);
        assert_eq!(b, [0.0, 2.0, 2048.0, 7.0, 1.0, 4.0, 512.0, f64::from(NONE), 3.0, 4.0, 100.0, f64::from(NONE)]);
    }
}
