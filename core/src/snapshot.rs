//! Snapshots in the schema of PyTorch's `torch.cuda.memory._snapshot()`: every segment with
//! its blocks, and the recorded history as `device_traces`. Empty `frames` lists are
//! included so that PyTorch's memory_viz opens cachalot snapshots.
//!
//! Invariants: segments are sorted by address; each segment's blocks are in address order
//! and their sizes sum to `total_size`.

use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::allocator::Allocator;
use crate::block::{BlockState, NIL};
use crate::device::Device;
use crate::history::TraceEntry;

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

impl<D: Device> Allocator<D> {
    /// Every segment with its blocks, by address. A virtual range is reported as one
    /// segment per run of mapped memory (`is_expandable`), as PyTorch reports expandable
    /// segments; unmapped address space is left out.
    pub fn segments(&self, device: i32) -> Vec<SegmentInfo> {
        let mut out = Vec::new();
        for (head, b) in self.blocks.iter() {
            if b.prev != NIL {
                continue;
            }
            let mut current: Option<SegmentInfo> = None;
            let mut id = head;
            while id != NIL {
                let c = &self.blocks[id];
                let state = match c.state {
                    BlockState::Allocated => "active_allocated",
                    BlockState::PendingFree => "active_pending_free",
                    BlockState::Free => "inactive",
                    BlockState::Unmapped => {
                        out.extend(current.take());
                        id = c.next;
                        continue;
                    }
                };
                let seg = current.get_or_insert_with(|| SegmentInfo {
                    device,
                    address: c.addr,
                    total_size: 0,
                    allocated_size: 0,
                    active_size: 0,
                    requested_size: 0,
                    stream: self.streams.handle(c.stream_index),
                    segment_type: c.pool.name().into(),
                    is_expandable: c.in_vm,
                    blocks: Vec::new(),
                    frames: Vec::new(),
                });
                seg.total_size += c.size;
                if c.state == BlockState::Allocated {
                    seg.allocated_size += c.size;
                }
                if c.state != BlockState::Free {
                    seg.active_size += c.size;
                    seg.requested_size += c.requested();
                }
                // A cached block's field holds its cache stamp, not bytes: PyTorch reports
                // the stale size of the block's last allocation there, which is not kept.
                let requested_size = if c.state == BlockState::Free { 0 } else { c.requested() };
                seg.blocks.push(BlockInfo {
                    address: c.addr,
                    size: c.size,
                    requested_size,
                    state: state.into(),
                    frames: Vec::new(),
                });
                id = c.next;
            }
            out.extend(current);
        }
        out.sort_by_key(|s| s.address);
        out
    }

    /// The snapshot: segments and the recorded history.
    pub fn snapshot(&self, device: i32) -> Snapshot {
        Snapshot {
            segments: self.segments(device),
            device_traces: alloc::vec![self.history.entries().iter().map(TraceEntryInfo::from).collect()],
        }
    }

    /// The snapshot as JSON.
    pub fn snapshot_json(&self, device: i32) -> String {
        serde_json::to_string(&self.snapshot(device)).unwrap_or_default()
    }

    /// The statistics as `torch.cuda.memory_summary()` prints them.
    pub fn memory_summary(&self, device: i32, abbreviated: bool) -> String {
        crate::summary::memory_summary(&self.stats(), device, abbreviated)
    }
}
