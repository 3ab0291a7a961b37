//! Stream-ordered reuse: the events a free records on the streams that used its block, and
//! completing the frees whose events are done (at each malloc, or all at once by waiting).
//!
//! Invariant: a pending free's `event_count` equals its events queued; no event is queried
//! or waited on during a CUDA graph capture.

use alloc::vec::Vec;

use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::engine::allocator::Allocator;

impl<D: Device> Allocator<D> {
    /// Records `uses` as events on their streams for block `id`. On failure nothing stays
    /// recorded.
    pub(crate) fn insert_events(&mut self, id: u32, uses: &[Stream]) -> Result<(), AllocError> {
        let mut recorded = Vec::with_capacity(uses.len());
        for &s in uses {
            match self.device.record_event(s) {
                Ok(e) => recorded.push((s, e)),
                Err(err) => {
                    for (_, e) in recorded {
                        self.device.release_event(e);
                    }
                    return Err(err.into());
                }
            }
        }
        self.heap[id].event_count = recorded.len() as u8;
        for (s, e) in recorded {
            self.events.push(s, e, id);
        }
        Ok(())
    }

    /// Completes pending frees whose events are done (called at each malloc); returns how
    /// many blocks became reusable.
    pub(crate) fn process_events(&mut self) -> Result<u64, AllocError> {
        if self.capturing() {
            return Ok(0); // querying an event is illegal during a capture
        }
        self.retry_deferred_events()?;
        let mut completed = 0;
        for i in 0..self.events.streams() {
            while let Some((event, id)) = self.events.front(i) {
                if !self.device.query_event(event)? {
                    break;
                }
                self.events.pop_front(i);
                self.device.release_event(event);
                completed += self.event_completed(id) as u64;
            }
        }
        self.events.drop_empty();
        Ok(completed)
    }

    /// Waits for every pending event and completes the frees waiting on them.
    pub(crate) fn synchronize_and_free_events(&mut self) -> Result<(), AllocError> {
        if self.capturing() {
            return Ok(()); // waiting on an event is illegal during a capture
        }
        self.retry_deferred_events()?;
        self.heap.stats_mut().num_sync_all_streams += 1;
        for i in 0..self.events.streams() {
            while let Some((event, id)) = self.events.front(i) {
                self.device.synchronize_event(event)?;
                self.events.pop_front(i);
                self.device.release_event(event);
                self.event_completed(id);
            }
        }
        self.events.drop_empty();
        Ok(())
    }

    /// One of block `id`'s events completed; true if that completed its free.
    pub(crate) fn event_completed(&mut self, id: u32) -> bool {
        let b = &mut self.heap[id];
        b.event_count -= 1;
        let done = b.event_count == 0;
        if done {
            self.pending_free_completed(id);
        }
        done
    }

    /// Pending free `id` waits for nothing more: it becomes a free block.
    pub(crate) fn pending_free_completed(&mut self, id: u32) {
        let (pool, size) = (self.heap[id].pool, self.heap[id].size);
        self.heap.stats_mut().active.ended(pool, 1);
        self.heap.stats_mut().active_bytes.ended(pool, size);
        self.free_block::<false, false>(id);
    }
}
