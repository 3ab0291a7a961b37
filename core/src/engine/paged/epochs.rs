//! Free epochs: knowing, without waiting, that a stream's work no longer touches a free block.
//!
//! Unmapping memory does not wait for queued work (unlike freeing a segment), so before the
//! paged policy unmaps a free block's pages, or moves them to another stream's request, it
//! must be sure the work queued on the block's stream before the free has finished (a move
//! within the stream waits for nothing: the old mapping stays until then, see `vm.rs`).
//! Waiting for the whole stream each time stalls the host behind the device. Instead, each stream counts epochs: a block freed now is stamped
//! with the stream's current epoch; when the allocator next needs pages (a slow path), it
//! records one event on each stream that freed something since its last one, closing that
//! epoch, and polls older events. A block whose epoch has closed and whose event has
//! completed is safe to unmap at once; only the others wait for their stream.
//!
//! Invariants: `completed <= recorded` for every stream; a stamp `e` is safe iff
//! `e < completed`; events in `pending` have epochs `completed..recorded`, oldest first.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::base::device::{Device, Event, Stream};
use crate::base::error::AllocError;
use crate::data::streams::position_by_stream;

/// One stream's epochs.
#[derive(Clone, Debug)]
struct StreamEpochs {
    stream: Stream,
    /// Epochs closed by an event (or a synchronization) so far: the current epoch.
    recorded: u32,
    /// Epochs whose event has completed.
    completed: u32,
    /// True when a block was freed in the current epoch.
    dirty: bool,
    /// Events closing epochs not yet known to be complete: (epoch, event).
    pending: VecDeque<(u32, Event)>,
}

/// Every stream's epochs.
#[derive(Clone, Debug, Default)]
pub struct Epochs {
    streams: Vec<StreamEpochs>,
}

impl Epochs {
    /// Where `stream` is, or would go.
    #[inline]
    fn position(&self, stream: Stream) -> Result<usize, usize> {
        position_by_stream(&self.streams, stream, |s| s.stream)
    }

    /// Streams are kept sorted and found by binary search: every free under the paged policy
    /// looks its stream up, and a program may use thousands.
    fn get(&mut self, stream: Stream) -> &mut StreamEpochs {
        let i = match self.position(stream) {
            Ok(i) => i,
            Err(i) => self.add(i, stream),
        };
        &mut self.streams[i]
    }

    /// Gives a stream seen for the first time its epochs, at `i` in order.
    #[cold]
    fn add(&mut self, i: usize, stream: Stream) -> usize {
        let fresh = StreamEpochs { stream, recorded: 0, completed: 0, dirty: false, pending: VecDeque::new() };
        self.streams.insert(i, fresh);
        i
    }

    /// The stamp for a block freed now on `stream`.
    #[inline]
    pub fn freed(&mut self, stream: Stream) -> u32 {
        let s = self.get(stream);
        s.dirty = true;
        s.recorded
    }

    /// True when the work queued on `stream` before a block stamped `stamp` was freed has
    /// finished.
    pub fn is_safe(&self, stream: Stream, stamp: u32) -> bool {
        match self.position(stream) {
            Ok(i) => stamp < self.streams[i].completed,
            Err(_) => false,
        }
    }

    /// Records that `stream` was just synchronized: every epoch so far is complete.
    pub fn synchronized(&mut self, stream: Stream) {
        let s = self.get(stream);
        s.recorded += 1;
        s.completed = s.recorded;
        s.dirty = false;
    }
}

impl Epochs {
    /// Polls the events closing epochs and closes the current epoch of every stream that
    /// freed a block in it. Called where pages may be moved (a slow path).
    pub(crate) fn advance<D: Device>(&mut self, device: &mut D) -> Result<(), AllocError> {
        for s in self.streams.iter_mut() {
            while let Some(&(epoch, event)) = s.pending.front() {
                if !device.query_event(event)? {
                    break;
                }
                device.release_event(event);
                s.pending.pop_front();
                s.completed = s.completed.max(epoch + 1);
            }
            if s.dirty {
                let event = device.record_event(s.stream)?;
                s.pending.push_back((s.recorded, event));
                s.recorded += 1;
                s.dirty = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_become_safe_once_their_epoch_closes_and_completes() {
        let mut e = Epochs::default();
        let a = e.freed(3);
        assert!(!e.is_safe(3, a));
        e.synchronized(3);
        assert!(e.is_safe(3, a));
        let b = e.freed(3);
        assert!(!e.is_safe(3, b), "freed after the synchronization");
        assert!(!e.is_safe(4, 0), "an unknown stream is never safe");
    }
}
