//! The paged policy's own state (cachalot's policy, `policy:cachalot`): physical pages kept
//! unmapped for reuse, the counts of idle, in-use and moved pages that page slack works from,
//! the streams' free epochs, the ghost mappings a move leaves, and the learned layout (the
//! requests logged, the plan being made, the plan followed). Classic segments and PyTorch's
//! expandable segments never touch it; the virtual ranges themselves are
//! [`crate::engine::vrange`]'s, shared by both.
//!
//! Invariants: `idle_pages` counts the whole pages of cached free blocks in mapped memory;
//! `peak_in_use` never falls; chunks in `page_pool` are mapped nowhere but at ghosts.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::base::device::{PhysHandle, Stream};
use crate::engine::paged::epochs::Epochs;
use crate::engine::paged::layout_plan::{Plan, Planner};
use crate::engine::paged::recurrence::Recurrence;
use crate::engine::paged::regrowth::Regrowth;
use crate::engine::vrange::{whole_pages, Chunk};

/// The paged policy's state.
#[derive(Clone, Debug)]
pub struct PagedState {
    /// Chunks unmapped but kept counted in the pool that last used them.
    pub page_pool: Vec<Chunk>,
    /// Mapped pages lying whole inside free blocks: reusable elsewhere.
    pub idle_pages: u64,
    /// Highest number of pages in use (mapped and not idle) so far.
    pub peak_in_use: u64,
    /// Pages moved from one place to another so far: what earns page slack.
    pub moved_pages: u64,
    /// Calls that mapped memory so far (a chunk landing back on its ghost makes none). Kept
    /// apart from `num_device_alloc`, which counts the same maps but which
    /// `reset_accumulated_stats` clears.
    pub maps: u64,
    /// `maps` once the recurrence log's first request was served: a period recognized with
    /// none made since repeated with no memory mapped, and needs no plan.
    pub maps_when_logged: u64,
    /// Page size of the paged policy (the device's granularity).
    pub paged_page: u64,
    /// log2 of `paged_page` when it is a power of two (as the CUDA devices' granularity is),
    /// so that counting a free block's whole pages, at every cache and uncache, needs no
    /// division.
    page_shift: Option<u32>,
    /// Streams' free epochs: when a free block's pages may move at once.
    pub epochs: Epochs,
    /// Mappings left in place when their chunk moved: address → (bytes,
    /// handle).
    pub ghosts: BTreeMap<u64, (u64, PhysHandle)>,
    /// Ghosts of chunks moved within their stream before the work queued before their free
    /// was known done: address → (stream, the free's stamp). Unmapping one waits for that.
    pub ghost_waits: BTreeMap<u64, (Stream, u32)>,
    /// The requests logged while no plan is followed (paged policy, `learn_layout`).
    pub recurrence: Recurrence,
    /// The layout being made, a few requests at a time, once the requests were seen to
    /// repeat.
    pub planner: Option<Planner>,
    /// The layout being followed, once made.
    pub plan: Option<Plan>,
    /// Bases of the ranges reserved for planned layouts, kept from one plan to the next.
    pub plan_ranges: Vec<u64>,
    /// Counts of what plans did: made, given up (for moving memory or too large to hold,
    /// too), requests placed as planned, and planned requests placed the usual way because
    /// their place was taken.
    pub plan_counts: PlanCounts,
    /// Whether requests are logged and plans made and followed: `learn_layout` under the
    /// paged policy, until a followed plan was found still moving memory after its first
    /// period (`Allocator::note_planned_move`) or a plan laid out needed more pages than may
    /// ever be held (`Allocator::exceeds_what_may_be_held`).
    pub learns: bool,
    /// The streams' misses counted for tensors regrown by copy, and the regions of those
    /// found growing so.
    pub regrowth: Regrowth,
}

/// What planned layouts did, counted over the allocator's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PlanCounts {
    /// Plans begun (each time the requests were seen to repeat while memory was mapped).
    pub made: u64,
    /// Plans given up, while being made or followed (a request not expected, too many places
    /// taken in one period, memory moved after the first period: `given_up_moving`, or a
    /// layout too large to hold: `given_up_too_large`).
    pub dropped: u64,
    /// Requests placed where a plan put them.
    pub placed: u64,
    /// Planned requests placed the usual way, their place taken.
    pub missed: u64,
    /// Of the plans given up, those that moved memory in a period after their first with no
    /// place missed: the layout needs more pages than the policy may hold. No plan is learned
    /// after one.
    pub given_up_moving: u64,
    /// Of the plans given up, those given up once laid out, before being followed: the
    /// layout alone needs more pages than the policy may ever hold (the most pages ever in
    /// use and all the slack `page_slack` allows), so following it would move memory in every
    /// period, as `given_up_moving` finds a period later. No plan is learned after one.
    pub given_up_too_large: u64,
    /// Periods recognized that repeated with no memory mapped, so that no plan was made for
    /// them: the usual placement had settled, and a plan would only move memory into its
    /// ranges (a plan is learned to stop memory moving).
    pub settled: u64,
}

impl PagedState {
    /// State for pages of `paged_page` bytes (the device's granularity).
    pub fn new(paged_page: u64, learns: bool) -> PagedState {
        PagedState {
            page_pool: Vec::new(),
            idle_pages: 0,
            peak_in_use: 0,
            moved_pages: 0,
            maps: 0,
            maps_when_logged: 0,
            paged_page,
            page_shift: paged_page.is_power_of_two().then(|| paged_page.trailing_zeros()),
            epochs: Epochs::default(),
            ghosts: BTreeMap::new(),
            ghost_waits: BTreeMap::new(),
            recurrence: Recurrence::default(),
            planner: None,
            plan: None,
            plan_ranges: Vec::new(),
            plan_counts: PlanCounts::default(),
            learns,
            regrowth: Regrowth::default(),
        }
    }

    /// How many pages `[addr, addr + size)` lies over whole: [`whole_pages`]'s length.
    #[inline]
    pub fn whole_page_count(&self, addr: u64, size: u64) -> u64 {
        match self.page_shift {
            Some(shift) => ((addr + size) >> shift).saturating_sub((addr + self.paged_page - 1) >> shift),
            None => {
                let w = whole_pages(addr, size, self.paged_page);
                w.end - w.start
            }
        }
    }

    /// Pages mapped (`mapped_pages` of them over all ranges) and not idle.
    #[inline]
    pub fn pages_in_use(&self, mapped_pages: u64) -> u64 {
        mapped_pages - self.idle_pages
    }

    /// Pages held: mapped (`mapped_pages` of them over all ranges) or kept unmapped.
    pub fn pages_held(&self, mapped_pages: u64) -> u64 {
        mapped_pages + self.page_pool.iter().map(|c| c.pages).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_page_counts_match_whole_pages_with_and_without_a_shift() {
        for page in [2u64 << 20, 3 << 20] {
            let paged = PagedState::new(page, false);
            for (addr, size) in [(0, 3 * page), (1, 3 * page), (page / 2, page), (page + 512, 1024), (5 * page, page)] {
                let w = whole_pages(addr, size, page);
                assert_eq!(paged.whole_page_count(addr, size), w.end - w.start, "page {page}, [{addr}, +{size})");
            }
        }
    }
}
