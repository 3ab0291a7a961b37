//! Reading a snapshot ([`crate::snapshot`], PyTorch's schema) off the allocator: its segments
//! with their blocks, and the recorded history.
//!
//! Invariants: those of [`crate::snapshot`]; reading changes nothing (`&self`).

use alloc::string::String;
use alloc::vec::Vec;

use crate::base::device::Device;
use crate::data::block::{BlockState, NIL};
use crate::engine::allocator::Allocator;
use crate::report::snapshot::{BlockInfo, SegmentInfo, Snapshot, TraceEntryInfo};

impl<D: Device> Allocator<D> {
    /// Every segment with its blocks, by address. A virtual range is reported as one
    /// segment per run of mapped memory (`is_expandable`), as PyTorch reports expandable
    /// segments; unmapped address space is left out.
    pub fn segments(&self, device: i32) -> Vec<SegmentInfo> {
        let mut out = Vec::new();
        for (head, b) in self.heap.blocks() {
            if b.prev != NIL {
                continue;
            }
            let mut current: Option<SegmentInfo> = None;
            let mut id = head;
            while id != NIL {
                let c = &self.heap[id];
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
                    stream: self.heap.stream_of_lane(c.stream_index),
                    segment_type: c.pool.name().into(),
                    is_expandable: c.in_vm,
                    private_pool: self.heap.lanes().owner(c.stream_index),
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
        crate::report::summary::memory_summary(&self.stats(), device, abbreviated)
    }
}
