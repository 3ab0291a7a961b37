//! The caching allocator: malloc and free over a [`Device`], with PyTorch's decisions.
//!
//! A request is rounded, routed to the small or large pool, and served by the best-fitting
//! cached block of its stream, split when the remainder is worth keeping; only when nothing
//! fits does the allocator ask the device for a segment (see `release.rs` for what it does
//! when the device says no). A freed block merges with free neighbours and is cached.
//!
//! malloc and free each exist twice, from one source: a copy for the plain case (see
//! `Allocator::plain`), compiled without the tests for virtual memory, garbage collection,
//! explaining and the history, and the general copy. In the plain case the two decide alike;
//! the rules tests fail if the plain test misses a setting the plain copy leaves out.
//!
//! Invariants (checked by `check_invariants`): the blocks of each segment tile it exactly;
//! no two free neighbours stay unmerged; a block is in its pool's free index iff it is free;
//! an address is in the live map iff an allocated block starts there; the statistics equal
//! a recount of the blocks.

use alloc::vec::Vec;

use crate::base::config::Config;
use crate::base::device::{Device, HeldChange, Stream};
use crate::base::error::AllocError;
use crate::base::size::{round_size, round_size_by_rule, segment_size, Pool, MAX_REQUEST, MIN_BLOCK, SMALL_SIZE};
use crate::data::addr_map::IdMap;
use crate::data::block::{Block, BlockState, NIL};
use crate::data::events::PendingEvents;
use crate::engine::block_heap::{BlockHeap, Cut};
use crate::engine::capture::Captures;
use crate::engine::memo::decision_memo::DecisionMemo;
use crate::engine::paged::paged_state::PagedState;
use crate::engine::paged::recurrence::Signature;
use crate::engine::private_pool::PrivatePools;
use crate::engine::split_rule::{SplitClause, SplitRule};
use crate::engine::vrange::{VirtualMemory, VmMode};
use crate::report::explain::{Decision, Explainer};
use crate::report::history::{Action, History, TraceEntry};
use crate::report::stats::{Counters, DeviceStats};

/// A caching allocator for one device. Cloning one (with its device) checkpoints it: the
/// browser demo scrubs backwards through a replay from such checkpoints.
///
/// Its fields are the engine's alone (`pub(in crate::engine)`), so the compiler holds the rule
/// that no other part writes the allocator's state; reports read it through `&self` methods.
#[derive(Clone)]
pub struct Allocator<D: Device> {
    pub(in crate::engine) device: D,
    pub(in crate::engine) config: Config,
    /// The blocks, their indexes and the statistics (`block_heap.rs`).
    pub(in crate::engine) heap: BlockHeap,
    pub(in crate::engine) stream_uses: IdMap<Vec<Stream>>,
    pub(in crate::engine) events: PendingEvents,
    /// Bytes of segments held: PyTorch's `total_allocated_memory`.
    pub(in crate::engine) reserved: u64,
    /// The memory-fraction limit in bytes, once a fraction is set.
    pub(in crate::engine) allowed: Option<u64>,
    /// Free-block lookups per pool while garbage collection is on (ages of cached blocks).
    pub(in crate::engine) lookups: [u32; 2],
    pub(in crate::engine) history: History,
    pub(in crate::engine) explainer: Explainer,
    pub(in crate::engine) vm: VirtualMemory,
    pub(in crate::engine) paged: PagedState,
    pub(in crate::engine) memo: DecisionMemo,
    pub(in crate::engine) pools: PrivatePools,
    pub(in crate::engine) captures: Captures,
}

impl<D: Device> Allocator<D> {
    /// An allocator over `device` with `config`.
    pub fn new(device: D, config: Config) -> Allocator<D> {
        let granularity = device.vm_granularity();
        let mode = match (config.policy, config.expandable_segments, granularity) {
            (_, _, None) => VmMode::Off,
            (crate::base::config::Policy::Cachalot, _, Some(_)) => VmMode::Paged,
            (crate::base::config::Policy::PyTorch, true, Some(_)) => VmMode::Expandable,
            (crate::base::config::Policy::PyTorch, false, Some(_)) => VmMode::Off,
        };
        let mut a = Allocator {
            vm: VirtualMemory::new(mode),
            paged: PagedState::new(granularity.unwrap_or(crate::base::size::SMALL_BUFFER)),
            device,
            heap: BlockHeap::new(Counters {
                max_split_size: config.max_split_size_stat(),
                num_oom_rejections: config.pytorch_version.counts_oom_rejections().then_some(0),
                ..Counters::default()
            }),
            stream_uses: Default::default(),
            events: PendingEvents::default(),
            reserved: 0,
            allowed: None,
            lookups: [0; 2],
            history: History::new(config.history_entries),
            explainer: Explainer::default(),
            memo: DecisionMemo::default(),
            pools: PrivatePools::default(),
            captures: Captures::default(),
            config,
        };
        if let Some(f) = a.config.per_process_memory_fraction {
            a.allowed = a.limit_of(f);
        }
        a
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, mutably (tests use it to inject faults).
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// The statistics.
    pub fn stats(&self) -> DeviceStats {
        self.heap.stats().report()
    }

    /// Bytes of segments held from the device.
    pub fn reserved_bytes(&self) -> u64 {
        self.reserved
    }

    /// The memory-fraction limit in bytes, if set.
    pub fn allowed_bytes(&self) -> Option<u64> {
        self.allowed
    }

    /// True when the allocator maps physical pages into reserved address ranges (cachalot's
    /// paged policy or PyTorch's expandable segments); false when it uses classic segments,
    /// by policy or because the device has no virtual memory.
    pub fn uses_virtual_memory(&self) -> bool {
        self.vm.mode != VmMode::Off
    }

    /// What planned layouts have done so far (cachalot's policy, `learn_layout`).
    pub fn plan_counts(&self) -> crate::engine::paged::paged_state::PlanCounts {
        self.paged.plan_counts
    }

    /// Address ranges reserved for virtual memory now (none with classic segments). Under
    /// expandable segments they are what PyTorch's summary calls segments, though its
    /// `segment` statistic does not count them.
    pub fn address_ranges(&self) -> usize {
        self.vm.ranges.len()
    }

    /// Host memory the allocator's block metadata holds now: bytes that grow with the number
    /// of blocks (the block slab, the address table, the free index's class vectors) and
    /// bytes fixed per pool and stream (the free index's bitmaps and tables of vectors by
    /// class). Virtual-memory bookkeeping (ranges and their page mappings) is per range and
    /// mapping, not per block, and is not counted.
    pub fn metadata_bytes(&self) -> (usize, usize) {
        self.heap.metadata_bytes()
    }

    /// Blocks (allocated, pending, free or unmapped) alive now.
    pub fn live_blocks(&self) -> usize {
        self.heap.block_count()
    }

    /// Restarts every peak statistic at its current value.
    pub fn reset_peak_stats(&mut self) {
        self.heap.stats_mut().reset_peak();
    }

    /// Restarts the accumulated statistics.
    pub fn reset_accumulated_stats(&mut self) {
        self.heap.stats_mut().reset_accumulated();
    }

    /// Size of the largest cached free block, which a request up to that size could take
    /// without a device call (PyTorch's `cacheInfo`, which cuDNN's benchmark mode asks to size
    /// its workspace); 0 when nothing is cached.
    pub fn largest_cached_block(&self) -> u64 {
        self.largest_free_block().map_or(0, |(size, ..)| size)
    }

    /// Allocates `size` bytes for use on `stream` and returns the address.
    #[inline]
    pub fn malloc(&mut self, size: u64, stream: Stream) -> Result<u64, AllocError> {
        match self.malloc_short_of_release(size, stream)? {
            Some(addr) => Ok(addr),
            None => self.malloc_after_release(size, stream),
        }
    }

    /// The rest of a [`Allocator::malloc`] that [`Allocator::malloc_short_of_release`] left
    /// undone: release every cached segment (or idle page) and retry, counting and reporting
    /// out of memory if even that fails. A caller whose other allocators hold cached memory
    /// returns theirs to the device first, so that together they do what PyTorch's one
    /// allocator does (the native library's per-stream shards).
    pub fn malloc_after_release(&mut self, size: u64, stream: Stream) -> Result<u64, AllocError> {
        self.settle();
        check_request(size)?;
        let rounded = round_size(size, &self.config.roundup_power2_divisions);
        let pool = Pool::for_size(rounded);
        if self.beyond_reach(rounded) {
            return Err(self.out_of_memory(size, rounded, stream));
        }
        match self.grow_after_release(pool, stream, rounded)? {
            Some(id) => {
                let (addr, _) = self.hand_out::<false, false>(id, rounded, size, NIL);
                if self.learns_layout() {
                    self.log_request(addr, Signature { stream, pool, bytes: rounded });
                }
                Ok(addr)
            }
            None => Err(self.out_of_memory(size, rounded, stream)),
        }
    }

    /// [`Allocator::malloc`] up to, not including, its last resort: `Ok(None)` when nothing
    /// but releasing every cached segment and retrying
    /// ([`Allocator::malloc_after_release`]) could serve the request.
    #[inline(always)]
    pub fn malloc_short_of_release(&mut self, size: u64, stream: Stream) -> Result<Option<u64>, AllocError> {
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
            self.malloc_served::<true>(size, stream)
        } else {
            self.malloc_general(size, stream)
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
    fn plain(&self) -> bool {
        self.vm.mode == VmMode::Off
            && !self.config.expandable_segments
            && self.explainer.decisions.is_none()
            && !self.history.enabled()
            && !self.gc_enabled()
    }

    /// The general copy of malloc's work, out of line.
    #[inline(never)]
    fn malloc_general(&mut self, size: u64, stream: Stream) -> Result<Option<u64>, AllocError> {
        self.malloc_served::<false>(size, stream)
    }

    /// [`Allocator::malloc_short_of_release`]'s work; `PLAIN` as [`Allocator::plain`] says.
    #[inline(always)]
    fn malloc_served<const PLAIN: bool>(&mut self, size: u64, stream: Stream) -> Result<Option<u64>, AllocError> {
        check_request(size)?;
        if !self.events.is_empty() {
            let completed = self.process_events()?;
            if completed > 0 {
                self.explainer.note_if::<PLAIN>(|| Decision::EventsCompleted { blocks: completed });
            }
        }
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
        let planned =
            if !PLAIN && self.paged.plan.is_some() { self.take_planned(pool, stream, rounded)? } else { None };
        let id = match planned {
            Some(id) => id,
            None => match self.take_free_block::<PLAIN>(pool, stream, rounded) {
                Some(id) if PLAIN => id,
                Some(id) => self.place_against_live(id, rounded),
                None if self.beyond_reach(rounded) => return Err(self.out_of_memory(size, rounded, stream)),
                None => match self.grow_short_of_release(pool, stream, rounded)? {
                    Some(id) => id,
                    None => return Ok(None),
                },
            },
        };
        let (addr, handed) = self.hand_out::<PLAIN, false>(id, rounded, size, NIL);
        if PLAIN && self.config.decision_memo {
            // Every device call a plain malloc can make moves a device counter (a segment made
            // or released, a retry), but for querying events, which only a queued one needs.
            let quiet = self.is_quiet();
            let (blocks, stats) = self.heap.memo_view();
            self.memo.malloc_served(blocks, stats, (size, stream, id, handed, addr), quiet);
        }
        if !PLAIN && self.learns_layout() {
            self.log_request(addr, Signature { stream, pool, bytes: rounded });
        }
        Ok(Some(addr))
    }

    /// Frees an address returned by [`Allocator::malloc`]. If the block was used on other
    /// streams, it becomes reusable once the work queued there now has completed.
    #[inline(always)]
    pub fn free(&mut self, addr: u64) -> Result<(), AllocError> {
        // As in malloc: a replay implies the plain copy.
        if self.memo.replaying() && self.free_recalled(addr) {
            return Ok(());
        }
        self.free_served(addr)
    }

    /// [`Allocator::free`] when the decision memo does not answer, out of line.
    #[inline(never)]
    fn free_served(&mut self, addr: u64) -> Result<(), AllocError> {
        if self.memo.replaying() {
            // An address outside every segment is no allocation of this one: refused without
            // ending the replay, since a caller with several allocators (the native library's
            // per-stream shards) asks each in turn.
            if !self.memo.within_segments(addr) {
                return Err(AllocError::UnknownPointer { addr });
            }
            self.settle();
        }
        if self.plain() {
            self.free_as::<true, false>(addr, NIL)
        } else {
            self.free_general(addr)
        }
    }

    /// The general copy of free's work, out of line.
    #[inline(never)]
    fn free_general(&mut self, addr: u64) -> Result<(), AllocError> {
        self.free_as::<false, false>(addr, NIL)
    }

    /// [`Allocator::free`]'s work; `PLAIN` as [`Allocator::plain`] says; `RECALLED` when the
    /// decision memo applies a free it answered (`decision_memo.rs`): its block is the
    /// recorded one, `recalled`, and the address table and the free index are left alone.
    #[inline(always)]
    pub(crate) fn free_as<const PLAIN: bool, const RECALLED: bool>(
        &mut self,
        addr: u64,
        recalled: u32,
    ) -> Result<(), AllocError> {
        let id = if RECALLED {
            recalled
        } else {
            match self.heap.remove_live(addr) {
                Some(id) => id,
                None => return Err(self.diagnose_bad_pointer(addr)),
            }
        };
        let uses = if self.stream_uses.is_empty() { None } else { self.stream_uses.remove(&id) };
        let mut deferred = false;
        if let Some(uses) = uses {
            if self.capturing() {
                // No event may be recorded during a capture: it waits for the captures' end.
                self.defer_events(id, uses);
                deferred = true;
            } else {
                self.forget_uses_during_capture(id);
                if let Err(e) = self.insert_events(id, &uses) {
                    self.stream_uses.insert(id, uses);
                    self.heap.insert_live(addr, id);
                    return Err(e);
                }
            }
        }
        if !PLAIN && self.learns_layout() && self.heap.lanes().owner(self.heap[id].stream_index) == 0 {
            self.log_free(id);
        }
        let stream = self.heap.stream_of(id);
        let b = &mut self.heap[id];
        let (size, pool, requested, pending) = (b.size, b.pool, b.requested(), b.event_count > 0 || deferred);
        b.state = if pending { BlockState::PendingFree } else { BlockState::Free };
        self.heap.stats_mut().allocation.decrease(pool, 1);
        self.heap.stats_mut().allocated_bytes.decrease(pool, size);
        if size >= self.config.max_split_size {
            self.heap.stats_mut().oversize_allocations.decrease(1);
        }
        self.record_if::<PLAIN>(Action::FreeRequested, addr, requested, stream);
        if pending {
            self.heap.stats_mut().active.began(pool, 1);
            self.heap.stats_mut().active_bytes.began(pool, size);
            let events = self.heap[id].event_count as u64;
            self.explainer.note_if::<PLAIN>(|| {
                if deferred {
                    Decision::DeferredByCapture
                } else {
                    Decision::Pending { events }
                }
            });
        } else {
            self.free_block::<PLAIN, RECALLED>(id);
        }
        if PLAIN && !RECALLED && self.config.decision_memo {
            self.memo.free_served(addr, id, self.is_quiet() && !pending);
        }
        Ok(())
    }

    /// Marks the allocation at `addr` as used on `stream`, so that after it is freed it is
    /// not reused until the work queued on `stream` by then has completed.
    pub fn record_stream(&mut self, addr: u64, stream: Stream) -> Result<(), AllocError> {
        self.settle();
        let Some(id) = self.heap.live_block(addr) else {
            return Err(self.diagnose_bad_pointer(addr));
        };
        if self.stream_of(id) == stream {
            return Ok(());
        }
        let uses = self.stream_uses.entry(id).or_default();
        if !uses.contains(&stream) {
            if uses.len() == u8::MAX as usize {
                return Err(AllocError::TooManyStreams { addr });
            }
            uses.push(stream);
        }
        self.note_use_during_capture(id, stream);
        Ok(())
    }

    /// Returns every cached segment that holds no allocation to the device, after waiting
    /// for pending frees. Segments that still hold an allocation stay.
    pub fn empty_cache(&mut self) -> Result<(), AllocError> {
        self.settle();
        self.noting_releases("emptying the cache", |a| a.release_cached_blocks())?;
        self.heap.drop_empty_streams();
        Ok(())
    }

    /// Limits the bytes of segments held to `fraction` of the device's memory; 1.0 lifts
    /// the limit.
    pub fn set_memory_fraction(&mut self, fraction: f64) -> Result<(), AllocError> {
        // A limit turns garbage collection on, and with it the general copy.
        self.settle();
        if !(0.0..=1.0).contains(&fraction) {
            return Err(AllocError::InvalidFraction(fraction));
        }
        self.allowed = self.limit_of(fraction);
        Ok(())
    }

    /// The memory-fraction limit left to this allocator: what other allocators sharing the
    /// device's limit hold does not count as its own.
    #[inline]
    pub(crate) fn allowed_here(&self) -> Option<u64> {
        self.allowed.map(|a| a.saturating_sub(self.device.reserved_elsewhere()))
    }

    /// The limit a memory fraction sets: none for the whole device, as in PyTorch, whose
    /// garbage collection, fraction check and "allowed" figure then stay off.
    fn limit_of(&self, fraction: f64) -> Option<u64> {
        (fraction < 1.0).then(|| (fraction * self.device.total_memory() as f64) as u64)
    }

    /// True when PyTorch's garbage collection of cached blocks is on.
    #[inline]
    pub(crate) fn gc_enabled(&self) -> bool {
        self.allowed.is_some() && self.config.garbage_collection_threshold > 0.0
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

    /// Puts free block `id` in its pool's free index, unless it is parked in a followed
    /// plan's range (and counts its idle pages).
    #[inline(always)]
    pub(crate) fn cache(&mut self, id: u32) {
        self.cache_as::<false>(id);
    }

    /// [`Allocator::cache`]; `PLAIN` as [`Allocator::plain`] says.
    #[inline(always)]
    fn cache_as<const PLAIN: bool>(&mut self, id: u32) {
        if PLAIN || !self.is_parked(&self.heap[id]) {
            self.heap.cache(id);
        }
        let b = &self.heap[id];
        if !PLAIN && b.in_vm && self.vm.mode == VmMode::Paged {
            self.paged.idle_pages += self.paged.whole_page_count(b.addr, b.size);
        }
    }

    /// Takes free block `id` out of its pool's free index (a parked one is in none).
    #[inline(always)]
    pub(crate) fn uncache(&mut self, id: u32) {
        self.uncache_as::<false>(id);
    }

    /// [`Allocator::uncache`]; `PLAIN` as [`Allocator::plain`] says.
    #[inline(always)]
    fn uncache_as<const PLAIN: bool>(&mut self, id: u32) {
        if PLAIN || !self.is_parked(&self.heap[id]) {
            self.heap.uncache(id);
        }
        if !PLAIN {
            self.uncounted_idle(id);
        }
    }

    /// Stops counting the idle pages of block `id`, just taken out of the free index.
    #[inline]
    fn uncounted_idle(&mut self, id: u32) {
        let b = &self.heap[id];
        if b.in_vm && self.vm.mode == VmMode::Paged {
            self.paged.idle_pages -= self.paged.whole_page_count(b.addr, b.size);
        }
    }

    /// Asks the device for a segment of the size a rounded request needs. `Ok(None)` when the
    /// device or the memory fraction says no.
    pub(crate) fn allocate_segment(
        &mut self,
        pool: Pool,
        stream: Stream,
        rounded: u64,
        size: u64,
        is_retry: bool,
    ) -> Result<Option<u32>, AllocError> {
        if is_retry {
            self.heap.stats_mut().num_alloc_retries += 1;
        }
        // A private pool's segments are classic ones (`private_pool.rs`).
        let expandable = self.vm.mode == VmMode::Expandable && self.pools.serving == 0;
        if let Some(allowed) = self.allowed_here() {
            if self.reserved + size > allowed {
                if self.config.throw_on_cudamalloc_oom {
                    return Err(self.rejected_before_device(stream, rounded, size));
                }
                let reason = "it would exceed the memory fraction";
                self.explainer.note(|| match expandable {
                    true => Decision::PagesRefused { size, reason },
                    false => Decision::SegmentRefused { size, reason },
                });
                return Ok(None);
            }
        }
        if expandable {
            let found = self.grow_expandable(pool, stream, rounded)?;
            if found.is_none() {
                self.explainer.note(|| Decision::PagesRefused { size, reason: "the device could not map more pages" });
            }
            return Ok(found);
        }
        let addr = match self.device.allocate(size) {
            Ok(addr) => addr,
            Err(crate::base::device::DeviceError::OutOfMemory) => {
                self.explainer.note(|| Decision::SegmentRefused { size, reason: "the device is out of memory" });
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        self.explainer.note(|| Decision::NewSegment { addr, size });
        self.reserved += size;
        let stream_index = self.heap.lane_in(stream, self.pools.serving);
        let id = self.heap.insert_block(Block::new(addr, size, stream_index, BlockState::Free, pool, false));
        let oversize_segments = (size >= self.config.max_split_size) as i64;
        self.count_held(HeldChange { pool, segments: 1, bytes: size as i64, oversize_segments });
        self.heap.stats_mut().num_device_alloc += 1;
        self.record(Action::SegmentAlloc, addr, size, stream);
        Ok(Some(id))
    }

    /// PyTorch's split rule: small pool when at least 512 B remain; large pool when the
    /// request is below `max_split_size` and more than 1 MiB remains.
    #[inline]
    pub(crate) fn should_split<const PLAIN: bool>(&self, id: u32, rounded: u64) -> bool {
        self.split_rule::<PLAIN>(id, rounded).splits()
    }

    /// PyTorch's split rule for block `id` and a request rounded to `rounded`, with the
    /// clause that decided: in the small pool, or in virtual memory (expandable segments and
    /// the paged policy), a remainder of at least 512 B is split off; in the large pool, one
    /// of more than 1 MiB, unless the request is `max_split_size` or more.
    #[inline(always)]
    fn split_rule<const PLAIN: bool>(&self, id: u32, rounded: u64) -> SplitRule {
        let b = &self.heap[id];
        let remaining = b.size - rounded;
        let in_vm = !PLAIN && (b.in_vm || self.config.expandable_segments);
        let (clause, split) = if b.pool == Pool::Small || in_vm {
            (if in_vm { SplitClause::VirtualMemory } else { SplitClause::SmallPool }, remaining >= MIN_BLOCK)
        } else if rounded >= self.config.max_split_size {
            (SplitClause::MaxSplitSize, false)
        } else {
            (SplitClause::LargePool, remaining > SMALL_SIZE)
        };
        SplitRule { clause, split, exact: remaining == 0 }
    }

    /// Hands out block `id` (taken from the free index or fresh from the device) for a
    /// rounded request, splitting off the remainder when the split rule says so; returns the
    /// address and the id of the block handed out. `RECALLED`: the decision memo chose `id`
    /// and the id `recalled_front` for a block split off it, and the address table and the free index
    /// are left alone.
    #[inline(always)]
    pub(crate) fn hand_out<const PLAIN: bool, const RECALLED: bool>(
        &mut self,
        id: u32,
        rounded: u64,
        requested: u64,
        recalled_front: u32,
    ) -> (u64, u32) {
        let (pool, in_vm) = (self.heap[id].pool, !PLAIN && self.heap[id].in_vm);
        let split = self.should_split::<PLAIN>(id, rounded);
        debug_assert!(!RECALLED || split == (recalled_front != NIL), "the memo's split is the rule's");
        if !PLAIN && self.explainer.decisions.is_some() {
            let (addr, block_size) = (self.heap[id].addr, self.heap[id].size);
            let reason = self.split_rule::<PLAIN>(id, rounded).reason();
            self.explainer.note(|| Decision::Split {
                addr,
                block_size,
                remainder: block_size - rounded,
                split,
                reason,
            });
        }
        let stamp = self.lookups[pool.index()];
        let front = if RECALLED { Some(recalled_front) } else { None };
        let cut = Cut { rounded, split, front, in_vm, stamp };
        let handed = self.heap.hand_out(id, requested, cut, !RECALLED);
        if let Some(rest) = handed.rest {
            if in_vm {
                if handed.head {
                    self.set_range_head(handed.id);
                }
                let rest_addr = self.heap[rest].addr;
                self.note_in_plan(handed.addr, handed.id);
                self.note_in_plan(rest_addr, rest);
            }
            if !RECALLED {
                self.cache_as::<PLAIN>(rest);
            }
        }
        let (addr, id) = (handed.addr, handed.id);
        let stream = self.heap.stream_of(id);
        self.count_allocation::<PLAIN>(pool, addr, handed.size, requested, stream);
        if in_vm && self.vm.mode == VmMode::Paged {
            self.paged.peak_in_use = self.paged.peak_in_use.max(self.paged.pages_in_use(self.vm.mapped_pages));
        }
        (addr, id)
    }

    /// Counts an allocation of `size` bytes at `addr`, asked for as `requested` bytes, in the
    /// statistics and the history; `PLAIN` as [`Allocator::plain`] says.
    #[inline(always)]
    pub(crate) fn count_allocation<const PLAIN: bool>(
        &mut self,
        pool: Pool,
        addr: u64,
        size: u64,
        requested: u64,
        stream: Stream,
    ) {
        self.heap.count_allocation(pool, size, requested, size >= self.config.max_split_size);
        self.record_if::<PLAIN>(Action::Alloc, addr, requested, stream);
    }

    /// Caches a block whose free has completed: merges it with free neighbours and puts it
    /// in the free index.
    /// `RECALLED` as for [`Allocator::hand_out`].
    #[inline(always)]
    pub(crate) fn free_block<const PLAIN: bool, const RECALLED: bool>(&mut self, id: u32) {
        let b = &self.heap[id];
        let (addr, requested, stream, pool, in_vm) =
            (b.addr, b.requested(), self.heap.stream_of_lane(b.stream_index), b.pool, !PLAIN && b.in_vm);
        let (prev, next) = (b.prev, b.next);
        self.record_if::<PLAIN>(Action::FreeCompleted, addr, requested, stream);
        let before = self.try_merge_as::<PLAIN, RECALLED>(id, prev, BlockState::Free);
        let after = self.try_merge_as::<PLAIN, RECALLED>(id, next, BlockState::Free);
        if !PLAIN && self.explainer.decisions.is_some() {
            for (side, bytes) in [("previous", before), ("next", after)] {
                if bytes > 0 {
                    self.explainer.note(|| Decision::Merged { side, bytes });
                }
            }
        }
        let stamp = if in_vm && self.vm.mode == VmMode::Paged {
            self.paged.epochs.freed(stream)
        } else {
            self.lookups[pool.index()]
        };
        let (key_addr, key_size, split) = self.heap.mark_free(id, (before, after), requested, in_vm, stamp);
        if !RECALLED {
            self.cache_as::<PLAIN>(id);
        }
        self.explainer.note_if::<PLAIN>(|| Decision::Cached { addr: key_addr, size: key_size, whole_segment: !split });
    }

    /// Merges the neighbour `other` into block `id` if `other` is in `state` (free or
    /// unmapped), taking it out of its index; returns the bytes gained (0 when not merged).
    #[inline(always)]
    pub(crate) fn try_merge(&mut self, id: u32, other: u32, state: BlockState) -> u64 {
        self.try_merge_as::<false, false>(id, other, state)
    }

    /// [`Allocator::try_merge`]; `PLAIN` as [`Allocator::plain`] says.
    #[inline(always)]
    fn try_merge_as<const PLAIN: bool, const RECALLED: bool>(&mut self, id: u32, other: u32, state: BlockState) -> u64 {
        if other == NIL || self.heap[other].state != state {
            return 0;
        }
        match state {
            BlockState::Free if RECALLED => {}
            BlockState::Free => self.uncache_as::<PLAIN>(other),
            BlockState::Unmapped => {
                let o = &self.heap[other];
                self.vm.unmapped[o.pool.index()].remove(&(self.heap.stream_of_lane(o.stream_index), o.addr));
            }
            _ => unreachable!("only free or unmapped blocks merge"),
        }
        let merged = self.heap.absorb(id, other, !RECALLED);
        if merged.in_vm {
            self.note_in_plan(merged.addr, id);
            if merged.head {
                self.set_range_head(id);
            }
        }
        merged.bytes
    }

    /// The stream block `id` belongs to.
    #[inline]
    pub(crate) fn stream_of(&self, id: u32) -> Stream {
        self.heap.stream_of_lane(self.heap[id].stream_index)
    }

    /// Records that block `id` now starts its virtual range.
    fn set_range_head(&mut self, id: u32) {
        let addr = self.heap[id].addr;
        if let Some(r) = self.vm.range_of(addr) {
            self.vm.ranges[r].head = id;
        }
    }

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
    fn event_completed(&mut self, id: u32) -> bool {
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

    /// Explains why `addr` is not a live allocation (a slow path: it scans the blocks).
    fn diagnose_bad_pointer(&self, addr: u64) -> AllocError {
        for (_, b) in self.heap.blocks() {
            if b.addr == addr {
                return AllocError::DoubleFree { addr };
            }
            if b.addr < addr && addr < b.end() && b.state == BlockState::Allocated {
                return AllocError::InteriorPointer { addr, block: b.addr };
            }
        }
        AllocError::UnknownPointer { addr }
    }

    /// [`Allocator::record`], unless `PLAIN` says the history is off.
    #[inline(always)]
    fn record_if<const PLAIN: bool>(&mut self, action: Action, addr: u64, size: u64, stream: Stream) {
        if !PLAIN {
            self.record(action, addr, size, stream);
        }
    }

    /// Counts a change in what this allocator holds from the device in its statistics, then
    /// tells the device, which adds up the changes of allocators sharing it.
    pub(crate) fn count_held(&mut self, change: HeldChange) {
        self.heap.stats_mut().segment.change(change.pool, change.segments);
        self.heap.stats_mut().reserved_bytes.change(change.pool, change.bytes);
        self.heap.stats_mut().oversize_segments.change(change.oversize_segments);
        self.device.held_changed(change);
    }

    /// Adds an entry to the history when it is on.
    #[inline(always)]
    pub(crate) fn record(&mut self, action: Action, addr: u64, size: u64, stream: Stream) {
        if self.history.enabled() {
            self.record_entry(action, addr, size, stream);
        }
    }

    /// Out of line, as the explainer's notes are: inlined into the hot path, the device's
    /// clock and the history's ring cost it even when the history is off.
    #[cold]
    #[inline(never)]
    fn record_entry(&mut self, action: Action, addr: u64, size: u64, stream: Stream) {
        let time_us = self.device.now_us();
        self.history.record(TraceEntry { action, addr, size, stream, time_us });
    }

    /// Starts (or stops, with 0) recording the action history, forgetting earlier entries.
    pub fn record_history(&mut self, entries: usize) {
        self.settle();
        self.config.history_entries = entries;
        self.history.reset(entries);
    }

    /// The recorded history, oldest first.
    pub fn history(&self) -> Vec<TraceEntry> {
        self.history.entries()
    }

    /// Starts (or stops) noting the decisions of each call; see [`Allocator::take_decisions`].
    pub fn set_explain(&mut self, on: bool) {
        self.settle();
        self.explainer.decisions = if on { Some(Vec::new()) } else { None };
    }

    /// The decisions noted since the last call (empty when explaining is off): the latest
    /// ones, past [`crate::report::explain::MAX_DECISIONS`] (see there).
    pub fn take_decisions(&mut self) -> Vec<Decision> {
        self.explainer.decisions.as_mut().map(core::mem::take).unwrap_or_default()
    }

    /// Segment size a fresh device allocation would get for a request of `size` bytes.
    pub fn segment_size_for(&self, size: u64) -> u64 {
        segment_size(round_size(size, &self.config.roundup_power2_divisions), self.config.large_segment_size)
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
