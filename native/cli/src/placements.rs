//! Whether a replay placed its segments where the recorded run did: how many placements the
//! trace gave (recorded `segment_alloc` entries, or inferred from its pointers), how many the
//! cold pass followed, and, where it gave them up, at which operation and why. `replay
//! --json` gives it as `segment_placements_*` fields.
//!
//! Invariant: `abandoned` is present iff the cold pass's device gave its placements up; its
//! operation is the one whose allocation asked for the segment that could not follow (found
//! by replaying again, step by step, only then).

use cachalot_core::replay::Step;
use cachalot_core::sim::PlacementAbandoned;
use cachalot_core::{Allocator, Config, Position, Replayer, SimDevice};
use serde::Serialize;

use super::input::NamedTrace;

/// Where and why a replay stopped following the run's placements.
#[derive(Serialize, Debug, Clone)]
pub struct Abandoned {
    /// 0-based index of the operation among the trace's operations.
    pub operation: usize,
    /// The CSV line (1-based) or snapshot event (0-based) it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<u32>,
    /// What the device saw.
    #[serde(flatten)]
    pub device: PlacementAbandoned,
    /// The reason in words.
    pub why: String,
}

impl Abandoned {
    /// "operation N (CSV line L): why".
    pub fn describe(&self) -> String {
        let at = match (self.line, self.event) {
            (Some(l), _) => format!(" (line {l})"),
            (_, Some(e)) => format!(" (event {e})"),
            _ => String::new(),
        };
        format!("given up at operation {}{at}: {}", self.operation, self.why)
    }
}

/// Finds the operation at which a replay of `t` under `config` gives up the trace's
/// placements, with the device's reason; `None` when it follows them to the end.
pub fn locate(t: &NamedTrace, config: &Config, capacity: u64) -> Result<Option<Abandoned>, String> {
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, &t.trace), config.clone());
    let mut replayer = Replayer::new(t.trace.slots);
    let mut found = None;
    // The spooled operations come a piece at a time; those after the one found are read
    // but not replayed.
    t.pieces(|p| {
        for (k, op) in p.ops.iter().enumerate() {
            if found.is_some() {
                break;
            }
            let i = p.first + k;
            match replayer.step(&mut alloc, op) {
                Err(e) => return Err(format!("{}: operation {i}: {e}", t.name)),
                Ok(Step::Allocated(_) | Step::OutOfMemory(_)) => {
                    if let Some(device) = alloc.device().placements_abandoned() {
                        let (line, event) = match p.positions[k] {
                            Position::Line(l) => (Some(l), None),
                            Position::Event(e) => (None, Some(e)),
                        };
                        found = Some(Abandoned { operation: i, line, event, device, why: device.to_string() });
                    }
                }
                Ok(_) => {}
            }
        }
        Ok(())
    })?;
    Ok(found)
}
