//! The caching allocator: its state, how it is made and configured, and what it reports.
//!
//! Its work lives beside it, one concept a file: PyTorch's malloc as one chain
//! (`malloc_chain.rs`) and its free (`free_chain.rs`); the blocks, their indexes and the
//! statistics in a heap with private fields (`block_heap.rs`), moved by the chains through
//! `block_moves.rs`; how memory is got from the device (`growth.rs`) and given back
//! (`release.rs`); stream-ordered reuse (`stream_events.rs`).
//!
//! Invariants (checked by `check_invariants`): the blocks of each segment tile it exactly;
//! no two free neighbours stay unmerged; a block is in its pool's free index iff it is free;
//! an address is in the live map iff an allocated block starts there; the statistics equal
//! a recount of the blocks.

use alloc::vec::Vec;

use crate::base::config::Config;
use crate::base::device::{Device, HeldChange, Stream};
use crate::base::error::AllocError;
use crate::base::size::{round_size, segment_size};
use crate::data::addr_map::IdMap;
use crate::data::events::PendingEvents;
use crate::engine::capture_state::Captures;
use crate::engine::heap::block_heap::BlockHeap;
use crate::engine::memo::decision_memo::DecisionMemo;
use crate::engine::paged::paged_state::PagedState;
use crate::engine::private_pool::PrivatePools;
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
            paged: PagedState::new(
                granularity.unwrap_or(crate::base::size::SMALL_BUFFER),
                mode == VmMode::Paged && config.learn_layout,
            ),
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

    /// The streams cachalot's policy found regrowing tensors by copy (a KV cache grown by
    /// concatenation), each with the address its region starts at: their misses go there.
    pub fn regrowth_regions(&self) -> Vec<(crate::base::device::Stream, u64)> {
        self.paged.regrowth.regions().map(|(stream, r)| (stream, r.from)).collect()
    }

    /// The slot size of each region [`Allocator::regrowth_regions`] lists, in its order: 0 for
    /// a packed one (`engine/paged/region.rs`).
    pub fn regrowth_slots(&self) -> Vec<u64> {
        self.paged.regrowth.regions().map(|(_, r)| r.slot).collect()
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

    /// Memory still to be had: what the device has free, or less when the memory fraction
    /// leaves less. On a GPU, asking what is free is a driver call (made at most once a
    /// millisecond: the native library keeps the answer).
    pub(crate) fn headroom(&self) -> u64 {
        let free = self.device.free_memory();
        self.allowed_here().map_or(free, |a| free.min(a.saturating_sub(self.reserved)))
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

    /// [`Allocator::record`] of an action on a block of lane `lane`, unless `PLAIN` says the
    /// history is off; the lane's stream is looked up only when the history is on.
    #[inline(always)]
    pub(crate) fn record_lane_if<const PLAIN: bool>(&mut self, action: Action, addr: u64, size: u64, lane: u32) {
        if !PLAIN && self.history.enabled() {
            let stream = self.heap.stream_of_lane(lane);
            self.record_entry(action, addr, size, stream);
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
