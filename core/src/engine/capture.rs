//! CUDA graph captures underway, treated as PyTorch's allocator treats them. Recording or
//! querying an event on a stream being captured is illegal (or is itself captured), so while
//! a capture is underway PyTorch processes no pending frees' events, and a block freed while
//! used on other streams (`record_stream`) gets no events yet: it waits, as a pending free,
//! until no capture is underway. Then the streams recorded as uses *during* the capture are
//! dropped (the capture's own work on them has run by the time the graph's work is waited
//! for, CUDA's rule for a capture's cross-stream dependencies) and events are recorded on the
//! rest; a block left with none is free at once.
//!
//! PyTorch 2.11 and 2.12 count a capture from `beginAllocateToPool` to `endAllocateToPool`;
//! 2.13 on, from `markCaptureBegin` to `markCaptureEnd`. The caller says which by calling
//! [`Allocator::begin_capture`] and [`Allocator::end_capture`]. cachalot records the deferred
//! events when the last capture ends; PyTorch records them at the next malloc after it, so its
//! events also cover work queued in between (never less than cachalot's).
//!
//! Invariants: `underway` counts begun captures not yet ended; a block is in `deferred` iff
//! it is a pending free with no event recorded (its `event_count` is 0); `deferred` is empty
//! whenever no capture is underway, unless recording an event failed at the end of the last
//! one (processing events tries again, as PyTorch records deferred events there).

use alloc::vec::Vec;

use super::allocator::Allocator;
use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::data::block::BlockState;

impl<D: Device> Allocator<D> {
    /// A CUDA graph capture begins: until it ends, no pending free's events are processed and
    /// a block freed while used on other streams records its events only after the capture.
    pub fn begin_capture(&mut self) -> Result<(), AllocError> {
        self.settle();
        self.captures.underway = self.captures.underway.checked_add(1).ok_or(AllocError::NoCaptureUnderway)?;
        Ok(())
    }

    /// A capture [`Allocator::begin_capture`] began has ended; when it was the last one, the
    /// deferred frees record their events (or are freed, when no use from before the
    /// captures remains). Refused when no capture is underway.
    pub fn end_capture(&mut self) -> Result<(), AllocError> {
        if self.captures.underway == 0 {
            return Err(AllocError::NoCaptureUnderway);
        }
        self.captures.underway -= 1;
        if self.captures.underway == 0 {
            self.insert_deferred_events()?;
        }
        Ok(())
    }

    /// Captures begun and not yet ended.
    pub fn captures_underway(&self) -> u32 {
        self.captures.underway
    }

    /// True while a capture is underway: events are neither processed nor recorded.
    #[inline]
    pub(crate) fn capturing(&self) -> bool {
        self.captures.underway > 0
    }

    /// `stream` was recorded as a use of live block `id`; during a capture it is noted, so
    /// that the block's events leave it out if the block is freed during the capture.
    pub(crate) fn note_use_during_capture(&mut self, id: u32, stream: Stream) {
        if self.capturing() {
            let during = self.captures.recorded_during.entry(id).or_default();
            if !during.contains(&stream) {
                during.push(stream);
            }
        }
    }

    /// Block `id`, freed with `uses`, waits for the captures to end (a capture is underway).
    pub(crate) fn defer_events(&mut self, id: u32, uses: Vec<Stream>) {
        self.captures.deferred.push((id, uses));
    }

    /// Block `id` is freed outside a capture: what was noted of its uses during one is stale.
    #[inline]
    pub(crate) fn forget_uses_during_capture(&mut self, id: u32) {
        if !self.captures.recorded_during.is_empty() {
            self.captures.recorded_during.remove(&id);
        }
    }

    /// After a failed [`Allocator::end_capture`]: the deferred frees left, once no capture is
    /// underway (called where events are processed).
    pub(crate) fn retry_deferred_events(&mut self) -> Result<(), AllocError> {
        if self.captures.deferred.is_empty() {
            return Ok(());
        }
        self.insert_deferred_events()
    }

    /// Records the events of every deferred free (less the streams used only during the
    /// captures); a block left without events is freed. On a device error the blocks not yet
    /// handled stay deferred.
    fn insert_deferred_events(&mut self) -> Result<(), AllocError> {
        while let Some((id, mut uses)) = self.captures.deferred.pop() {
            if let Some(during) = self.captures.recorded_during.remove(&id) {
                uses.retain(|s| !during.contains(s));
            }
            if let Err(e) = self.insert_events(id, &uses) {
                self.captures.deferred.push((id, uses));
                return Err(e);
            }
            if self.heap[id].event_count == 0 {
                debug_assert_eq!(self.heap[id].state, BlockState::PendingFree);
                self.pending_free_completed(id);
            }
        }
        // Uses noted during the captures of blocks still live stay uses, waited for when freed.
        self.captures.recorded_during.clear();
        Ok(())
    }
}
