//! `check_invariants`: an expensive walk over every structure that says, in words, the first
//! way in which the paired structures disagree. Tests call it after every step.
//!
//! Checked: blocks tile each segment exactly and share its pool and stream; no two free
//! neighbours are left unmerged; the free index holds exactly the free blocks, under their
//! current keys; the live map holds exactly the allocated blocks; pending blocks have as
//! many queued events as their count says; every statistic's current value equals a
//! recount, and reserved bytes equal the sum of segment sizes; ghosts (mappings left behind
//! by moved chunks) overlap nothing, lie in unmapped blocks and belong to live chunks; blocks
//! a followed plan's ranges serve their group's stream and pool; an allocator that does not
//! learn layouts makes and follows no plan.

use alloc::format;
use alloc::string::String;

use crate::base::device::{Device, Stream};
use crate::base::size::{Pool, MIN_BLOCK};
use crate::data::addr_map::AddrTable;
use crate::data::block::{BlockState, NIL};
use crate::data::free_index::{FreeIndex, Key};
use crate::engine::allocator::Allocator;
use crate::report::stats::StatArray;

type Map<V> = crate::data::addr_map::IdMap<V>;

#[derive(Default)]
struct Recount {
    allocation: StatArray,
    segment: StatArray,
    active: StatArray,
    inactive_split: StatArray,
    allocated_bytes: StatArray,
    reserved_bytes: StatArray,
    active_bytes: StatArray,
    inactive_split_bytes: StatArray,
    requested_bytes: StatArray,
}

fn same_current(name: &str, got: &StatArray, want: &StatArray) -> Result<(), String> {
    for (pool, g, w) in [
        ("all", &got.all, &want.all),
        ("small_pool", &got.small_pool, &want.small_pool),
        ("large_pool", &got.large_pool, &want.large_pool),
    ] {
        if g.current != w.current {
            return Err(format!("stat {name}.{pool}.current is {} but a recount gives {}", g.current, w.current));
        }
        if g.peak < g.current {
            return Err(format!("stat {name}.{pool}: peak {} below current {}", g.peak, g.current));
        }
    }
    Ok(())
}

impl<D: Device> Allocator<D> {
    /// Walks every structure and returns the first inconsistency found.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.memo.replaying() {
            // A replay leaves the indexes alone (`recall.rs`): check those the blocks rebuild.
            self.check_memo()?;
            let (free, live) = self.indexes_from_blocks();
            return self.check_against(Some(&free), &live);
        }
        self.check_against(None, self.heap.live())
    }

    /// [`Allocator::check_invariants`] with the address table given, and the allocator's own
    /// free indexes when `rebuilt` gives them (else the heap's).
    fn check_against(&self, rebuilt: Option<&[FreeIndex; 2]>, live: &AddrTable) -> Result<(), String> {
        let mut indexed: Map<(u32, Pool, Key)> = Map::default();
        let pools = [Pool::Small, Pool::Large];
        let mut indexes: alloc::vec::Vec<(u32, Pool, &FreeIndex)> = self.heap.indexes().collect();
        if let Some(free) = rebuilt {
            indexes.retain(|&(owner, ..)| owner != 0);
            indexes.splice(0..0, free.iter().zip(pools).map(|(index, pool)| (0, pool, index)));
        }
        for (owner, pool, index) in indexes {
            index.check_streams()?;
            for (key, id) in index.iter() {
                if indexed.insert(id, (owner, pool, key)).is_some() {
                    return Err(format!("block {id} is in a free index twice"));
                }
            }
        }
        for (id, b) in self.heap.blocks() {
            let owner = self.heap.lanes().owner(b.stream_index);
            if owner != 0 && (b.in_vm || self.pools.get(owner).is_none()) {
                return Err(format!("block {id} of private pool {owner}: in virtual memory, or the pool is gone"));
            }
        }
        let mut unmapped_index: Map<(Pool, Stream, u64)> = Map::default();
        for pool in [Pool::Small, Pool::Large] {
            for (&(stream, addr), &id) in &self.vm.unmapped[pool.index()] {
                unmapped_index.insert(id, (pool, stream, addr));
            }
        }
        let mut queued: Map<usize> = Map::default();
        for (_, _, id) in self.events.iter() {
            *queued.entry(id).or_default() += 1;
        }
        let mut rc = Recount::default();
        let mut visited = 0usize;
        let mut reserved = 0u64;
        let mut idle = 0u64;
        for (head, b) in self.heap.blocks() {
            if b.prev != NIL {
                continue;
            }
            let (pool, stream) = (b.pool, b.stream_index);
            let range = if b.in_vm {
                let r = self.vm.range_of(b.addr).ok_or_else(|| format!("virtual block {head} lies in no range"))?;
                let range = &self.vm.ranges[r];
                if range.head != head
                    || range.base != b.addr
                    || range.pool != pool
                    || range.stream != self.heap.stream_of_lane(stream)
                {
                    return Err(format!("range at {:#x} disagrees with its head block {head}", range.base));
                }
                Some(range)
            } else {
                None
            };
            let mut seg_size = 0u64;
            let mut id = head;
            let mut prev = NIL;
            let mut prev_free = false;
            let mut end = b.addr;
            let split = b.next != NIL;
            while id != NIL {
                let c = self.heap.block(id).ok_or_else(|| format!("segment {head} links to vacant id {id}"))?;
                if c.prev != prev {
                    return Err(format!(
                        "block {id} at {:#x}: prev is {} but the chain came from {prev}",
                        c.addr, c.prev
                    ));
                }
                if c.addr != end {
                    return Err(format!(
                        "block {id} starts at {:#x}, not where its predecessor ends ({end:#x})",
                        c.addr
                    ));
                }
                if c.size == 0 || c.size % MIN_BLOCK != 0 {
                    return Err(format!("block {id} has size {} (not a positive multiple of 512)", c.size));
                }
                if c.pool != pool || c.stream_index != stream {
                    return Err(format!("block {id} differs in pool or stream from its segment"));
                }
                let free = matches!(c.state, BlockState::Free | BlockState::Unmapped);
                if free && prev_free && self.heap[prev].state == c.state {
                    return Err(format!("{:?} blocks {prev} and {id} are neighbours but not merged", c.state));
                }
                if c.in_vm != b.in_vm {
                    return Err(format!("block {id} differs from its segment in being virtual"));
                }
                if let Some(range) = range {
                    let page = range.page;
                    if c.state == BlockState::Unmapped {
                        if (c.addr - range.base) % page != 0 || c.size % page != 0 {
                            return Err(format!("unmapped block {id} at {:#x} is not whole pages", c.addr));
                        }
                        if !range.is_unmapped(c.addr, c.end()) {
                            return Err(format!("unmapped block {id} at {:#x} lies over mapped memory", c.addr));
                        }
                    } else if !range.is_mapped(c.addr, c.end()) {
                        return Err(format!("{:?} block {id} at {:#x} lies over unmapped memory", c.state, c.addr));
                    }
                    if c.state == BlockState::Free && self.vm.mode == crate::engine::vrange::VmMode::Paged {
                        let w = crate::engine::vrange::whole_pages(c.addr, c.size, page);
                        idle += w.end - w.start;
                    }
                } else if c.state == BlockState::Unmapped {
                    return Err(format!("block {id} is unmapped outside a virtual range"));
                }
                self.check_block_membership(id, (&indexed, live), &unmapped_index, &queued)?;
                match c.state {
                    BlockState::Allocated => {
                        rc.allocation.increase(pool, 1);
                        rc.allocated_bytes.increase(pool, c.size);
                        rc.active.increase(pool, 1);
                        rc.active_bytes.increase(pool, c.size);
                        rc.requested_bytes.increase(pool, c.requested());
                    }
                    BlockState::PendingFree => {
                        rc.active.increase(pool, 1);
                        rc.active_bytes.increase(pool, c.size);
                        rc.requested_bytes.increase(pool, c.requested());
                    }
                    BlockState::Free if split && range.is_none() => {
                        rc.inactive_split.increase(pool, 1);
                        rc.inactive_split_bytes.increase(pool, c.size);
                    }
                    BlockState::Free | BlockState::Unmapped => {}
                }
                prev_free = free;
                seg_size += c.size;
                end = c.end();
                visited += 1;
                prev = id;
                id = c.next;
            }
            if range.is_none() || self.range_segments() == 1 {
                rc.segment.increase(pool, 1);
            }
            let held = match range {
                Some(r) => {
                    if seg_size != r.size {
                        return Err(format!(
                            "range at {:#x} has {} bytes of blocks for {} reserved",
                            r.base, seg_size, r.size
                        ));
                    }
                    let mut end = r.base;
                    for (&a, &(len, _)) in &r.mappings {
                        if a < end || (a - r.base) % r.page != 0 || len % r.page != 0 || a + len > r.base + r.size {
                            return Err(format!(
                                "mapping at {a:#x} overlaps another, is not whole pages, or leaves its range"
                            ));
                        }
                        end = a + len;
                    }
                    r.mappings.values().map(|(len, _)| len).sum::<u64>()
                }
                None => seg_size,
            };
            rc.reserved_bytes.increase(pool, held);
            reserved += held;
        }
        for c in &self.paged.page_pool {
            let pool = c.counted_in.ok_or("a kept chunk counts in no pool")?;
            rc.reserved_bytes.increase(pool, c.pages * self.paged.paged_page);
            reserved += c.pages * self.paged.paged_page;
        }
        self.check_ghosts()?;
        self.check_planned()?;
        self.check_regions()?;
        let mapped: u64 = self.vm.ranges.iter().flat_map(|r| r.mappings.values().map(|(len, _)| len / r.page)).sum();
        if mapped != self.vm.mapped_pages {
            return Err(format!("{} pages counted mapped but {mapped} are", self.vm.mapped_pages));
        }
        // Only the paged policy counts idle pages; under any other mode the count stays 0.
        if idle != self.paged.idle_pages {
            return Err(format!("{} pages counted idle but {idle} are", self.paged.idle_pages));
        }
        if visited != self.heap.block_count() {
            return Err(format!(
                "{} blocks stored but {visited} reachable from segment heads",
                self.heap.block_count()
            ));
        }
        if reserved != self.reserved {
            return Err(format!("reserved is {} but segments sum to {reserved}", self.reserved));
        }
        let free_blocks = self.heap.blocks().filter(|(_, b)| b.state == BlockState::Free && !self.is_parked(b)).count();
        if indexed.len() != free_blocks {
            return Err(format!("free index holds {} blocks but {free_blocks} are free", indexed.len()));
        }
        let allocated = self.heap.blocks().filter(|(_, b)| b.state == BlockState::Allocated).count();
        if live.len() != allocated || live.ids().count() != allocated {
            return Err(format!("live map holds {} addresses but {allocated} blocks are allocated", live.len()));
        }
        let queued = self.events.iter().count();
        let counted: usize = self.heap.blocks().map(|(_, b)| b.event_count as usize).sum();
        if queued != counted {
            return Err(format!("{queued} events queued but blocks count {counted}"));
        }
        let s = &self.heap.stats().report();
        same_current("allocation", &s.allocation, &rc.allocation)?;
        same_current("segment", &s.segment, &rc.segment)?;
        same_current("active", &s.active, &rc.active)?;
        same_current("inactive_split", &s.inactive_split, &rc.inactive_split)?;
        same_current("allocated_bytes", &s.allocated_bytes, &rc.allocated_bytes)?;
        same_current("reserved_bytes", &s.reserved_bytes, &rc.reserved_bytes)?;
        same_current("active_bytes", &s.active_bytes, &rc.active_bytes)?;
        same_current("inactive_split_bytes", &s.inactive_split_bytes, &rc.inactive_split_bytes)?;
        same_current("requested_bytes", &s.requested_bytes, &rc.requested_bytes)?;
        Ok(())
    }

    /// Checks that no plan is made or followed without learning, and that a followed plan's
    /// ranges, once reserved, are reserved still (whole), serve the stream and pool of their
    /// group and are listed among the ranges kept for planned layouts.
    fn check_planned(&self) -> Result<(), String> {
        if !self.paged.learns && (self.paged.plan.is_some() || self.paged.planner.is_some()) {
            return Err("a plan is made or followed by an allocator that does not learn layouts".into());
        }
        let Some(plan) = &self.paged.plan else { return Ok(()) };
        for g in &plan.groups {
            let Some(base) = g.base else { continue };
            let Some(r) = self.vm.range_of(base).filter(|&r| self.vm.ranges[r].base == base) else {
                return Err(format!("the plan names a range at {base:#x} that is not reserved"));
            };
            let range = &self.vm.ranges[r];
            if g.range_bytes != range.size {
                return Err(format!(
                    "the plan takes the range at {base:#x} for {} bytes, not {}",
                    g.range_bytes, range.size
                ));
            }
            if range.stream != g.stream || range.pool != g.pool {
                return Err(format!("the plan's range at {base:#x} serves another stream or pool"));
            }
            if !self.paged.plan_ranges.contains(&base) {
                return Err(format!("the plan's range at {base:#x} is not listed as a planned layout's"));
            }
        }
        Ok(())
    }

    /// Checks that each stream's region (tensors regrown by copy) ends where one of that
    /// stream's own large ranges ends, starts inside it, and is no planned layout's, and that
    /// no allocator that learns layouts has one.
    fn check_regions(&self) -> Result<(), String> {
        for (stream, from) in self.regrowth_regions() {
            let own = self.vm.range_of(from).map(|r| &self.vm.ranges[r]).filter(|r| {
                r.stream == stream
                    && r.pool == crate::base::size::Pool::Large
                    && !self.paged.plan_ranges.contains(&r.base)
            });
            let Some(range) = own else {
                return Err(format!("stream {stream}'s region at {from:#x} lies in none of its own large ranges"));
            };
            if self.paged.regrowth.region(stream).is_none_or(|r| r.end != range.base + range.size) {
                return Err(format!("stream {stream}'s region at {from:#x} does not end where its range does"));
            }
            if self.paged.learns {
                return Err(format!("stream {stream} has a region while layouts are still learned"));
            }
        }
        Ok(())
    }

    /// Checks that ghosts overlap one another nowhere, each lies inside one unmapped block,
    /// and each belongs to a chunk that is kept or mapped (so destroying it finds the ghost);
    /// and that every wait for a ghost's work is a ghost's (one left behind would never be
    /// waited for).
    fn check_ghosts(&self) -> Result<(), String> {
        if let Some(a) = self.paged.ghost_waits.keys().find(|a| !self.paged.ghosts.contains_key(a)) {
            return Err(format!("a wait is kept for {a:#x}, where no ghost is"));
        }
        self.check_ghost_waits()?;
        let mut end = 0;
        for (&a, &(len, handle)) in &self.paged.ghosts {
            if a < end {
                return Err(format!("ghost at {a:#x} overlaps the one before it"));
            }
            end = a + len;
            let in_unmapped = self.vm.range_of(a).is_some_and(|_| {
                let b = &self.heap[self.block_containing(a)];
                b.state == BlockState::Unmapped && a + len <= b.end()
            });
            if !in_unmapped {
                return Err(format!("ghost at {a:#x} (+{len}) does not lie inside one unmapped block"));
            }
            let kept = self.paged.page_pool.iter().any(|c| c.handle == handle);
            let mapped = self.vm.ranges.iter().any(|r| r.mappings.values().any(|&(_, h)| h == handle));
            if !kept && !mapped {
                return Err(format!("ghost at {a:#x} belongs to handle {handle}, which is neither kept nor mapped"));
            }
        }
        Ok(())
    }

    /// Checks that the pages behind a ghost whose work may still run are where that work is
    /// waited for: not kept (a kept chunk may serve any stream), but mapped in the range of
    /// the work's stream, in a block that is in use or whose stamp is at least the free's, so
    /// that moving them to another stream or unmapping them waits for the work.
    fn check_ghost_waits(&self) -> Result<(), String> {
        for (&g, &(stream, stamp)) in &self.paged.ghost_waits {
            if self.paged.epochs.is_safe(stream, stamp) {
                continue;
            }
            let handle = self.paged.ghosts[&g].1;
            if self.paged.page_pool.iter().any(|c| c.handle == handle) {
                return Err(format!(
                    "the pages of the ghost at {g:#x} are kept while stream {stream}'s work may use them"
                ));
            }
            let live = self
                .vm
                .ranges
                .iter()
                .find_map(|r| r.mappings.iter().find(|(_, &(_, h))| h == handle).map(|(&a, _)| (a, r.stream)));
            let Some((at, on)) = live else {
                return Err(format!("the pages of the ghost at {g:#x} are mapped nowhere"));
            };
            let b = &self.heap[self.block_containing(at)];
            let waits = match b.state {
                BlockState::Allocated | BlockState::PendingFree => true,
                BlockState::Free => b.stamp() >= stamp,
                _ => false,
            };
            if on != stream || !waits {
                return Err(format!(
                    "the pages of the ghost at {g:#x}, which stream {stream}'s work may still use (stamp {stamp}), \
                     lie at {at:#x} on stream {on} in a {:?} block stamped {}",
                    b.state,
                    b.stamp()
                ));
            }
        }
        Ok(())
    }

    /// Checks that block `id` is in exactly the structures its state requires.
    fn check_block_membership(
        &self,
        id: u32,
        (indexed, live): (&Map<(u32, Pool, Key)>, &AddrTable),
        unmapped: &Map<(Pool, Stream, u64)>,
        queued: &Map<usize>,
    ) -> Result<(), String> {
        let b = &self.heap[id];
        let in_index = match indexed.get(&id) {
            None => false,
            Some(&(owner, pool, key))
                if owner == self.heap.lanes().owner(b.stream_index)
                    && pool == b.pool
                    && key == (self.heap.stream_of_lane(b.stream_index), b.size, b.addr) =>
            {
                true
            }
            Some(entry) => return Err(format!("block {id} is indexed as {entry:?}, not under its own pool and key")),
        };
        let in_live = live.get(b.addr, self.heap.slab()) == Some(id);
        let queued = queued.get(&id).copied().unwrap_or(0);
        let in_unmapped = unmapped.get(&id) == Some(&(b.pool, self.heap.stream_of_lane(b.stream_index), b.addr));
        if in_unmapped != (b.state == BlockState::Unmapped) {
            return Err(format!("block {id} is {:?} but in the unmapped index: {in_unmapped}", b.state));
        }
        let ok = match b.state {
            BlockState::Free => in_index != self.is_parked(b) && !in_live && queued == 0 && b.event_count == 0,
            BlockState::Allocated => !in_index && in_live && queued == 0 && b.event_count == 0,
            // A free deferred by a capture waits with no event recorded yet (capture.rs).
            BlockState::PendingFree if self.captures.is_deferred(id) => {
                !in_index && !in_live && b.event_count == 0 && queued == 0
            }
            BlockState::PendingFree => !in_index && !in_live && b.event_count > 0 && queued == b.event_count as usize,
            BlockState::Unmapped => !in_index && !in_live && queued == 0 && b.event_count == 0,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "block {id} at {:#x} is {:?} but in free index: {in_index}, in live map: {in_live}, events queued: {queued} (count {})",
                b.addr, b.state, b.event_count
            ))
        }
    }
}
