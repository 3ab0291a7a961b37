//! Shared by the benchmarks: the reference traces, and peer range allocators driven by the
//! same operation sequence so their CPU cost per operation can be set beside cachalot's.
//!
//! The peers are general-purpose offset allocators, not caching allocators: they place
//! every request in one address range and never talk to a device. They replay the same
//! trace in 512-byte units, which is the fairest common ground for CPU cost.

use std::io::Read;
use std::path::PathBuf;

use cachalot_core::{parse_trace, Trace, TraceOp};

/// The reference trace files.
pub const TRACES: [&str; 3] = ["gpt2_train.csv.gz", "resnet50_train.csv.gz", "mixed_fc_conv.csv.gz"];

/// A reference trace, gunzipped and parsed.
pub fn load_trace(name: &str) -> Trace {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces").join(name);
    let bytes = std::fs::read(&path).expect("reference trace");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut text).expect("gzip");
    parse_trace(&text).expect("trace parses")
}

/// An offset allocator that can replay a trace in 512-byte units.
pub trait Peer {
    /// Name shown in reports.
    const NAME: &'static str;
    /// Handle the peer needs to free an allocation.
    type Handle: Copy;
    /// A fresh allocator over `units` units.
    fn new(units: u32) -> Self;
    /// Allocates `units` units.
    fn alloc(&mut self, units: u32) -> Option<Self::Handle>;
    /// Frees an allocation.
    fn free(&mut self, h: Self::Handle);
}

/// One pass of a trace through a peer; frees what the trace leaves live.
pub fn replay_peer<P: Peer>(peer: &mut P, trace: &Trace, slots: &mut [Option<P::Handle>]) {
    for op in &trace.ops {
        match *op {
            TraceOp::Alloc { slot, size, .. } => {
                let units = size.div_ceil(512) as u32;
                slots[slot as usize] = Some(peer.alloc(units).expect("peer allocator out of space"));
            }
            TraceOp::Free { slot } | TraceOp::FreeDeferred { slot, .. } => {
                if let Some(h) = slots[slot as usize].take() {
                    peer.free(h);
                }
            }
            TraceOp::FreeCompleted { .. } => {}
        }
    }
    for s in slots.iter_mut() {
        if let Some(h) = s.take() {
            peer.free(h);
        }
    }
}

/// Units of address space every peer gets: 256 GiB in 512-byte units.
pub const PEER_UNITS: u32 = (256u64 << 30 >> 9) as u32;

pub struct OffsetAllocator(offset_allocator::Allocator<u32>);

impl Peer for OffsetAllocator {
    const NAME: &'static str = "offset-allocator";
    type Handle = offset_allocator::Allocation<u32>;
    fn new(units: u32) -> Self {
        OffsetAllocator(offset_allocator::Allocator::with_max_allocs(units, 1 << 20))
    }
    fn alloc(&mut self, units: u32) -> Option<Self::Handle> {
        self.0.allocate(units)
    }
    fn free(&mut self, h: Self::Handle) {
        self.0.free(h)
    }
}

pub struct RangeAlloc(range_alloc::RangeAllocator<u32>);

impl Peer for RangeAlloc {
    const NAME: &'static str = "range-alloc";
    type Handle = (u32, u32);
    fn new(units: u32) -> Self {
        RangeAlloc(range_alloc::RangeAllocator::new(0..units))
    }
    fn alloc(&mut self, units: u32) -> Option<Self::Handle> {
        self.0.allocate_range(units).ok().map(|r| (r.start, r.end))
    }
    fn free(&mut self, h: Self::Handle) {
        self.0.free_range(h.0..h.1)
    }
}

pub struct Buddy(buddy_system_allocator::FrameAllocator<33>);

impl Peer for Buddy {
    const NAME: &'static str = "buddy_system_allocator";
    type Handle = (usize, usize);
    fn new(units: u32) -> Self {
        let mut f = buddy_system_allocator::FrameAllocator::<33>::new();
        f.add_frame(0, units as usize);
        Buddy(f)
    }
    fn alloc(&mut self, units: u32) -> Option<Self::Handle> {
        self.0.alloc(units as usize).map(|start| (start, units as usize))
    }
    fn free(&mut self, h: Self::Handle) {
        self.0.dealloc(h.0, h.1)
    }
}
