//! A trace being stepped through on an allocator: the trace, the replayer's slot table and
//! how far it has got. Refused allocations (out of memory) are counted and skipped, as the
//! core's replay engine does and as `cachalot replay` counts them.
//!
//! Invariant: `position` operations of the trace have been executed on the allocator this
//! cursor drives, since that allocator was fresh.

use std::rc::Rc;

use cachalot_core::replay::{ReplayError, Step};
use cachalot_core::{Allocator, Replayer, SimDevice, Trace};

/// Progress through a trace.
pub struct TraceCursor {
    pub trace: Rc<Trace>,
    replayer: Replayer,
    pub position: usize,
    /// Allocations refused so far.
    pub ooms: u64,
    /// The most recent refusal: operation index and the full message.
    pub last_oom: Option<String>,
}

impl TraceCursor {
    /// A cursor at the start of `trace`.
    pub fn new(trace: Rc<Trace>) -> TraceCursor {
        let replayer = Replayer::new(trace.slots);
        TraceCursor { trace, replayer, position: 0, ooms: 0, last_oom: None }
    }

    /// The same trace from its start (for a fresh allocator).
    pub fn rewound(&self) -> TraceCursor {
        TraceCursor::new(self.trace.clone())
    }

    /// Executes up to `n` operations; returns how many ran.
    pub fn step(&mut self, alloc: &mut Allocator<SimDevice>, n: usize) -> Result<usize, ReplayError> {
        let end = self.position.saturating_add(n).min(self.trace.ops.len());
        let start = self.position;
        for i in start..end {
            match self.replayer.step(alloc, &self.trace.ops[i]) {
                Ok(Step::OutOfMemory(report)) => {
                    self.ooms += 1;
                    self.last_oom = Some(format!("operation {i}: {report}"));
                }
                Ok(_) => {}
                Err(error) => {
                    self.position = i;
                    return Err(ReplayError { op: i, error });
                }
            }
            self.position = i + 1;
        }
        Ok(end - start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::{parse_trace, Config};

    #[test]
    fn steps_stop_at_the_end_and_count_refusals() {
        let t =
            parse_trace("Time,Action,Pointer,Size\n1,allocate,0x10,4096\n2,allocate,0x20,999999999\n3,free,0x10,0\n")
                .unwrap();
        let mut a = Allocator::new(SimDevice::new(64 << 20), Config::pytorch());
        let mut c = TraceCursor::new(Rc::new(t));
        assert_eq!(c.step(&mut a, 2).unwrap(), 2);
        assert_eq!(c.ooms, 1);
        assert!(c.last_oom.as_deref().unwrap().starts_with("operation 1: out of memory"));
        assert_eq!(c.step(&mut a, 10).unwrap(), 1);
        assert_eq!(c.position, 3);
        assert_eq!(c.step(&mut a, 10).unwrap(), 0);
        assert_eq!(a.stats().allocated_bytes.all.current, 0);
    }
}
