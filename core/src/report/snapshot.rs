//! Snapshots in the schema of PyTorch's `torch.cuda.memory._snapshot()`: every segment with
//! its blocks, and the recorded history as `device_traces`. Empty `frames` lists are
//! included so that PyTorch's memory_viz opens cachalot snapshots.
//!
//! Invariants: segments are sorted by address; each segment's blocks are in address order
//! and their sizes sum to `total_size`.

use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::report::history::TraceEntry;

/// A block in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockInfo {
    /// Address of the block.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Bytes the caller asked for (0 when inactive).
    pub requested_size: u64,
    /// `active_allocated`, `active_pending_free` or `inactive`.
    pub state: String,
    /// Call stacks (always empty: the core records none).
    #[serde(default)]
    pub frames: Vec<serde_json::Value>,
}

/// A segment in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// Device ordinal.
    pub device: i32,
    /// Address of the segment.
    pub address: u64,
    /// Size in bytes.
    pub total_size: u64,
    /// Bytes of allocated blocks.
    pub allocated_size: u64,
    /// Bytes of allocated and pending blocks.
    pub active_size: u64,
    /// Bytes callers asked for in this segment.
    pub requested_size: u64,
    /// The stream the segment serves.
    pub stream: u64,
    /// `small` or `large`.
    pub segment_type: String,
    /// True for a growing virtual range (expandable segments).
    pub is_expandable: bool,
    /// The private pool the segment belongs to (`Allocator::create_pool`); 0, and left out of
    /// the JSON, for the allocator's own memory.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub private_pool: u32,
    /// The blocks, by address.
    pub blocks: Vec<BlockInfo>,
    /// Call stacks (always empty).
    #[serde(default)]
    pub frames: Vec<serde_json::Value>,
}

/// A whole snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Every segment, by address.
    pub segments: Vec<SegmentInfo>,
    /// One list of history entries per device (one device here).
    pub device_traces: Vec<Vec<TraceEntryInfo>>,
}

/// A history entry as PyTorch writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntryInfo {
    /// PyTorch's action name.
    pub action: String,
    /// Address (for `oom`: the device's free bytes).
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// Stream.
    pub stream: u64,
    /// Device clock in microseconds.
    pub time_us: u64,
    /// Call stacks (always empty).
    #[serde(default)]
    pub frames: Vec<serde_json::Value>,
}

impl From<&TraceEntry> for TraceEntryInfo {
    fn from(e: &TraceEntry) -> Self {
        let action = serde_json::to_value(e.action).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        TraceEntryInfo { action, addr: e.addr, size: e.size, stream: e.stream, time_us: e.time_us, frames: Vec::new() }
    }
}

/// True for 0: a field serde leaves out then.
fn is_zero(v: &u32) -> bool {
    *v == 0
}
