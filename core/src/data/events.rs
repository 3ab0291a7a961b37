//! Pending frees: blocks freed while still in use on other streams wait here for the
//! events recorded on those streams at free time.
//!
//! Invariant (kept by the allocator): a block is in the `PendingFree` state iff its
//! `event_count` equals the number of queued entries naming it, and that count is > 0, or it
//! waits, with no event yet, for the CUDA graph captures underway to end (`capture.rs`).
//! Queues are per stream, so a slow stream does not hold up blocks waiting on a fast one.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::base::device::{Event, Stream};

/// Queued (event, block id) pairs, one queue per stream, oldest first.
#[derive(Clone, Debug, Default)]
pub struct PendingEvents {
    queues: Vec<(Stream, VecDeque<(Event, u32)>)>,
}

impl PendingEvents {
    /// True when no event is outstanding.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Queues an event recorded on `stream` for block `id`.
    pub fn push(&mut self, stream: Stream, event: Event, id: u32) {
        match self.queues.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, q)) => q.push_back((event, id)),
            None => self.queues.push((stream, VecDeque::from([(event, id)]))),
        }
    }

    /// Number of streams with outstanding events.
    pub fn streams(&self) -> usize {
        self.queues.len()
    }

    /// The oldest event of the `i`th stream's queue.
    pub fn front(&self, i: usize) -> Option<(Event, u32)> {
        self.queues[i].1.front().copied()
    }

    /// Drops the oldest event of the `i`th stream's queue.
    pub fn pop_front(&mut self, i: usize) {
        self.queues[i].1.pop_front();
    }

    /// Forgets streams whose queues are empty.
    pub fn drop_empty(&mut self) {
        self.queues.retain(|(_, q)| !q.is_empty());
    }

    /// Every queued pair, for invariant checks.
    pub fn iter(&self) -> impl Iterator<Item = (Stream, Event, u32)> + '_ {
        self.queues.iter().flat_map(|(s, q)| q.iter().map(move |&(e, id)| (*s, e, id)))
    }
}
