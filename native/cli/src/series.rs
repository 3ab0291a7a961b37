//! A replay's memory over time: requested, allocated and reserved bytes after every
//! operation, kept in at most `BUCKETS` buckets holding each bucket's maximum (so the peak
//! survives), with the operations that ran out of memory.
//!
//! Invariant: the largest reserved value over the buckets equals the replay's peak reserved.

use cachalot_core::replay::Step;
use cachalot_core::{Allocator, Config, Replayer, SimDevice};

use super::input::NamedTrace;

/// Most points a series keeps.
pub const BUCKETS: usize = 1200;

/// One config's timeline.
pub struct Series {
    pub label: String,
    pub ops: usize,
    /// Per bucket: (first op, requested, allocated, reserved), maxima over the bucket.
    pub points: Vec<(usize, u64, u64, u64)>,
    /// Operations that ran out of memory, with reserved bytes at that moment.
    pub ooms: Vec<(usize, u64)>,
    /// Operation and value of the peak of reserved bytes.
    pub peak_reserved: (usize, u64),
}

/// Replays `t` under `config` and records its timeline.
pub fn record(t: &NamedTrace, config: &Config, capacity: u64) -> Result<Series, String> {
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, &t.trace), config.clone());
    let mut replayer = Replayer::new(t.trace.slots);
    let n = t.ops.len().max(1);
    let per = n.div_ceil(BUCKETS);
    let mut s = Series {
        label: config.to_config_string(),
        ops: n,
        points: Vec::with_capacity(BUCKETS),
        ooms: Vec::new(),
        peak_reserved: (0, 0),
    };
    t.steps(|i, op| {
        let step = replayer.step(&mut alloc, op).map_err(|e| format!("{}: operation {i}: {e}", t.name))?;
        let st = alloc.stats();
        let (req, all, res) =
            (st.requested_bytes.all.current as u64, st.allocated_bytes.all.current as u64, alloc.reserved_bytes());
        if matches!(step, Step::OutOfMemory(_)) {
            s.ooms.push((i, res));
        }
        if res > s.peak_reserved.1 {
            s.peak_reserved = (i, res);
        }
        if i % per == 0 {
            s.points.push((i, req, all, res));
        } else if let Some(p) = s.points.last_mut() {
            p.1 = p.1.max(req);
            p.2 = p.2.max(all);
            p.3 = p.3.max(res);
        }
        Ok(())
    })?;
    Ok(s)
}
