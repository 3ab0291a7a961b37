//! The layout cachalot's policy plans for a workload that repeats, and its progress through
//! each period.
//!
//! From a [`Period`] (every request of one period with when it was made and freed), each
//! request freed within a period of its making gets an offset in its stream and pool's
//! *planned range*: sizes an octave at a time, the largest octave first and within an octave
//! in the order the requests were made, counted from the period's quietest tick, each at the
//! tightest gap left by the requests placed before it whose lifetimes overlap its own (lowest
//! offset on ties). Within an octave the order of making, not of size: a text-generation
//! loop's K and V, a staircase of sizes a token apart, then take the slots of the earlier
//! layers' freed ones in turn (454 pages
//! against 444 in use at once for the pair-regrowing decoder of `core/tests/regrowth.rs` at
//! batch 16; largest first, 659, and the plan could not be held). The training traces'
//! layouts are the same size either way. Time is a
//! circle one period round, since a request made late in a period may live into the next,
//! where the same offsets are used again. Requests still live when the period was recognized
//! (weights, optimizer state: they outlive a period) are not planned; those living at least
//! half a period are taken to meet every other. With every lifetime known, the layout needs
//! little more than the peak of live bytes (docs/design.md), and a period that repeats the one
//! the plan was learned from finds each planned block free at its offset, over pages mapped in
//! an earlier period: nothing moves. A [`Planner`] makes the layout a few requests at a time
//! while following the workload's requests, then hands over the [`Plan`], which also keeps,
//! per cell of each range, the block last placed or freed there: where to start looking for
//! the block at a planned address.
//!
//! Invariants: two planned requests of one group whose lifetimes overlap on the circle have
//! disjoint offsets; every offset is a multiple of 512 and ends within its group's `bytes`,
//! a whole number of pages; `next < sigs.len()`.

use alloc::vec;
use alloc::vec::Vec;

use crate::base::device::Stream;
use crate::base::size::Pool;
use crate::engine::paged::cell_hints::CellHints;
use crate::engine::paged::recurrence::{Period, Signature};

/// A stream and pool's planned range: its bytes and, once reserved, its base address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// The stream it serves.
    pub stream: Stream,
    /// The pool it serves.
    pub pool: Pool,
    /// Bytes the layout needs, rounded up to whole pages.
    pub bytes: u64,
    /// Where its range begins, once reserved.
    pub base: Option<u64>,
    /// The bytes of its range, once reserved (0 before).
    pub range_bytes: u64,
    /// True once the memory already held was moved in (or its range was found in use).
    pub filled: bool,
}

/// What the plan says of the request just made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// Not the request the plan expected here: the workload no longer repeats.
    Other,
    /// Expected, but not planned (it outlives a period): placed as usual.
    Unplanned,
    /// Planned at `offset` in group `group`'s range.
    At {
        /// Index of the group.
        group: usize,
        /// Bytes from the group's base.
        offset: u64,
    },
}

/// A planned layout and where the workload stands in its period.
#[derive(Clone, Debug)]
pub struct Plan {
    sigs: Vec<Signature>,
    /// Per request of the period: its group and offset, if planned.
    slots: Vec<Option<(u32, u64)>>,
    /// Per group, where the blocks of its range lie: the block last placed in, freed in or
    /// merged over each cell.
    hints: Vec<CellHints>,
    /// The stream and pool ranges the plan uses.
    pub groups: Vec<Group>,
    next: usize,
    /// Planned requests of the current period that could not be placed as planned.
    missed: usize,
    /// Requests of the period that are planned.
    planned: usize,
    /// Periods begun since the plan was followed (counted where `next` wraps).
    periods: u64,
    /// The last placement that moved memory: the period it came in and how many planned
    /// places the allocator had missed by then.
    last_move: Option<(u64, u64)>,
}

/// One request to place: its index in the period, its lifetime `[born, died)` in ticks
/// (`died` may pass the period's end, wrapping round) and its bytes.
#[derive(Clone, Copy, Debug)]
struct Life {
    index: usize,
    born: u64,
    died: u64,
    bytes: u64,
}

impl Life {
    /// The lifetime as at most two stretches of `[0, ticks)`.
    fn stretches(&self, ticks: u64) -> [(u64, u64); 2] {
        if self.died <= ticks {
            [(self.born, self.died), (0, 0)]
        } else {
            [(self.born, ticks), (0, self.died - ticks)]
        }
    }

    /// True when the two lifetimes overlap on the circle of `ticks`.
    fn overlaps(&self, other: &Life, ticks: u64) -> bool {
        let mine = self.stretches(ticks);
        let theirs = other.stretches(ticks);
        mine.iter().any(|&(a, b)| a < b && theirs.iter().any(|&(c, d)| c < d && a < d && c < b))
    }
}

/// Time buckets the circle is cut into to tell long lives: those touching at least half of
/// them are taken to meet every later one.
const BUCKETS: u64 = 1024;
/// Coarser buckets, each listing the placed lives that touch it, where a life looks for
/// those it meets. Fewer than [`BUCKETS`], since a life is listed in every one it touches and
/// the search reads each list it touches: 128 took the fewest instructions on the reference
/// traces (of 16 to 1,024).
const LIST_BUCKETS: u64 = 128;

/// A plan being laid out a few requests at a time while the workload goes on (laying out
/// tens of thousands of requests at once would stall one request for a fraction of a
/// second), following the workload's requests so that the plan, once laid out, knows which
/// comes next.
#[derive(Clone, Debug)]
pub struct Planner {
    sigs: Vec<Signature>,
    groups: Vec<Group>,
    layouts: Vec<Layout>,
    slots: usize,
    next: usize,
    page: u64,
}

impl Planner {
    /// Starts laying out `period` in ranges of `page`-byte pages.
    pub fn new(period: &Period, page: u64) -> Planner {
        let ticks = u64::from(period.ticks.max(1));
        let mut groups: Vec<Group> = Vec::new();
        let mut lives: Vec<Vec<Life>> = Vec::new();
        for (index, r) in period.requests.iter().enumerate() {
            let Some(died) = r.died else { continue };
            let (born, died) = (u64::from(r.born), u64::from(died));
            if died - born > ticks || born >= ticks {
                continue;
            }
            let g = match groups.iter().position(|g| g.stream == r.sig.stream && g.pool == r.sig.pool) {
                Some(g) => g,
                None => {
                    groups.push(Group {
                        stream: r.sig.stream,
                        pool: r.sig.pool,
                        bytes: 0,
                        base: None,
                        range_bytes: 0,
                        filled: false,
                    });
                    lives.push(Vec::new());
                    groups.len() - 1
                }
            };
            lives[g].push(Life { index, born, died, bytes: r.sig.bytes });
        }
        let layouts = lives.into_iter().map(|l| Layout::new(l, ticks)).collect();
        let sigs = period.requests.iter().map(|r| r.sig).collect();
        Planner { sigs, groups, layouts, slots: period.requests.len(), next: period.next, page }
    }

    /// Moves on to the next request if `sig` is the one the period has next; false when it
    /// is not (the workload no longer repeats).
    pub fn follows(&mut self, sig: Signature) -> bool {
        if self.sigs[self.next] != sig {
            return false;
        }
        self.next = (self.next + 1) % self.sigs.len();
        true
    }

    /// True when the request expected next begins a period.
    pub fn at_period_start(&self) -> bool {
        self.next == 0
    }

    /// Lays out up to `budget` more requests; true once every one is.
    pub fn advance(&mut self, mut budget: usize) -> bool {
        for layout in &mut self.layouts {
            if budget == 0 {
                return false;
            }
            layout.step(&mut budget);
        }
        self.layouts.iter().all(Layout::done)
    }

    /// The plan, once [`Planner::advance`] has laid out every request.
    pub fn finish(self) -> Plan {
        let page = self.page;
        let mut slots = vec![None; self.slots];
        let mut groups = self.groups;
        let mut planned = 0;
        for (g, layout) in self.layouts.into_iter().enumerate() {
            debug_assert!(layout.done());
            groups[g].bytes = layout.top.div_ceil(page) * page;
            for (life, offset) in layout.lives.iter().zip(layout.offsets) {
                slots[life.index] = Some((g as u32, offset));
                planned += 1;
            }
        }
        let hints = groups.iter().map(|g| CellHints::new(g.bytes)).collect();
        Plan { sigs: self.sigs, slots, hints, groups, next: self.next, missed: 0, planned, periods: 0, last_move: None }
    }
}

impl Plan {
    /// Plans `period` in ranges of `page`-byte pages, all at once (the engine plans a few
    /// requests at a time, through [`Planner`]).
    #[cfg(test)]
    pub fn new(period: &Period, page: u64) -> Plan {
        let mut planner = Planner::new(period, page);
        planner.advance(usize::MAX);
        planner.finish()
    }

    /// Requests of the period that are planned.
    #[cfg(test)]
    pub fn planned(&self) -> usize {
        self.planned
    }

    /// What the plan says of a request with signature `sig`, and moves on to the next.
    pub fn expect(&mut self, sig: Signature) -> Expected {
        if self.sigs[self.next] != sig {
            return Expected::Other;
        }
        let slot = self.slots[self.next];
        self.next += 1;
        if self.next == self.sigs.len() {
            self.next = 0;
            self.missed = 0;
            self.periods += 1;
        }
        match slot {
            Some((group, offset)) => Expected::At { group: group as usize, offset },
            None => Expected::Unplanned,
        }
    }

    /// The nearest hint of group `group`'s range at or below `offset` that `keep` accepts
    /// ([`CellHints::nearest_below`]).
    pub fn hint_below(&mut self, group: usize, offset: u64, keep: impl FnMut((u64, u64), u32) -> bool) -> Option<u32> {
        self.hints[group].nearest_below(offset, keep)
    }

    /// True when `addr` lies in one of the plan's reserved ranges.
    #[inline]
    pub fn covers(&self, addr: u64) -> bool {
        self.groups.iter().any(|g| addr.wrapping_sub(g.base.unwrap_or(u64::MAX)) < g.range_bytes)
    }

    /// Notes that block `id` now covers `addr` (placed or freed there, or grown over it), if
    /// `addr` lies in one of the plan's ranges.
    pub fn note_block(&mut self, addr: u64, id: u32) {
        for (group, hints) in self.groups.iter().zip(&mut self.hints) {
            // One compare per group: an unreserved range's base lies past every address.
            let offset = addr.wrapping_sub(group.base.unwrap_or(u64::MAX));
            if offset < group.bytes {
                hints.note(offset, id);
                return;
            }
        }
    }

    /// Notes that placing the request just expected moved memory, when the allocator has
    /// missed `missed` planned places so far; true when the placement that moved before came
    /// in an earlier period and no place was missed since: the plan still moves memory after
    /// its first period, by itself.
    pub fn moved_again(&mut self, missed: u64) -> bool {
        // `expect` has moved on: after a period's last request `next` is already 0 and the
        // count already names the next period.
        let period = self.periods.saturating_sub(u64::from(self.next == 0));
        let again = self.last_move.is_some_and(|(p, m)| p < period && m == missed);
        self.last_move = Some((period, missed));
        again
    }

    /// Notes that a planned request could not be placed as planned; true when so many of
    /// this period's could not (more than an eighth, and more than one) that the plan no
    /// longer describes the workload.
    pub fn missed(&mut self) -> bool {
        self.missed += 1;
        self.missed > (self.planned / 8).max(1)
    }
}

/// One group's layout, made a few lives at a time: offsets for `lives` on the circle of
/// `ticks`, in the order of [`sort_for_layout`], each at the tightest gap among those placed
/// before it that it
/// meets. Lives are found through the coarse time buckets they touch: every life listed in a
/// bucket that a life spans whole meets it, so only the lives of its first and last bucket
/// are checked. Those touching at least half of the fine buckets (weights, optimizer state,
/// activations kept for most of a step) are taken to meet every later one: their offsets
/// join one list of merged stretches that every query adds to its own, rather than finding
/// them again through the buckets (merged, they are few, but meet nearly everything). A life
/// they do not meet only loses the use of their bytes.
#[derive(Clone, Debug)]
struct Layout {
    lives: Vec<Life>,
    ticks: u64,
    /// Ticks of a fine bucket, and how many there are.
    width: u64,
    buckets: u64,
    /// Ticks of a coarse bucket, and per coarse bucket the lives placed in it.
    list_width: u64,
    placed_in: Vec<Vec<u32>>,
    /// Offsets held by long lives, sorted and merged.
    held: Vec<(u64, u64)>,
    offsets: Vec<u64>,
    /// When each placed life was last gathered, so that one in several buckets counts once.
    seen: Vec<usize>,
    /// The stretches of offsets a life being placed must keep clear of.
    taken: Vec<(u64, u64)>,
    top: u64,
}

impl Layout {
    fn new(mut lives: Vec<Life>, ticks: u64) -> Layout {
        sort_for_layout(&mut lives, ticks);
        let (buckets, lists) = (BUCKETS.min(ticks), LIST_BUCKETS.min(ticks));
        Layout {
            offsets: Vec::with_capacity(lives.len()),
            seen: Vec::with_capacity(lives.len()),
            lives,
            ticks,
            width: ticks.div_ceil(buckets),
            buckets,
            list_width: ticks.div_ceil(lists),
            placed_in: vec![Vec::new(); lists as usize],
            held: Vec::new(),
            taken: Vec::new(),
            top: 0,
        }
    }

    fn done(&self) -> bool {
        self.offsets.len() == self.lives.len()
    }

    /// Places lives until all are placed or `budget` is spent.
    fn step(&mut self, budget: &mut usize) {
        let (ticks, width, list_width) = (self.ticks, self.width, self.list_width);
        while *budget > 0 && !self.done() {
            *budget -= 1;
            let n = self.offsets.len();
            let life = self.lives[n];
            self.taken.clear();
            let stretches = life.stretches(ticks);
            let live = stretches.iter().filter(|(a, b)| a < b);
            let touched: u64 = live.clone().map(|&(a, b)| (b - 1) / width - a / width + 1).sum();
            let spans = live.map(|&(a, b)| a / list_width..=(b - 1) / list_width);
            for span in spans.clone() {
                let (first, last) = (*span.start(), *span.end());
                for bucket in span {
                    // A life in a bucket that `life` spans whole meets it.
                    let inner = bucket != first && bucket != last;
                    for &p in &self.placed_in[bucket as usize] {
                        let p = p as usize;
                        if self.seen[p] != n && (inner || self.lives[p].overlaps(&life, ticks)) {
                            self.seen[p] = n;
                            self.taken.push((self.offsets[p], self.offsets[p] + self.lives[p].bytes));
                        }
                    }
                }
            }
            self.taken.extend_from_slice(&self.held);
            // By start alone: which of two stretches starting together comes first changes
            // no gap.
            self.taken.sort_unstable_by_key(|&(at, _)| at);
            let at = tightest_gap(&self.taken, life.bytes);
            self.top = self.top.max(at + life.bytes);
            self.offsets.push(at);
            self.seen.push(n);
            if 2 * touched >= self.buckets {
                hold(&mut self.held, (at, at + life.bytes));
            } else {
                for bucket in spans.flatten() {
                    self.placed_in[bucket as usize].push(n as u32);
                }
            }
        }
    }
}

/// Puts `lives` in the order they are laid out: an octave of sizes at a time, the largest
/// first, and within an octave in the order of making counted from the circle's quietest tick
/// ([`quietest_tick`]), not from wherever the period was found to begin. A loop found to
/// repeat from the middle of a generation would otherwise lay out the generation's last,
/// longest K and V before its first: the staircase of sizes that takes the freed slots in turn
/// breaks where the period was cut (the pair-regrowing generation of the tests below: 262 pages
/// from every cut, for a peak of 250; counted from the cut, 305 pages cut a third in).
fn sort_for_layout(lives: &mut [Life], ticks: u64) {
    let quiet = quietest_tick(lives, ticks);
    // Without a division: the key is computed at every comparison.
    let since_quiet = |born: u64| if born >= quiet { born - quiet } else { born + ticks - quiet };
    // Two sorts, the second stable: lives come in the order they were made, so the first
    // merges two runs, and the second compares octaves alone.
    lives.sort_by_key(|l| (since_quiet(l.born), l.index));
    lives.sort_by_key(|l| core::cmp::Reverse(l.bytes.next_power_of_two()));
}

/// The tick of `[0, ticks)` from which the bytes of `lives` live, tick by tick round the
/// circle, read least (the least rotation of that sequence): a tick at which the fewest bytes
/// are live, and among several such the same one wherever the circle was cut (or, where the
/// sequence repeats within the circle, one whose reading is the same), so that the layout does
/// not depend on where the period was found to begin. The bytes live come from the change at
/// each tick rather than from sorting the changes (sorting gpt2_train's cost 28 million
/// instructions on the request that completed its repeat): 8 bytes a tick, and a period's ticks
/// are its requests and the frees made within it, each of a block it made or one live before,
/// so this is no more than the log and the blocks held already take.
fn quietest_tick(lives: &[Life], ticks: u64) -> u64 {
    // Bytes live never reach 2^63: a device holds far less.
    let mut live = vec![0i64; ticks as usize + 1];
    for life in lives {
        for (a, b) in life.stretches(ticks) {
            if a < b {
                live[a as usize] += life.bytes as i64;
                live[b as usize] -= life.bytes as i64;
            }
        }
    }
    live.pop();
    for t in 1..live.len() {
        live[t] += live[t - 1];
    }
    least_rotation(&live) as u64
}

/// Where the least rotation of `s` begins (the lowest such index when several are equal), in
/// linear time and constant space: two candidates `i` and `j` and the length `k` they are known
/// to agree on; the one that reads greater at `k` is no start, and neither is any of the `k`
/// positions after it.
fn least_rotation(s: &[i64]) -> usize {
    let n = s.len();
    // `i + k` and `j + k` stay below `2n`: one wrap at most, without a division.
    let at = |x: usize| if x < n { s[x] } else { s[x - n] };
    let (mut i, mut j, mut k) = (0, 1, 0);
    while i < n && j < n && k < n {
        let (a, b) = (at(i + k), at(j + k));
        if a == b {
            k += 1;
            continue;
        }
        if a > b {
            i += k + 1;
        } else {
            j += k + 1;
        }
        if i == j {
            j += 1;
        }
        k = 0;
    }
    i.min(j)
}

/// The lowest offset of the smallest gap of at least `bytes` between `stretches` (sorted by
/// start), or the end of the highest if none.
fn tightest_gap(stretches: &[(u64, u64)], bytes: u64) -> u64 {
    let (mut free_from, mut best_gap, mut best_at) = (0, u64::MAX, None);
    for &(at, end) in stretches {
        let gap = at.saturating_sub(free_from);
        if gap >= bytes && gap < best_gap {
            (best_gap, best_at) = (gap, Some(free_from));
        }
        free_from = free_from.max(end);
    }
    best_at.unwrap_or(free_from)
}

/// Adds `[at, end)` to `held`, keeping it sorted and merged.
fn hold(held: &mut Vec<(u64, u64)>, (at, end): (u64, u64)) {
    let i = held.partition_point(|&(_, e)| e < at);
    let mut j = i;
    let (mut lo, mut hi) = (at, end);
    while j < held.len() && held[j].0 <= hi {
        lo = lo.min(held[j].0);
        hi = hi.max(held[j].1);
        j += 1;
    }
    held.splice(i..j, core::iter::once((lo, hi)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::paged::recurrence::Request;

    const PAGE: u64 = 2 << 20;

    fn request(bytes: u64, born: u32, died: Option<u32>) -> Request {
        Request { sig: Signature { stream: 0, pool: Pool::Large, bytes }, born, died }
    }

    /// A linear congruential sequence from `seed`: the same pseudo-random numbers every run.
    fn sequence(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 33
        }
    }

    /// Checks the module's invariants and returns each planned request's (offset, bytes).
    fn check(plan: &Plan, period: &Period) -> Vec<Option<(u64, u64)>> {
        let ticks = u64::from(period.ticks);
        for (i, a) in period.requests.iter().enumerate() {
            let Some((ga, oa)) = plan.slots[i] else { continue };
            let g = &plan.groups[ga as usize];
            assert_eq!(oa % 512, 0);
            assert!(oa + a.sig.bytes <= g.bytes && g.bytes % PAGE == 0);
            let la = Life { index: i, born: a.born.into(), died: a.died.unwrap().into(), bytes: a.sig.bytes };
            for (j, b) in period.requests.iter().enumerate().skip(i + 1) {
                let Some((gb, ob)) = plan.slots[j] else { continue };
                let lb = Life { index: j, born: b.born.into(), died: b.died.unwrap().into(), bytes: b.sig.bytes };
                if ga == gb && la.overlaps(&lb, ticks) {
                    assert!(oa + a.sig.bytes <= ob || ob + b.sig.bytes <= oa, "{i} and {j} overlap");
                }
            }
        }
        plan.slots.iter().zip(&period.requests).map(|(s, r)| s.map(|(_, o)| (o, r.sig.bytes))).collect()
    }

    #[test]
    fn requests_alive_together_get_disjoint_offsets_and_the_rest_share() {
        let mb = 1 << 20;
        // A and B overlap; C comes after both and reuses the space.
        let period = Period {
            requests: vec![request(4 * mb, 0, Some(3)), request(2 * mb, 1, Some(4)), request(6 * mb, 5, Some(6))],
            ticks: 7,
            next: 0,
        };
        let plan = Plan::new(&period, PAGE);
        let at = check(&plan, &period);
        assert_eq!(at, vec![Some((0, 4 * mb)), Some((4 * mb, 2 * mb)), Some((0, 6 * mb))]);
        assert_eq!(plan.groups[0].bytes, 6 * mb);
    }

    #[test]
    fn a_lifetime_that_wraps_round_the_period_keeps_its_space_at_the_start_of_the_next() {
        let mb = 1 << 20;
        // A lives from tick 8 into the next period's tick 2; B, early in the period, meets it.
        let period =
            Period { requests: vec![request(2 * mb, 0, Some(1)), request(2 * mb, 8, Some(12))], ticks: 10, next: 0 };
        let plan = Plan::new(&period, PAGE);
        let at = check(&plan, &period);
        assert_ne!(at[0].unwrap().0, at[1].unwrap().0);
    }

    #[test]
    fn requests_that_outlive_a_period_are_not_planned() {
        let period = Period {
            requests: vec![request(512, 0, None), request(1024, 1, Some(20)), request(512, 2, Some(3))],
            ticks: 10,
            next: 0,
        };
        let mut plan = Plan::new(&period, PAGE);
        assert_eq!(plan.planned(), 1);
        let sig = |bytes| Signature { stream: 0, pool: Pool::Large, bytes };
        assert_eq!(plan.expect(sig(512)), Expected::Unplanned);
        assert_eq!(plan.expect(sig(1024)), Expected::Unplanned);
        assert_eq!(plan.expect(sig(512)), Expected::At { group: 0, offset: 0 });
        assert_eq!(plan.expect(sig(1024)), Expected::Other, "the period starts again with 512");
        assert_eq!(plan.expect(sig(512)), Expected::Unplanned);
    }

    #[test]
    fn many_lifetimes_checked_pairwise() {
        // A pseudo-random period: sizes and lifetimes from a linear congruential sequence.
        let mut next = sequence(12345);
        let ticks = 3000;
        let requests = (0..600)
            .map(|i| {
                let bytes = (next() % 64 + 1) * 512 * if i % 7 == 0 { 1024 } else { 1 };
                let born = i * 5;
                request(bytes, born, Some(born + 1 + (next() % 2500) as u32))
            })
            .collect();
        let period = Period { requests, ticks, next: 0 };
        let plan = Plan::new(&period, PAGE);
        check(&plan, &period);
        assert_eq!(plan.planned(), 600);
    }

    #[test]
    fn a_plan_laid_out_a_few_requests_at_a_time_is_the_one_laid_out_at_once() {
        let requests: Vec<Request> = (0..40)
            .map(|i| request(512 * (1 + (i * 7) % 11), i as u32, Some(i as u32 + 1 + (i as u32 * 3) % 17)))
            .collect();
        let period = Period { requests, ticks: 80, next: 3 };
        let whole = Plan::new(&period, PAGE);
        let mut planner = Planner::new(&period, PAGE);
        let mut steps = 0;
        while !planner.advance(3) {
            steps += 1;
        }
        assert_eq!(steps, 40 / 3, "three requests laid out a step");
        let stepped = planner.finish();
        assert_eq!((stepped.slots.clone(), stepped.groups.clone()), (whole.slots.clone(), whole.groups.clone()));
        assert_eq!(stepped.next, 3);
        // Following the workload while laying out: the request expected next moves on, and
        // one not expected is refused.
        let mut planner = Planner::new(&period, PAGE);
        let sig = |i: usize| period.requests[i].sig;
        assert!(planner.follows(sig(3)) && planner.follows(sig(4)));
        assert_ne!(sig(4), sig(5));
        assert!(!planner.follows(sig(4)), "request 5 is expected, not 4 again");
        let mut at_start = Planner::new(&Period { next: 39, ..period.clone() }, PAGE);
        assert!(!at_start.at_period_start() && at_start.follows(sig(39)) && at_start.at_period_start());
    }

    /// One generation of a text-generating loop whose KV cache is regrown as a pair each step
    /// (both layers' K and V made a token longer, then the old ones freed), with a temporary a
    /// layer, as (bytes, op made, op freed); every block is freed by the generation's end.
    fn pair_regrowing_generation(layers: u64, steps: u64) -> (Vec<(u64, u64, u64)>, u64) {
        let token = 256 << 10;
        let (mut ops, mut made, mut caches) = (0u64, Vec::new(), vec![None; layers as usize]);
        let mut tick = || {
            ops += 1;
            ops - 1
        };
        for step in 0..steps {
            for cache in &mut caches {
                let bytes = (64 + step) * token;
                let pair = [made.len(), made.len() + 1];
                made.push((bytes, tick(), 0));
                made.push((bytes, tick(), 0));
                if let Some(old) = cache.replace(pair) {
                    for i in old {
                        made[i].2 = tick();
                    }
                }
                let temporary = made.len();
                made.push((3 << 20, tick(), 0));
                made[temporary].2 = tick();
            }
        }
        for pair in caches.into_iter().flatten() {
            for i in pair {
                made[i].2 = tick();
            }
        }
        (made, ops)
    }

    /// The period of `made` (as (bytes, op made, op freed), every block freed within `ticks`
    /// ops of its making) as found from its request `first`: ticks counted from that request.
    fn period_cut(made: &[(u64, u64, u64)], ticks: u64, first: usize) -> Period {
        let start = made[first].1;
        let at = |op: u64| ((op + ticks - start) % ticks) as u32;
        let requests = (0..made.len())
            .map(|k| {
                let (bytes, born, died) = made[(first + k) % made.len()];
                let lived = ((died + ticks - born) % ticks) as u32;
                Request {
                    sig: Signature { stream: 0, pool: Pool::Large, bytes },
                    born: at(born),
                    died: Some(at(born) + lived),
                }
            })
            .collect();
        Period { requests, ticks: ticks as u32, next: 0 }
    }

    /// The most bytes of `made` live at once, in whole pages.
    fn peak_pages(made: &[(u64, u64, u64)]) -> u64 {
        let mut changes: Vec<(u64, i64)> =
            made.iter().flat_map(|&(b, m, f)| [(m, b as i64), (f, -(b as i64))]).collect();
        changes.sort();
        let (mut live, mut peak) = (0, 0);
        for (_, c) in changes {
            live += c;
            peak = peak.max(live);
        }
        (peak as u64).div_ceil(PAGE)
    }

    #[test]
    fn a_period_found_from_the_middle_of_a_generation_is_laid_out_as_one_found_from_its_start() {
        // A serving loop's log may begin anywhere in a generation. Laid out in the order of
        // making counted from the period's first request, a period cut late in a generation
        // put its last, longest K and V first, and the staircase that lets each pair take the
        // slots of the pair freed before it broke at the cut (305 to 345 pages).
        let (made, ticks) = pair_regrowing_generation(8, 48);
        let from_start = Plan::new(&period_cut(&made, ticks, 0), PAGE);
        check(&from_start, &period_cut(&made, ticks, 0));
        let (pages, peak) = (from_start.groups[0].bytes / PAGE, peak_pages(&made));
        // Each pair takes the slots of the pair freed before it: one K or V more than the peak
        // at most (262 pages for a peak of 250).
        let largest = made.iter().map(|m| m.0).max().unwrap().div_ceil(PAGE);
        assert!(pages <= peak + largest, "{pages} pages laid out for a peak of {peak}");
        for first in [made.len() / 3, made.len() / 2, 3 * made.len() / 4] {
            let period = period_cut(&made, ticks, first);
            let plan = Plan::new(&period, PAGE);
            check(&plan, &period);
            assert_eq!(plan.groups[0].bytes, from_start.groups[0].bytes, "cut at request {first}");
        }
    }

    #[test]
    fn a_period_quiet_at_two_moments_is_laid_out_the_same_wherever_it_was_cut() {
        // Two buffers a step, each beside its own temporaries, none live between them or at
        // the step's end: two ticks with nothing live. The first of them counted from the cut
        // would depend on the cut.
        let mb = 1 << 20;
        let (mut made, mut op) = (Vec::new(), 0u64);
        for temporaries in [20u64, 60] {
            let buffer = made.len();
            made.push((512 * mb, op, 0));
            op += 1;
            for i in 0..temporaries {
                made.push(((2 + i % 3) * mb, op, op + 1));
                op += 2;
            }
            made[buffer].2 = op;
            op += 1;
        }
        let layouts: Vec<u64> = (0..made.len())
            .map(|first| {
                let period = period_cut(&made, op, first);
                let plan = Plan::new(&period, PAGE);
                check(&plan, &period);
                plan.groups[0].bytes
            })
            .collect();
        assert!(layouts.iter().all(|&b| b == layouts[0]), "{layouts:?}");
    }

    #[test]
    fn the_quietest_tick_is_the_least_rotation_of_the_bytes_live() {
        let mut next = sequence(7);
        for ticks in [1u64, 2, 7, 40, 300] {
            let lives: Vec<Life> = (0..ticks.min(60) as usize)
                .map(|index| {
                    let born = next() % ticks;
                    Life { index, born, died: born + 1 + next() % ticks, bytes: 512 * (1 + next() % 3) }
                })
                .collect();
            // Bytes live at each tick, counted life by life.
            let live: Vec<i64> = (0..ticks)
                .map(|t| {
                    let holds = |l: &Life| l.stretches(ticks).iter().any(|&(a, b)| a <= t && t < b);
                    lives.iter().filter(|l| holds(l)).map(|l| l.bytes as i64).sum()
                })
                .collect();
            let rotation = |r: usize| live[r..].iter().chain(&live[..r]).copied().collect::<Vec<_>>();
            let least = (0..live.len()).min_by_key(|&r| (rotation(r), r)).unwrap();
            assert_eq!(quietest_tick(&lives, ticks), least as u64, "ticks {ticks}");
            assert_eq!(live[least], *live.iter().min().unwrap());
        }
        // Equal rotations: the lowest index; a sequence that repeats within itself.
        assert_eq!(least_rotation(&[3, 1, 2, 1, 2]), 1);
        assert_eq!(least_rotation(&[2, 1, 2, 1]), 1);
        assert_eq!(least_rotation(&[5]), 0);
    }

    #[test]
    fn held_stretches_stay_sorted_and_merged() {
        let mut held = Vec::new();
        for s in [(10, 20), (30, 40), (20, 25), (50, 60), (5, 8), (35, 55)] {
            hold(&mut held, s);
        }
        assert_eq!(held, vec![(5, 8), (10, 25), (30, 60)]);
        // The tightest gap: 8..10 is too small for 3, 25..28 fits exactly.
        let mut all = held.clone();
        all.push((28, 29));
        all.sort();
        assert_eq!(tightest_gap(&all, 3), 25);
        assert_eq!(tightest_gap(&held, 100), 60);
        assert_eq!(tightest_gap(&[], 7), 0);
    }

    /// The layout by its definition, gathering every life placed before by a pairwise check:
    /// per life, in the layout's order, the union of the stretches it must keep clear of (those of
    /// the lives it meets, and of every long life), and the lowest offset of its smallest gap
    /// that fits, else the union's end.
    fn reference_offsets(mut lives: Vec<Life>, ticks: u64) -> Vec<(usize, u64)> {
        sort_for_layout(&mut lives, ticks);
        let (buckets, mut placed) = (BUCKETS.min(ticks), Vec::<(Life, u64, bool)>::new());
        let width = ticks.div_ceil(buckets);
        for life in lives {
            let mut clear: Vec<(u64, u64)> = placed
                .iter()
                .filter(|(p, _, long)| *long || p.overlaps(&life, ticks))
                .map(|&(p, at, _)| (at, at + p.bytes))
                .collect();
            clear.sort();
            let (mut free_from, mut best) = (0, None::<(u64, u64)>);
            for (at, end) in clear {
                let gap = at.saturating_sub(free_from);
                if gap >= life.bytes && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, free_from));
                }
                free_from = free_from.max(end);
            }
            let at = best.map_or(free_from, |(_, at)| at);
            let touched: u64 = life
                .stretches(ticks)
                .iter()
                .filter(|(a, b)| a < b)
                .map(|&(a, b)| (b - 1) / width - a / width + 1)
                .sum();
            placed.push((life, at, 2 * touched >= buckets));
        }
        let mut offsets: Vec<(usize, u64)> = placed.iter().map(|&(l, at, _)| (l.index, at)).collect();
        offsets.sort();
        offsets
    }

    #[test]
    fn the_bucketed_search_lays_out_exactly_what_a_pairwise_search_does() {
        let mut next = sequence(99);
        for ticks in [5u64, 130, 3000, 50_000] {
            // Short and long lives, some wrapping round the period's end, a few of equal size.
            let lives: Vec<Life> = (0..700)
                .map(|index| {
                    let born = next() % ticks;
                    let span = match next() % 4 {
                        0 => 1 + next() % (ticks / 50 + 1),
                        1 => 1 + next() % (ticks / 4 + 1),
                        2 => ticks / 2 + next() % (ticks / 2),
                        _ => 1 + next() % ticks,
                    };
                    let bytes = (next() % 48 + 1) * 512 * if index % 5 == 0 { 4096 } else { 1 };
                    Life { index, born, died: born + span.clamp(1, ticks), bytes }
                })
                .collect();
            let mut layout = Layout::new(lives.clone(), ticks);
            let mut budget = usize::MAX;
            layout.step(&mut budget);
            let mut offsets: Vec<(usize, u64)> = layout.lives.iter().map(|l| l.index).zip(layout.offsets).collect();
            offsets.sort();
            assert_eq!(offsets, reference_offsets(lives, ticks), "ticks {ticks}");
        }
    }

    #[test]
    fn too_many_misses_in_one_period_give_the_plan_up() {
        let requests = (0..16).map(|i| request(512, i, Some(i + 1))).collect();
        let mut plan = Plan::new(&Period { requests, ticks: 32, next: 0 }, PAGE);
        assert!(!plan.missed() && !plan.missed());
        assert!(plan.missed(), "three of sixteen is more than an eighth");
        // A short period gives up at its second miss.
        let requests = (0..4).map(|i| request(512, i, Some(i + 1))).collect();
        let mut plan = Plan::new(&Period { requests, ticks: 8, next: 0 }, PAGE);
        assert!(!plan.missed());
        assert!(plan.missed());
    }

    #[test]
    fn a_move_in_a_later_period_with_no_miss_between_is_a_move_again() {
        let requests: Vec<_> = (0..3).map(|i| request(512 << 10, i, Some(i + 1))).collect();
        let sigs: Vec<_> = requests.iter().map(|r| r.sig).collect();
        let mut plan = Plan::new(&Period { requests, ticks: 4, next: 0 }, PAGE);
        plan.expect(sigs[0]);
        assert!(!plan.moved_again(0), "the first move");
        plan.expect(sigs[1]);
        plan.expect(sigs[2]);
        assert!(!plan.moved_again(0), "the period's last request is still in the first period");
        plan.expect(sigs[0]);
        plan.expect(sigs[1]);
        assert!(plan.moved_again(0), "the next period");
        plan.expect(sigs[2]);
        plan.expect(sigs[0]);
        assert!(!plan.moved_again(1), "a place missed since the move before");
        plan.expect(sigs[1]);
        assert!(!plan.moved_again(1), "the same period");
        plan.expect(sigs[2]);
        assert!(!plan.moved_again(1), "its last request");
        plan.expect(sigs[0]);
        assert!(plan.moved_again(1), "the period after, no miss since");
    }
}
