//! Learning and following a planned layout under cachalot's policy (`learn_layout`).
//!
//! While no plan is followed, every request served and every free is logged
//! (`recurrence.rs`). A repeat seen with no memory mapped since the log began needs no plan
//! (the usual placement has settled, and a plan would only move the memory held into its
//! ranges): the log starts again. Once the requests are seen to repeat while memory still
//! moves, the first period is laid out
//! (`layout_plan.rs`) a few requests for each request served, while the workload is served
//! the usual way and must go on repeating; the plan is followed from the next period's start.
//! Each request the plan expects is placed at its planned address, in a range of its stream
//! and pool reserved for planned layouts (kept from one plan to the next), when the blocks
//! there are free or unmapped; pages missing under it are mapped as for any request, so
//! memory moves into the planned range during the first period followed and stays there in
//! the periods after. A planned address still taken (a request that lived longer this time)
//! sends that one request down the usual path; a request the plan did not expect, or too many
//! of one period placed the usual way, ends the plan, and the log starts again. A plan that
//! still moves memory in a later period, with no place missed, needs more pages than the
//! policy may hold: it is given up and no layout is learned again (`note_planned_move`); one
//! whose layout alone needs more pages than the policy may ever hold is given up so as soon
//! as it is laid out, before its first period followed moves memory for nothing
//! (`exceeds_what_may_be_held`).
//! Requests the plan leaves out (those that outlive a period) go the usual way, never into a
//! followed plan's ranges.
//!
//! The free blocks of a followed plan's ranges are *parked*: kept out of the free index,
//! since no request but the plan's may take them, and the index work of every placement and
//! free there would be wasted. They still count as cached (idle pages, `empty_cache`,
//! memory moved under pressure, the out-of-memory report find them by walking the ranges),
//! and go back into the index when the plan ends or a group's range changes.
//!
//! Invariants: a followed plan's ranges take no request but the plan's; a free block is in
//! its pool's free index iff it is not parked; nothing is logged while a plan is made or
//! followed. The plan's hints (the block last noted over each cell of its ranges,
//! `cell_hints.rs`) are only where a search starts: a hint is taken only if its block still
//! lies over its cell, and any block of the range is a correct start, so a stale hint costs
//! a longer search, never a wrong block.

use alloc::vec::Vec;

use crate::base::device::{Device, Stream};
use crate::base::error::AllocError;
use crate::base::size::Pool;
use crate::data::block::{Block, BlockState, NIL};
use crate::engine::allocator::Allocator;
use crate::engine::paged::layout_plan::{Expected, Plan, Planner};
use crate::engine::paged::paging::Placement;
use crate::engine::paged::recurrence::Signature;

/// Requests laid out for each request served while a plan is made: a period's layout is done
/// within a quarter of the next, and no request waits for more than a few.
const PLAN_STEP: usize = 4;

impl<D: Device> Allocator<D> {
    /// True when requests are logged and plans followed: cachalot's policy over virtual
    /// memory with `learn_layout` on, until a plan was given up for moving memory after its
    /// first period (`note_planned_move`) or for needing more pages than may ever be held
    /// (`exceeds_what_may_be_held`).
    #[inline]
    pub(crate) fn learns_layout(&self) -> bool {
        self.paged.learns
    }

    /// The block a followed plan puts this request in, taken out of the free index, or
    /// `None` when no plan is followed, the plan leaves the request out or its place is taken.
    pub(crate) fn take_planned(&mut self, pool: Pool, stream: Stream, rounded: u64) -> Result<Option<u32>, AllocError> {
        let Some(plan) = self.paged.plan.as_mut() else { return Ok(None) };
        let (group, offset) = match plan.expect(Signature { stream, pool, bytes: rounded }) {
            Expected::Other => {
                self.end_plan();
                self.paged.recurrence.skip_next();
                return Ok(None);
            }
            Expected::Unplanned => return Ok(None),
            Expected::At { group, offset } => (group, offset),
        };
        let placed = match self.planned_base(group)? {
            Some(base) => {
                self.fill_planned_range(group, base)?;
                self.place_at(base + offset, rounded, group, offset)?
            }
            None => None,
        };
        if placed.is_some() {
            self.paged.plan_counts.placed += 1;
        } else {
            self.paged.plan_counts.missed += 1;
            if self.paged.plan.as_mut().is_some_and(Plan::missed) {
                self.end_plan();
            }
        }
        Ok(placed)
    }

    /// Logs a request served at `addr`, unless a plan is followed, and starts following a
    /// plan once its layout is made and a period begins. Only the test for a followed plan is
    /// inlined into malloc: while one is followed (every warm pass of a repeating program) a
    /// malloc makes no call here, and the call to the large rest, with its saved registers,
    /// cost 14 instructions a malloc.
    #[inline(always)]
    pub(crate) fn log_request(&mut self, addr: u64, sig: Signature) {
        if self.paged.plan.is_none() {
            self.log_unplanned_request(addr, sig);
        }
    }

    /// [`Allocator::log_request`] while no plan is followed.
    #[inline(never)]
    fn log_unplanned_request(&mut self, addr: u64, sig: Signature) {
        if let Some(planner) = self.paged.planner.as_mut() {
            if !planner.follows(sig) {
                // The request breaks the repeat: a new log begins after it.
                self.paged.planner = None;
                self.paged.plan_counts.dropped += 1;
                self.paged.recurrence.restart();
            } else if planner.advance(PLAN_STEP) && planner.at_period_start() {
                let plan = self.paged.planner.take().expect("a planner").finish();
                if self.exceeds_what_may_be_held(&plan) {
                    self.paged.plan_counts.dropped += 1;
                    self.paged.plan_counts.given_up_too_large += 1;
                    self.stop_learning();
                    return;
                }
                let kept: Vec<Option<u64>> = plan
                    .groups
                    .iter()
                    .map(|g| self.paged.plan_ranges.iter().copied().find(|&b| self.is_range_for(b, g.stream, g.pool)))
                    .collect();
                self.paged.plan = Some(plan);
                for (group, base) in kept.into_iter().enumerate() {
                    if let Some(base) = base {
                        self.set_group_range(group, base);
                    }
                }
            }
            return;
        }
        // The block handed out is the front `hand_out` split off: found by address.
        let Some(id) = self.heap.live_block(addr) else { return };
        let Some(period) = self.paged.recurrence.allocated(id, sig) else {
            if self.paged.recurrence.len() == 1 {
                self.paged.maps_when_logged = self.paged.maps;
            }
            return;
        };
        if self.paged.maps == self.paged.maps_when_logged {
            // Two periods and more went by with no memory mapped: a plan would only move the
            // memory held into its ranges, and a plan given up (its layout needing more than
            // may be held) leaves a layout the usual path may not settle into again. The log
            // has started again, as `Recurrence::allocated` does after every repeat found.
            self.paged.plan_counts.settled += 1;
            return;
        }
        self.paged.planner = Some(Planner::new(&period, self.paged.paged_page));
        self.paged.plan_counts.made += 1;
    }

    /// Logs the free of the allocated block `id`, unless a plan is followed.
    pub(crate) fn log_free(&mut self, id: u32) {
        if self.paged.plan.is_none() {
            self.paged.recurrence.freed(id);
        }
    }

    /// True when the range beginning at `base` is one the followed plan places requests in.
    #[inline]
    pub(crate) fn is_followed_range(&self, base: u64) -> bool {
        self.paged.plan.as_ref().is_some_and(|p| p.groups.iter().any(|g| g.base == Some(base)))
    }

    /// True when a range begins at `base` and serves `stream` and `pool`.
    fn is_range_for(&self, base: u64, stream: Stream, pool: Pool) -> bool {
        self.vm.range_of(base).is_some_and(|r| {
            let range = &self.vm.ranges[r];
            range.base == base && range.stream == stream && range.pool == pool
        })
    }

    /// The base of the followed plan's range for `group`, reserved now if it has none (or
    /// its range was released); `None` when no address space is left.
    fn planned_base(&mut self, group: usize) -> Result<Option<u64>, AllocError> {
        let Some(g) = self.paged.plan.as_ref().map(|p| p.groups[group]) else { return Ok(None) };
        if let Some(base) = g.base {
            // Released ranges are forgotten (`forget_planned_range`): a base is reserved.
            return Ok(Some(base));
        }
        let Some(id) = self.reserve_plain_range(g.stream, g.pool, self.paged.paged_page)? else { return Ok(None) };
        let base = self.heap[id].addr;
        self.paged.plan_ranges.push(base);
        self.set_group_range(group, base);
        Ok(Some(base))
    }

    /// True when free block `b` is parked: it lies in a followed plan's range, where only
    /// the plan places requests, so it is kept out of the free index.
    #[inline]
    pub(crate) fn is_parked(&self, b: &Block) -> bool {
        b.in_vm && self.paged.plan.as_ref().is_some_and(|p| p.covers(b.addr))
    }

    /// The free blocks parked in the followed plan's ranges.
    pub(crate) fn parked_blocks(&self) -> Vec<u32> {
        let Some(plan) = &self.paged.plan else { return Vec::new() };
        let bases: Vec<u64> = plan.groups.iter().filter_map(|g| g.base).collect();
        bases.into_iter().flat_map(|base| self.free_blocks_of_range(base)).collect()
    }

    /// The free blocks of the range at `base` (a group's range is always a whole one).
    fn free_blocks_of_range(&self, base: u64) -> Vec<u32> {
        let Some(r) = self.vm.range_of(base) else { return Vec::new() };
        let mut out = Vec::new();
        let mut id = self.vm.ranges[r].head;
        while id != NIL {
            let b = &self.heap[id];
            if b.state == BlockState::Free {
                out.push(id);
            }
            id = b.next;
        }
        out
    }

    /// Gives group `group` of the followed plan, which has none (a range released is
    /// forgotten), its range at `base`: the free blocks there leave the free index.
    fn set_group_range(&mut self, group: usize, base: u64) {
        debug_assert!(self.paged.plan.as_ref().is_some_and(|p| p.groups[group].base.is_none()));
        let bytes = self.vm.range_of(base).map_or(0, |r| self.vm.ranges[r].size);
        for id in self.free_blocks_of_range(base) {
            self.index_parked(id, false);
        }
        if let Some(plan) = self.paged.plan.as_mut() {
            (plan.groups[group].base, plan.groups[group].range_bytes) = (Some(base), bytes);
        }
    }

    /// Forgets the range at `base`, just released, as a followed plan's group range: its
    /// addresses may be handed out again at once, to another group or to no plan at all, and
    /// must not be taken for the group's. It was wholly unmapped, so nothing parked moves.
    pub(crate) fn forget_planned_range(&mut self, base: u64) {
        let Some(plan) = self.paged.plan.as_mut() else { return };
        for g in plan.groups.iter_mut().filter(|g| g.base == Some(base)) {
            (g.base, g.range_bytes) = (None, 0);
        }
    }

    /// Puts a free block that stops being parked into its pool's free index (`into`), or
    /// takes one that starts being parked out of it; its idle pages stay counted.
    fn index_parked(&mut self, id: u32, into: bool) {
        // A parked block is the allocator's own (a pool's are classic): its lane's index.
        if into {
            self.heap.cache(id);
        } else {
            self.heap.uncache(id);
        }
    }

    /// Gives the followed plan up: the free blocks parked in its ranges go back into the free
    /// index.
    fn end_plan(&mut self) {
        let parked = self.parked_blocks();
        self.paged.plan = None;
        self.paged.plan_counts.dropped += 1;
        for id in parked {
            self.index_parked(id, true);
        }
    }

    /// Notes that placing a request where the followed plan puts it moved memory. Memory
    /// moves into a plan's ranges during the first period followed; when it still moves in a
    /// later one, with no planned place missed since the move before, the layout needs more
    /// pages than the policy may hold, and following it would move memory every period for
    /// good (a warm pass then costs a map and an unmap for each page moved). Such a plan is
    /// given up and no other is learned: the usual placement moves less. Decided here, on the
    /// slow path that moved, so that malloc's planned path pays nothing for it.
    fn note_planned_move(&mut self) {
        let missed = self.paged.plan_counts.missed;
        let Some(plan) = self.paged.plan.as_mut() else { return };
        if plan.moved_again(missed) {
            self.paged.plan_counts.given_up_moving += 1;
            self.stop_learning();
        }
    }

    /// True when `plan`'s layout needs more pages than the policy may ever hold: more than
    /// the most pages ever in use with all the slack `page_slack` allows, and an eighth more,
    /// since the pages in use may grow while a plan is followed (its blocks straddle pages
    /// differently) and a plan given up here is never learned again. The training traces'
    /// layouts need 0.997 to 1.002 times their peak in use; the small decoder of
    /// `core/tests/learned_layout.rs` 1.008, the pair-regrowing one of `core/tests/regrowth.rs`
    /// 1.02 at batch 16 and 1.04 at batch 64 (1.05 and 1.67 laid out largest first). Following
    /// a plan past the check would move memory in every period: its first period followed
    /// would move every page held into its ranges, and `note_planned_move` would give it up in
    /// the next. No peak yet (nothing mapped) decides nothing.
    fn exceeds_what_may_be_held(&self, plan: &Plan) -> bool {
        let page = self.paged.paged_page;
        let pages: u64 = plan.groups.iter().map(|g| g.bytes / page).sum();
        let peak = self.paged.peak_in_use;
        peak > 0 && pages > peak.saturating_add(self.most_page_slack(peak)).saturating_add(peak / 8)
    }

    /// Gives up the plan followed or being made, and learns no other.
    pub(crate) fn stop_learning(&mut self) {
        if self.paged.plan.is_some() {
            self.end_plan();
        }
        self.paged.learns = false;
        self.paged.recurrence = Default::default();
        self.paged.planner = None;
    }

    /// The first time group `group` of the followed plan places a request: when its range
    /// at `base` is wholly unmapped, moves the memory held but idle (outside the plan's
    /// ranges) into it, up to the layout's bytes, so that following the plan does not create
    /// memory while idle chunks too large for a later span's room stay where they are.
    fn fill_planned_range(&mut self, group: usize, base: u64) -> Result<(), AllocError> {
        let Some(plan) = self.paged.plan.as_mut() else { return Ok(()) };
        let g = &mut plan.groups[group];
        if g.filled {
            return Ok(());
        }
        g.filled = true;
        let pages = g.bytes / self.paged.paged_page;
        let Some(r) = self.vm.range_of(base) else { return Ok(()) };
        let head = self.vm.ranges[r].head;
        if self.heap[head].state != BlockState::Unmapped || self.heap[head].is_split() {
            return Ok(());
        }
        self.paged.epochs.advance(&mut self.device)?;
        self.move_idle_into(head, base, pages)?;
        Ok(())
    }

    /// The block of range `r` holding `addr`, `offset` into group `group`'s layout: walked
    /// to from the nearest cell at or below it whose hint names a block still over that
    /// cell; else from the range's first block.
    fn planned_block(&mut self, r: usize, addr: u64, group: usize, offset: u64) -> u32 {
        let range = &self.vm.ranges[r];
        let (base, blocks) = (addr - offset, &self.heap);
        let near = self.paged.plan.as_mut().and_then(|plan| {
            plan.hint_below(group, offset, |(start, end), h| {
                blocks
                    .block(h)
                    .is_some_and(|b| b.in_vm && range.contains(b.addr) && b.addr < base + end && b.end() > base + start)
            })
        });
        let Some(mut id) = near else { return self.block_containing_near(range.head, addr) };
        while self.heap[id].addr > addr {
            id = self.heap[id].prev;
        }
        while self.heap[id].end() <= addr {
            id = self.heap[id].next;
        }
        id
    }

    /// Notes, while a plan is followed, that block `id` now covers `addr` (it begins there,
    /// or absorbed the block that did): the hint of `addr`'s cell, if in one of the plan's
    /// ranges.
    #[inline]
    pub(crate) fn note_in_plan(&mut self, addr: u64, id: u32) {
        if let Some(plan) = self.paged.plan.as_mut() {
            plan.note_block(addr, id);
        }
    }

    /// Places a request of `rounded` bytes at `offset` in group `group`'s range, at `at`, when
    /// every block there is free or unmapped: maps what is missing and returns the block of
    /// exactly `[at, at + rounded)`, uncached. `None` when a block there is in use or no memory
    /// could be found.
    fn place_at(&mut self, at: u64, rounded: u64, group: usize, offset: u64) -> Result<Option<u32>, AllocError> {
        let end = at + rounded;
        let Some(r) = self.vm.range_of(at) else { return Ok(None) };
        if end > self.vm.ranges[r].base + self.vm.ranges[r].size {
            return Ok(None);
        }
        let first = self.planned_block(r, at, group, offset);
        let (mut id, mut unmapped) = (first, false);
        while id != NIL && self.heap[id].addr < end {
            match self.heap[id].state {
                BlockState::Free => {}
                BlockState::Unmapped => unmapped = true,
                _ => return Ok(None),
            }
            id = self.heap[id].next;
        }
        let id = if unmapped {
            self.paged.epochs.advance(&mut self.device)?;
            let moved_before = self.paged.moved_pages;
            let Some(near) = self.map_under(&Placement { start: first, addr: at, run_end: end }, rounded)? else {
                return Ok(None);
            };
            if self.paged.moved_pages > moved_before {
                self.note_planned_move();
            }
            // Mapping merged blocks: `first` may be gone.
            self.block_containing_near(near, at)
        } else {
            first
        };
        debug_assert_eq!(self.heap[id].state, BlockState::Free);
        self.uncache(id);
        let placed = if self.heap[id].addr == at {
            id
        } else {
            let back = self.split_at(id, at);
            self.cache(id);
            back
        };
        // Cut the rest off here too, so that `hand_out` finds an exact fit: one split
        // fewer, and one hint fewer to note.
        if self.heap[placed].end() > end {
            let rest = self.split_at(placed, end);
            self.cache(rest);
        }
        Ok(Some(placed))
    }
}
