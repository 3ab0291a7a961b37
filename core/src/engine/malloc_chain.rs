//! PyTorch's malloc as one chain, in its order: process events → round → pool → find a
//! free block → allocate a segment → release every cached segment and retry → out of memory
//! ([`Allocator::malloc_chain`]). Each step is a call; how a segment (or a range's pages) is
//! got is the growth seam's (`growth.rs`), so classic segments, expandable segments and
//! cachalot's paged policy share the chain.
//!
//! The chain exists twice, from one source: a copy for the plain case (see
//! [`Allocator::plain`]), compiled without the tests for virtual memory, garbage collection,
//! explaining and the history, and the general copy. In the plain case the two decide alike;
//! the rules tests fail if the plain test misses a setting the plain copy leaves out.
//!
//! Invariant: a malloc that fails changes no block; one that succeeds hands out exactly one
//! block, allocated, in the live map.

use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::base::size::{round_size, round_size_by_rule, segment_size, Pool, MAX_REQUEST};
use crate::data::block::NIL;
use crate::engine::allocator::Allocator;
use crate::engine::paged::recurrence::Signature;
use crate::engine::vrange::VmMode;
use crate::report::explain::Decision;

/// Whether the chain takes its last resort itself, or leaves it to its caller.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastResort {
    Take,
    Leave,
}

impl<D: Device> Allocator<D> {
    /// Allocates `size` bytes for use on `stream` and returns the address: PyTorch's malloc
    /// ([`Allocator::malloc_chain`]) on the memory the request goes to (a private pool's, when
    /// its stream is routed to one), unless the decision memo answers it.
    #[inline]
    pub fn malloc(&mut self, size: u64, stream: Stream) -> Result<u64, AllocError> {
        match self.malloc_until(size, stream, LastResort::Take)? {
            Some(addr) => Ok(addr),
            // Only a chain told to leave its last resort stops short of it.
            None => self.malloc_after_release(size, stream),
        }
    }

    /// [`Allocator::malloc`] up to, not including, its last resort: `Ok(None)` when nothing
    /// but releasing every cached segment and retrying
    /// ([`Allocator::malloc_after_release`]) could serve the request. A caller whose other
    /// allocators hold cached memory (the native library's per-stream shards) returns theirs
    /// to the device in between, so that together they do what PyTorch's one allocator does.
    #[inline(always)]
    pub fn malloc_short_of_release(&mut self, size: u64, stream: Stream) -> Result<Option<u64>, AllocError> {
        self.malloc_until(size, stream, LastResort::Leave)
    }

    /// The rest of a [`Allocator::malloc`] that [`Allocator::malloc_short_of_release`] left
    /// undone: the chain's last two steps, release every cached segment (or idle page) and
    /// retry, or out of memory.
    pub fn malloc_after_release(&mut self, size: u64, stream: Stream) -> Result<u64, AllocError> {
        self.settle();
        check_request(size)?;
        let rounded = round_size(size, &self.config.roundup_power2_divisions);
        if self.beyond_reach(rounded) {
            return Err(self.out_of_memory(size, rounded, stream));
        }
        self.release_and_retry(size, rounded, stream)
    }

    /// Where a malloc goes: a private pool routed from `stream`, the decision memo's answer,
    /// or [`Allocator::malloc_chain`], in its plain copy or its general one.
    #[inline(always)]
    fn malloc_until(&mut self, size: u64, stream: Stream, last: LastResort) -> Result<Option<u64>, AllocError> {
        if let Some(pool) = self.pools.route(stream) {
            return self.malloc_in_pool(pool, size, stream).map(Some);
        }
        // A replay runs only where the plain copy does: every call that could change that
        // settles first (`recall.rs`).
        if self.memo.replaying() {
            if let Some(addr) = self.malloc_recalled(size, stream) {
                return Ok(Some(addr));
            }
        }
        if self.plain() {
            self.malloc_chain::<true>(size, stream, last)
        } else {
            self.malloc_general(size, stream, last)
        }
    }

    /// True when cachalot's policy knows a request can never be served: it is larger than
    /// the device or its memory fraction, so no release could make room and no call to the
    /// device is worth making (mapping and unmapping pages for it cost tens of thousands).
    /// PyTorch's policy asks the device and releases its cache first, as PyTorch does.
    #[inline]
    pub(crate) fn beyond_reach(&self, rounded: u64) -> bool {
        self.config.policy == crate::base::config::Policy::Cachalot
            && rounded > self.allowed.unwrap_or(u64::MAX).min(self.device.total_memory())
    }

    /// True when the allocator works as plain PyTorch does by default: classic segments, no
    /// expandable-segments flag, no garbage collection, nothing explained or recorded. Then
    /// malloc and free run a copy of their code that leaves out every test for the rest
    /// (`PLAIN` true), inlined into the caller; otherwise the general copy, out of line.
    #[inline(always)]
    pub(crate) fn plain(&self) -> bool {
        self.vm.mode == VmMode::Off
            && !self.config.expandable_segments
            && self.explainer.decisions.is_none()
            && !self.history.enabled()
            && !self.gc_enabled()
    }

    /// The general copy of [`Allocator::malloc_chain`], out of line.
    #[inline(never)]
    fn malloc_general(&mut self, size: u64, stream: Stream, last: LastResort) -> Result<Option<u64>, AllocError> {
        self.malloc_chain::<false>(size, stream, last)
    }

    /// PyTorch's malloc, step by step in its order (`PLAIN` as [`Allocator::plain`] says).
    /// Explaining, the history and cachalot's policy hang off the steps; how memory is got
    /// from the device is the growth seam's (`growth.rs`). `Ok(None)` only when told to
    /// leave the last resort to the caller.
    #[inline(always)]
    fn malloc_chain<const PLAIN: bool>(
        &mut self,
        size: u64,
        stream: Stream,
        last: LastResort,
    ) -> Result<Option<u64>, AllocError> {
        check_request(size)?;
        // 1. Process events: frees waiting for work on other streams that has completed.
        self.process_events_noted::<PLAIN>()?;
        // 2. Round the request, 3. and route it to its pool.
        let (rounded, pool) = self.round_noted::<PLAIN>(size);
        // 4. Find a free block: the best fit of the stream's cached blocks.
        let id = match self.find_free_block::<PLAIN>(pool, stream, rounded)? {
            Some(id) => id,
            None if self.beyond_reach(rounded) => return Err(self.out_of_memory(size, rounded, stream)),
            // 5. Allocate a segment (or map pages): the growth seam.
            None => match self.grow(pool, stream, rounded)? {
                Some(id) => id,
                None if last == LastResort::Leave => return Ok(None),
                // 6. Release every cached segment and retry, 7. or out of memory.
                None => return self.release_and_retry(size, rounded, stream).map(Some),
            },
        };
        Ok(Some(self.serve::<PLAIN>(id, size, rounded, stream)))
    }

    /// Step 1: completes the pending frees whose events are done, and says how many.
    #[inline(always)]
    fn process_events_noted<const PLAIN: bool>(&mut self) -> Result<(), AllocError> {
        if !self.events.is_empty() {
            let completed = self.process_events()?;
            if completed > 0 {
                self.explainer.note_if::<PLAIN>(|| Decision::EventsCompleted { blocks: completed });
            }
        }
        Ok(())
    }

    /// Steps 2 and 3: the rounded size and its pool, explained.
    #[inline(always)]
    fn round_noted<const PLAIN: bool>(&mut self, size: u64) -> (u64, Pool) {
        let (rounded, rule) = round_size_by_rule(size, &self.config.roundup_power2_divisions);
        let pool = Pool::for_size(rounded);
        if !PLAIN && self.explainer.decisions.is_some() {
            self.explainer.note(|| Decision::Rounded { requested: size, rounded, rule: rule.describe() });
            let page = match self.vm.mode {
                VmMode::Off => 0,
                VmMode::Expandable if pool == Pool::Small => crate::base::size::SMALL_BUFFER,
                VmMode::Expandable => self.config.large_segment_size,
                VmMode::Paged => self.paged.paged_page,
            };
            self.explainer.note(|| Decision::Pool {
                pool: pool.name(),
                segment_size: segment_size(rounded, self.config.large_segment_size),
                page,
            });
        }
        (rounded, pool)
    }

    /// Step 4: the cached block a rounded request takes, out of the free index: under
    /// cachalot's policy the one a followed plan sets aside, else the best fit (moved
    /// against the live blocks by the paged policy).
    #[inline(always)]
    fn find_free_block<const PLAIN: bool>(
        &mut self,
        pool: Pool,
        stream: Stream,
        rounded: u64,
    ) -> Result<Option<u32>, AllocError> {
        if !PLAIN && self.paged.plan.is_some() {
            if let Some(id) = self.take_planned(pool, stream, rounded)? {
                return Ok(Some(id));
            }
        }
        Ok(match self.take_free_block::<PLAIN>(pool, stream, rounded) {
            Some(id) if PLAIN => Some(id),
            Some(id) => self.at_front_of_run(pool, stream, id, rounded)?,
            None => None,
        })
    }

    /// Steps 6 and 7: releases every cached segment (or idle page) and retries; out of
    /// memory if even that fails.
    #[cold]
    #[inline(never)]
    fn release_and_retry(&mut self, size: u64, rounded: u64, stream: Stream) -> Result<u64, AllocError> {
        self.settle();
        match self.grow_after_release(Pool::for_size(rounded), stream, rounded)? {
            Some(id) => Ok(self.serve::<false>(id, size, rounded, stream)),
            None => Err(self.out_of_memory(size, rounded, stream)),
        }
    }

    /// Hands block `id` out for the request, and tells the decision memo (plain copy) or
    /// cachalot's layout learning (general copy) about it.
    #[inline(always)]
    fn serve<const PLAIN: bool>(&mut self, id: u32, size: u64, rounded: u64, stream: Stream) -> u64 {
        let (addr, handed) = self.hand_out::<PLAIN, false>(id, rounded, size, NIL);
        if PLAIN && self.config.decision_memo {
            // Every device call a plain malloc can make moves a device counter (a segment made
            // or released, a retry), but for querying events, which only a queued one needs.
            let quiet = self.is_quiet();
            let (blocks, stats) = self.heap.memo_view();
            self.memo.malloc_served(blocks, stats, (size, stream, id, handed, addr), quiet);
        }
        if !PLAIN && self.learns_layout() {
            let pool = Pool::for_size(rounded);
            self.log_request(addr, Signature { stream, pool, bytes: rounded });
        }
        addr
    }

    /// Takes the best-fitting cached block for a rounded request out of the free index,
    /// honouring `max_split_size` and `max_non_split_rounding` (which virtual memory makes
    /// moot: its blocks are always split) and, for expandable segments, PyTorch's preference
    /// for blocks that can grow.
    #[inline(always)]
    pub(crate) fn take_free_block<const PLAIN: bool>(
        &mut self,
        pool: Pool,
        stream: Stream,
        rounded: u64,
    ) -> Option<u32> {
        if !PLAIN && self.gc_enabled() {
            self.lookups[pool.index()] = self.lookups[pool.index()].wrapping_add(1);
        }
        // The plain copy never serves a private pool (`malloc_in_pool` takes the general one).
        debug_assert!(!PLAIN || self.pools.serving == 0);
        let owner = if PLAIN { 0 } else { self.pools.serving };
        let found = self.heap.best_fit(owner, pool, stream, rounded);
        // The position of the best fit, so taking it needs no second search, unless PyTorch's
        // expandable-segment rule picks another block.
        let mut taken = found.map(|f| (f.key, f.id, Some(f)));
        if let (false, VmMode::Expandable, 0, Some((key, id, _))) = (PLAIN, self.vm.mode, self.pools.serving, taken) {
            let (k, other) = self.prefer_expandable(pool, stream, rounded, (key, id));
            if other != id {
                taken = Some((k, other, None));
            }
        }
        if !PLAIN && self.explainer.decisions.is_some() {
            let cached_blocks = self.heap.free_index(pool).len() as u64;
            let (addr, size) = taken.map_or((None, 0), |(k, _, _)| (Some(k.2), k.1));
            self.explainer.note(|| Decision::BestFit { addr, size, cached_blocks });
        }
        let ((_, size, addr), id, position) = taken?;
        debug_assert!(PLAIN || !self.is_parked(&self.heap[id]), "parked blocks are not indexed");
        let max_split = self.config.max_split_size;
        let rejected = if !PLAIN && self.vm.mode == VmMode::Paged && self.heap[id].in_vm {
            None
        } else if rounded < max_split && size >= max_split {
            Some("below max_split_size, a request never takes a block of max_split_size or more")
        } else if rounded >= max_split && size >= rounded.saturating_add(self.config.max_non_split_rounding) {
            Some("an oversize request only takes a block less than max_non_split_rounding larger")
        } else {
            None
        };
        if let Some(reason) = rejected {
            self.explainer.note_if::<PLAIN>(|| Decision::Rejected { addr, size, reason });
            return None;
        }
        match position {
            Some(f) => {
                self.heap.take_found(owner, pool, &f);
                if !PLAIN {
                    self.uncounted_idle(id);
                }
            }
            None => self.uncache_as::<PLAIN>(id),
        }
        Some(id)
    }
}

/// Refuses a request of 0 bytes or of more than any device holds.
#[inline(always)]
pub(crate) fn check_request(size: u64) -> Result<(), AllocError> {
    if size == 0 {
        return Err(AllocError::ZeroSize);
    }
    if size > MAX_REQUEST {
        return Err(AllocError::TooLarge { requested: size });
    }
    Ok(())
}
