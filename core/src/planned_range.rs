//! Learning and following a planned layout under cachalot's policy (`learn_layout`).
//!
//! While no plan is followed, every request served and every free is logged
//! (`recurrence.rs`). Once the requests are seen to repeat, the first period is laid out
//! (`layout_plan.rs`) a few requests for each request served, while the workload is served
//! the usual way and must go on repeating; the plan is followed from the next period's start.
//! Each request the plan expects is placed at its planned address, in a range of its stream
//! and pool reserved for planned layouts (kept from one plan to the next), when the blocks
//! there are free or unmapped; pages missing under it are mapped as for any request, so
//! memory moves into the planned range during the first period followed and stays there in
//! the periods after. A planned address still taken (a request that lived longer this time)
//! sends that one request down the usual path; a request the plan did not expect, or too many
//! of one period placed the usual way, ends the plan, and the log starts again. Requests the
//! plan leaves out (those that outlive a period) go the usual way, never into a followed
//! plan's ranges.
//!
//! Invariants: a followed plan's ranges take no request but the plan's; nothing is logged
//! while a plan is made or followed. The plan's hints (the block last placed or freed in
//! each cell of its ranges) are only where a search starts: any block of the range is a
//! correct start, so a stale hint costs a longer walk, never a wrong block.

use crate::allocator::Allocator;
use crate::block::{BlockState, NIL};
use crate::device::{Device, Stream};
use crate::error::AllocError;
use crate::layout_plan::{Expected, Plan, Planner};
use crate::paging::Placement;
use crate::recurrence::Signature;
use crate::size::Pool;
use crate::vrange::VmMode;

/// Requests laid out for each request served while a plan is made: a period's layout is done
/// within a quarter of the next, and no request waits for more than a few.
const PLAN_STEP: usize = 4;

impl<D: Device> Allocator<D> {
    /// True when requests are logged and plans followed: cachalot's policy over virtual
    /// memory with `learn_layout` on.
    #[inline]
    pub(crate) fn learns_layout(&self) -> bool {
        self.vm.mode == VmMode::Paged && self.config.learn_layout
    }

    /// The block a followed plan puts this request in, taken out of the free index, or
    /// `None` when no plan is followed, the plan leaves the request out or its place is taken.
    pub(crate) fn take_planned(&mut self, pool: Pool, stream: Stream, rounded: u64) -> Result<Option<u32>, AllocError> {
        let Some(plan) = self.vm.plan.as_mut() else { return Ok(None) };
        let (group, offset) = match plan.expect(Signature { stream, pool, bytes: rounded }) {
            Expected::Other => {
                self.vm.plan = None;
                self.vm.plan_counts.dropped += 1;
                self.vm.recurrence.skip_next();
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
            self.vm.plan_counts.placed += 1;
        } else {
            self.vm.plan_counts.missed += 1;
            if self.vm.plan.as_mut().is_some_and(Plan::missed) {
                self.vm.plan = None;
                self.vm.plan_counts.dropped += 1;
            }
        }
        Ok(placed)
    }

    /// Logs a request served at `addr` (placed by the plan when `planned`), and starts
    /// following a plan when it completes a repetition.
    pub(crate) fn log_request(&mut self, addr: u64, sig: Signature) {
        if self.vm.plan.is_some() {
            return;
        }
        if let Some(planner) = self.vm.planner.as_mut() {
            if !planner.follows(sig) {
                // The request breaks the repeat: a new log begins after it.
                self.vm.planner = None;
                self.vm.plan_counts.dropped += 1;
                self.vm.recurrence.restart();
            } else if planner.advance(PLAN_STEP) && planner.at_period_start() {
                let mut plan = self.vm.planner.take().expect("a planner").finish();
                for g in &mut plan.groups {
                    g.base = self.vm.plan_ranges.iter().copied().find(|&b| self.is_range_for(b, g.stream, g.pool));
                }
                self.vm.plan = Some(plan);
            }
            return;
        }
        // The block handed out is the front `hand_out` split off: found by address.
        let Some(id) = self.live.get(addr, &self.blocks) else { return };
        let Some(period) = self.vm.recurrence.allocated(id, sig) else { return };
        self.vm.planner = Some(Planner::new(&period, self.vm.paged_page));
        self.vm.plan_counts.made += 1;
    }

    /// Logs the free of the allocated block `id`, unless a plan is followed.
    pub(crate) fn log_free(&mut self, id: u32) {
        if self.vm.plan.is_none() {
            self.vm.recurrence.freed(id);
        }
    }

    /// True when the range beginning at `base` is one the followed plan places requests in.
    #[inline]
    pub(crate) fn is_followed_range(&self, base: u64) -> bool {
        self.vm.plan.as_ref().is_some_and(|p| p.groups.iter().any(|g| g.base == Some(base)))
    }

    /// True when `addr` lies in a range the followed plan places requests in.
    pub(crate) fn in_followed_range(&self, addr: u64) -> bool {
        self.vm.range_of(addr).is_some_and(|r| self.is_followed_range(self.vm.ranges[r].base))
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
        let Some(g) = self.vm.plan.as_ref().map(|p| p.groups[group]) else { return Ok(None) };
        if let Some(base) = g.base.filter(|&b| self.is_range_for(b, g.stream, g.pool)) {
            return Ok(Some(base));
        }
        let Some(id) = self.reserve_range(g.stream, g.pool, self.vm.paged_page)? else { return Ok(None) };
        let base = self.blocks[id].addr;
        self.vm.plan_ranges.push(base);
        if let Some(plan) = self.vm.plan.as_mut() {
            plan.groups[group].base = Some(base);
        }
        Ok(Some(base))
    }

    /// The first time group `group` of the followed plan places a request: when its range
    /// at `base` is wholly unmapped, moves the memory held but idle (outside the plan's
    /// ranges) into it, up to the layout's bytes, so that following the plan does not create
    /// memory while idle chunks too large for a later span's room stay where they are.
    fn fill_planned_range(&mut self, group: usize, base: u64) -> Result<(), AllocError> {
        let Some(plan) = self.vm.plan.as_mut() else { return Ok(()) };
        let g = &mut plan.groups[group];
        if g.filled {
            return Ok(());
        }
        g.filled = true;
        let pages = g.bytes / self.vm.paged_page;
        let Some(r) = self.vm.range_of(base) else { return Ok(()) };
        let head = self.vm.ranges[r].head;
        if self.blocks[head].state != BlockState::Unmapped || self.blocks[head].is_split() {
            return Ok(());
        }
        self.advance_epochs()?;
        self.move_idle_into(head, base, pages)?;
        Ok(())
    }

    /// The block of range `r` holding `addr`, `offset` into group `group`'s layout: walked
    /// to from the nearest cell at or below it whose hint names a block still over that
    /// cell; else from the range's first block.
    fn planned_block(&mut self, r: usize, addr: u64, group: usize, offset: u64) -> u32 {
        let range = &self.vm.ranges[r];
        let (base, blocks) = (addr - offset, &self.blocks);
        let near = self.vm.plan.as_mut().and_then(|plan| {
            plan.hint_below(group, offset, |(start, end), h| {
                blocks
                    .get(h)
                    .is_some_and(|b| b.in_vm && range.contains(b.addr) && b.addr < base + end && b.end() > base + start)
            })
        });
        let Some(mut id) = near else { return self.block_containing_near(range.head, addr) };
        while self.blocks[id].addr > addr {
            id = self.blocks[id].prev;
        }
        while self.blocks[id].end() <= addr {
            id = self.blocks[id].next;
        }
        id
    }

    /// Notes, while a plan is followed, that block `id` now covers `addr` (it begins there,
    /// or absorbed the block that did): the hint of `addr`'s cell, if in one of the plan's
    /// ranges.
    #[inline]
    pub(crate) fn note_in_plan(&mut self, addr: u64, id: u32) {
        if let Some(plan) = self.vm.plan.as_mut() {
            plan.note_block(addr, id);
        }
    }

    /// Places a request of `rounded` bytes at `offset` in group `group`'s range, at `at`, when
    /// every block there is free or unmapped: maps what is missing and returns the block
    /// starting at `at`, out of the free index. `None` when a block there is in use or no
    /// memory could be found.
    fn place_at(&mut self, at: u64, rounded: u64, group: usize, offset: u64) -> Result<Option<u32>, AllocError> {
        let end = at + rounded;
        let Some(r) = self.vm.range_of(at) else { return Ok(None) };
        if end > self.vm.ranges[r].base + self.vm.ranges[r].size {
            return Ok(None);
        }
        let first = self.planned_block(r, at, group, offset);
        let (mut id, mut unmapped) = (first, false);
        while id != NIL && self.blocks[id].addr < end {
            match self.blocks[id].state {
                BlockState::Free => {}
                BlockState::Unmapped => unmapped = true,
                _ => return Ok(None),
            }
            id = self.blocks[id].next;
        }
        let id = if unmapped {
            self.advance_epochs()?;
            if !self.map_under(&Placement { start: first, addr: at, run_end: end }, rounded)? {
                return Ok(None);
            }
            // Mapping merged blocks: `first` may be gone.
            self.planned_block(r, at, group, offset)
        } else {
            first
        };
        debug_assert_eq!(self.blocks[id].state, BlockState::Free);
        self.uncache(id);
        if self.blocks[id].addr == at {
            return Ok(Some(id));
        }
        let back = self.split_at(id, at);
        self.cache(id);
        Ok(Some(back))
    }
}
