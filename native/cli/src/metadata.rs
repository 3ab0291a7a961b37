//! The host memory of the core's block metadata over a replay, measured honestly: the peak
//! of the bytes that grow with blocks, against the peak number of blocks alive at once.
//!
//! Both peaks are taken over the same untimed replay — the cold pass and the first warm pass,
//! sampled after every operation — because capacity the core gives back is only visible
//! while it is held, and a warm pass can split the cache into more blocks than the first.
//! Invariant: `bytes_per_block` is at least what any single moment of that replay held per
//! live block.

use cachalot_core::{Allocator, Config, Replayer, SimDevice};

use super::input::NamedTrace;

/// Peaks of one replay.
pub struct MetadataPeak {
    /// Most blocks alive at once.
    pub blocks: usize,
    /// Most bytes of metadata that grows with blocks held at once.
    pub bytes: usize,
    /// Most bytes of fixed metadata (per pool and stream) held at once.
    pub fixed_bytes: usize,
}

impl MetadataPeak {
    /// Peak bytes over peak blocks.
    pub fn bytes_per_block(&self) -> f64 {
        self.bytes as f64 / self.blocks.max(1) as f64
    }
}

/// Replays `t` under `config` twice on one allocator, sampling after every operation.
pub fn measure(t: &NamedTrace, config: &Config, capacity: u64) -> Result<MetadataPeak, String> {
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, &t.trace), config.clone());
    let mut replayer = Replayer::new(t.trace.slots);
    let mut peak = MetadataPeak { blocks: 0, bytes: 0, fixed_bytes: 0 };
    let mut sample = |alloc: &mut Allocator<SimDevice>| {
        let (bytes, fixed) = alloc.metadata_bytes();
        peak.blocks = peak.blocks.max(alloc.live_blocks());
        peak.bytes = peak.bytes.max(bytes);
        peak.fixed_bytes = peak.fixed_bytes.max(fixed);
    };
    for _pass in 0..2 {
        t.steps(|i, op| {
            replayer.step(&mut alloc, op).map_err(|e| format!("{}: operation {i}: {e}", t.name))?;
            sample(&mut alloc);
            Ok(())
        })?;
        replayer.free_live(&mut alloc).map_err(|e| format!("{}: {e}", t.name))?;
        sample(&mut alloc);
    }
    Ok(peak)
}
