//! The decision memo: a period of mallocs and frees, and the blocks PyTorch's rules chose for
//! them, answered again from memory while the workload repeats it.
//!
//! A training loop makes the same requests and frees in the same order, step after step, and
//! once its cache has settled the allocator is in the same state at the start of every step.
//! The allocator is deterministic: from the same state, the same operations get the same
//! blocks. So after one period has been served the usual way and found to end in the state
//! it began in, the next periods need not search the free index: each operation that equals
//! the recorded one at its position gets the recorded block. The memo is in one of three
//! phases:
//!
//! - **Watching.** Each malloc is logged as a token (its size and stream, mixed) beside the
//!   log's prefix function (Knuth–Morris–Pratt): when the latest tokens repeat the log's
//!   first `k`, with `k` at least [`MIN_REPEAT`] and at least the period `p = len - k` they
//!   imply, the mallocs, and the frees between them, are taken to repeat every `p`. A full log
//!   keeps its latest half, so what came before a loop falls out. Tokens only propose a
//!   period; nothing is trusted on their word.
//! - **Recording** the operations up to the `p`-th malloc as served the usual way: a
//!   malloc's size and stream, the address it got, the free block it took and the id of the
//!   block split off its front (if any); a free's address and block: 24 bytes an operation.
//!   The shape of every
//!   block (everything about it but its id and links) is kept from the start. An event
//!   queued, or a block used on another stream, stops the recording (a replay never looks at
//!   events) and the watch starts again. A period that makes a segment does not end as it
//!   began. One that fails to, four times running, is passed over: the watch goes on for
//!   longer periods only, since a loop's true period holds shorter repeats that may not leave
//!   the blocks as they found them, until the log fills at its largest.
//! - **Replaying.** A recording is replayed only if nothing in it touched the device: every
//!   malloc took a cached block (none made a segment, released one, retried or ran out of
//!   memory), no event was queued or waited for, and the device counters
//!   (`num_device_alloc`, `num_device_free`, `num_alloc_retries`, `num_ooms`,
//!   `num_sync_all_streams`) stand where they stood when it began; and if the blocks' shapes
//!   at its end equal those at its start. A period that releases a segment and gets it back at
//!   the same address ends with the same shapes, but its device calls do not repeat: the
//!   counters keep it out. The blocks are then renamed to the ids they had at the start, so
//!   the state is the recorded one to the id. From then on an operation equal to the recorded
//!   one at its position is applied at once to the blocks and the statistics, as the usual
//!   path would apply it, with the recorded block in place of the search; only the free index,
//!   the address table and the slab's list of vacant ids are left alone. So the blocks and the
//!   statistics are never behind: whatever reads them reads what the usual path would show.
//!   Before it is applied, each recorded operation is checked against the blocks (a malloc's
//!   block is free and splits as recorded, a free's block is allocated at its address); one
//!   that does not fit, the first operation that differs, and every call that needs the
//!   indexes end the replay: the indexes are rebuilt from the blocks and the watch starts
//!   again. A period's end renames the blocks back to the ids the period began with, since a
//!   period leaves blocks where it found them but not under the same ids.
//!
//! Invariants: while replaying, the blocks and the statistics are those the usual path
//! would have after the same calls, and the blocks' ids are those the recording had at
//! `position`; the recorded operation at `position` fits the blocks (checked before it is
//! applied). Only the allocator's plain copy (see `Allocator::plain`) watches, records or
//! replays.

use alloc::vec::Vec;

use crate::base::device::Stream;
use crate::base::size::{Pool, MAX_REQUEST};
use crate::data::block::{Block, BlockState, Slab, NIL};
use crate::report::stats::Counters;

/// The fewest mallocs that must repeat before a repetition is believed.
pub const MIN_REPEAT: usize = 64;

/// The log's first capacity, in mallocs. A full log keeps its latest half and doubles,
/// up to [`MAX_LOG`], so that operations before a loop began (or before a replay ended)
/// fall out of it.
pub const FIRST_LOG: usize = 1 << 8;

/// The most mallocs the log holds (12 bytes each while watching; a recorded operation, a
/// malloc or a free, takes 24). A period is found once the log holds two of it from the log's start, so
/// periods up to a quarter of this are found from any start.
pub const MAX_LOG: usize = 1 << 19;

/// Periods recorded in a row that may fail to end as they began before watching starts again.
const MAX_UNSETTLED: u32 = 4;

/// The `front` of an entry that records a free.
const FREED: u32 = NIL - 1;

/// Where a malloc entry's key holds its stream's index: above every size a request may have.
const STREAM_SHIFT: u32 = 48;
const _: () = assert!(MAX_REQUEST < 1 << STREAM_SHIFT);

/// What the memo is doing, for tests and reports ([`crate::Allocator::memo_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoCounts {
    /// True while operations are answered from the memo.
    pub replaying: bool,
    /// Operations in the period replayed (0 when not replaying).
    pub period: usize,
    /// Whole periods answered from the memo since the allocator was made.
    pub periods_replayed: u64,
    /// Recordings not replayed because they touched the device (a segment made or
    /// released, a retry, an out-of-memory, an event) or did not end as they began.
    pub recordings_refused: u64,
    /// Replays ended by an operation that differed or a call that needed the indexes.
    pub replays_ended: u64,
    /// Bytes of host memory the memo holds: its log, its recording and the blocks' shapes.
    pub bytes: usize,
}

/// One recorded operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// A malloc's requested size, with its stream's index above [`STREAM_SHIFT`]; a free's
    /// address.
    pub key: u64,
    /// The address a malloc handed out (0 for a free).
    pub addr: u64,
    /// The block a malloc took from the cache, or the block a free freed.
    pub block: u32,
    /// The id of the block a malloc split off the front of `block` and handed out ([`NIL`]:
    /// `block` itself was handed out whole); [`FREED`] for a free.
    pub front: u32,
}

impl Entry {
    /// A malloc's entry; `None` for a stream index too large for the key (65,536 streams).
    fn malloc(size: u64, stream_index: u32, addr: u64, block: u32, front: u32) -> Option<Entry> {
        let key = size | (u64::from(u16::try_from(stream_index).ok()?) << STREAM_SHIFT);
        Some(Entry { key, addr, block, front })
    }

    /// True when this entry records a free.
    #[inline]
    pub fn is_free(&self) -> bool {
        self.front == FREED
    }

    /// A malloc's requested size.
    #[inline(always)]
    pub fn size(&self) -> u64 {
        self.key & ((1 << STREAM_SHIFT) - 1)
    }

    /// A malloc's stream, by its index in the allocator's stream table.
    #[inline(always)]
    pub fn stream_index(&self) -> u32 {
        (self.key >> STREAM_SHIFT) as u32
    }
}

/// Everything about a block that its id and links do not say; with the blocks in address
/// order, the links follow from where each segment starts and ends.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shape {
    addr: u64,
    size: u64,
    requested_or_stamp: u64,
    stream_index: u32,
    state: BlockState,
    pool: Pool,
    starts_segment: bool,
    ends_segment: bool,
    event_count: u8,
    in_vm: bool,
}

impl Shape {
    fn of(b: &Block) -> Shape {
        Shape {
            addr: b.addr,
            size: b.size,
            requested_or_stamp: b.raw_requested_or_stamp(),
            stream_index: b.stream_index,
            state: b.state,
            pool: b.pool,
            starts_segment: b.prev == NIL,
            ends_segment: b.next == NIL,
            event_count: b.event_count,
            in_vm: b.in_vm,
        }
    }
}

/// The segments that blocks in address order (as [`shapes`] gives them) tile: each from a
/// block that starts one to the end of the block that ends it.
fn segment_ranges(shapes: &[(Shape, u32)]) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    let mut start = 0;
    for (s, _) in shapes {
        if s.starts_segment {
            start = s.addr;
        }
        if s.ends_segment {
            ranges.push((start, s.addr + s.size));
        }
    }
    ranges
}

/// Every block's shape and id, in address order.
fn shapes(blocks: &Slab) -> Vec<(Shape, u32)> {
    let mut all: Vec<(Shape, u32)> = blocks.iter().map(|(id, b)| (Shape::of(b), id)).collect();
    all.sort_unstable_by_key(|(s, _)| s.addr);
    all
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Watching,
    Recording,
    Replaying,
}

/// The memo (see the module comment).
#[derive(Clone, Debug)]
pub(crate) struct DecisionMemo {
    phase: Phase,
    tokens: Vec<u64>,
    border: Vec<u32>,
    /// Tokens the log holds before it keeps its latest half.
    capacity: usize,
    /// The shortest period worth recording: past one that was recorded and failed.
    min_period: usize,
    /// Mallocs in the period being recorded.
    period: usize,
    /// Mallocs recorded so far.
    mallocs: usize,
    entries: Vec<Entry>,
    /// The blocks when the recording began.
    start: Vec<(Shape, u32)>,
    /// Index in `entries` of the next operation expected while replaying.
    position: usize,
    /// The device counters when the recording began.
    device_calls: [u64; 5],
    /// Each block's id at the period's end paired with its id at the start: a period of
    /// operations leaves blocks where it found them, but not under the same ids.
    renames: Vec<(u32, u32)>,
    /// The segments while replaying (a replay calls no device), as address ranges in order.
    segments: Vec<(u64, u64)>,
    /// Periods recorded that did not end in the state they began in.
    unsettled: u32,
    periods_replayed: u64,
    recordings_refused: u64,
    replays_ended: u64,
}

impl Default for DecisionMemo {
    fn default() -> Self {
        DecisionMemo {
            phase: Phase::Watching,
            tokens: Vec::new(),
            border: Vec::new(),
            capacity: FIRST_LOG,
            min_period: 0,
            period: 0,
            mallocs: 0,
            entries: Vec::new(),
            start: Vec::new(),
            position: 0,
            device_calls: [0; 5],
            renames: Vec::new(),
            segments: Vec::new(),
            unsettled: 0,
            periods_replayed: 0,
            recordings_refused: 0,
            replays_ended: 0,
        }
    }
}

/// The counters of calls to the device and of the steps that lead to them: a period that
/// moves any of them is not replayed.
fn device_calls(s: &Counters) -> [u64; 5] {
    [s.num_device_alloc, s.num_device_free, s.num_alloc_retries, s.num_ooms, s.num_sync_all_streams]
}

/// A malloc's token: its size and stream, mixed.
#[inline]
fn malloc_token(size: u64, stream: Stream) -> u64 {
    (size ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)).rotate_left(1)
}

impl DecisionMemo {
    /// True while operations are answered from the memo.
    #[inline(always)]
    pub fn replaying(&self) -> bool {
        self.phase == Phase::Replaying
    }

    /// The operation expected next while replaying.
    #[inline(always)]
    pub fn expected(&self) -> &Entry {
        &self.entries[self.position]
    }

    /// The operation expected next, to change in tests of the invariant check.
    #[cfg(test)]
    pub fn expected_mut(&mut self) -> &mut Entry {
        &mut self.entries[self.position]
    }

    /// Moves past the operation just answered; true at the period's end, where the caller
    /// ends the period ([`crate::Allocator::end_period`]).
    #[inline(always)]
    pub fn answered(&mut self) -> bool {
        self.position += 1;
        self.position == self.entries.len()
    }

    /// Each block's id at the period's end paired with its id at the start.
    pub fn renames(&self) -> &[(u32, u32)] {
        &self.renames
    }

    /// True when `addr` lies inside one of the segments the replay runs over.
    pub fn within_segments(&self, addr: u64) -> bool {
        let after = self.segments.partition_point(|&(start, _)| start <= addr);
        after > 0 && addr < self.segments[after - 1].1
    }

    /// Starts the next period.
    pub fn next_period(&mut self) {
        self.position = 0;
        self.periods_replayed += 1;
    }

    /// Forgets the log and any recording and starts watching again (the caller rebuilds the
    /// indexes first if this ends a replay). What a recording or a replay held is given
    /// back: the next recording allocates its own.
    pub fn restart(&mut self) {
        self.replays_ended += self.replaying() as u64;
        self.phase = Phase::Watching;
        self.tokens.clear();
        self.border.clear();
        self.capacity = FIRST_LOG;
        self.min_period = 0;
        self.entries = Vec::new();
        self.start = Vec::new();
        self.renames = Vec::new();
        self.segments = Vec::new();
        self.position = 0;
        self.unsettled = 0;
    }

    /// Notes a malloc served the usual way: `taken` is the block it took, `handed` the block
    /// handed out (the front split off `taken`, or `taken`) at `addr`; `quiet` says no event
    /// is queued and no block is marked for another stream, and `stats` are the statistics
    /// after it, whose device counters tell whether it called the device. A recording begins
    /// only when quiet, so no event is queried during it (a free that queues one stops it).
    #[inline(always)]
    pub fn malloc_served(
        &mut self,
        blocks: &mut Slab,
        stats: &Counters,
        op: (u64, Stream, u32, u32, u64),
        quiet: bool,
    ) {
        let (size, stream, taken, handed, addr) = op;
        match self.phase {
            Phase::Watching => self.watch(blocks, stats, malloc_token(size, stream), quiet),
            Phase::Recording => {
                let front = if handed == taken { NIL } else { handed };
                let Some(entry) = Entry::malloc(size, blocks[taken].stream_index, addr, taken, front) else {
                    return self.interrupt();
                };
                self.entries.push(entry);
                self.mallocs += 1;
                if self.mallocs == self.period {
                    self.end_recording(blocks, stats);
                }
            }
            Phase::Replaying => {}
        }
    }

    /// Notes a free served the usual way of block `id` at `addr`; `quiet` says no event is
    /// queued (this free's included) and no block is marked for another stream. A replay
    /// never looks at events, so a recording that meets one stops. Frees are not logged
    /// while watching: the mallocs propose the period.
    #[inline(always)]
    pub fn free_served(&mut self, addr: u64, id: u32, quiet: bool) {
        match self.phase {
            Phase::Watching => {}
            Phase::Recording if quiet => self.entries.push(Entry { key: addr, addr: 0, block: id, front: FREED }),
            Phase::Recording => self.interrupt(),
            Phase::Replaying => {}
        }
    }

    /// Ends a recording that met an event queued or a block used on another stream (no
    /// replay may begin then) and watches again, for the same periods: that passes.
    #[cold]
    fn interrupt(&mut self) {
        let min_period = self.min_period;
        self.restart();
        self.min_period = min_period;
    }

    /// Ends the recordings of a period that did not end as it began and watches for a longer
    /// one: a loop's true period holds its shorter repeats, which may not leave the blocks as
    /// they found them.
    #[cold]
    fn give_up(&mut self) {
        let longer = self.period + 1;
        self.restart();
        self.min_period = longer;
        self.capacity = (4 * longer).next_power_of_two().clamp(FIRST_LOG, MAX_LOG);
    }

    /// Logs a token and extends the prefix function; begins recording once a period shows.
    #[inline(always)]
    fn watch(&mut self, blocks: &Slab, stats: &Counters, token: u64, quiet: bool) {
        let k = self.log(token);
        let i = self.tokens.len() - 1;
        let period = i + 1 - k;
        // A period much shorter than the blocks are many would spend more on comparing the
        // blocks than replaying saves.
        if k >= MIN_REPEAT && k >= period && period >= self.min_period && period * 8 >= blocks.len() && quiet {
            self.begin_recording(blocks, stats, period);
        } else if i + 1 == self.capacity {
            self.keep_latest_half();
        }
    }

    /// Drops the log's older half and computes the prefix function of the rest; the
    /// capacity doubles up to [`MAX_LOG`]. A log full at [`MAX_LOG`] found no period it may
    /// record, so periods passed over before are tried again (a cache may take longer to
    /// settle than four periods).
    #[cold]
    fn keep_latest_half(&mut self) {
        if self.capacity == MAX_LOG {
            self.min_period = 0;
        }
        let latest = self.tokens.split_off(self.tokens.len() / 2);
        self.tokens.clear();
        self.border.clear();
        for token in latest {
            self.log(token);
        }
        self.capacity = (self.capacity * 2).min(MAX_LOG);
    }

    /// Appends a token and its prefix-function entry, which it returns: the length of the
    /// longest proper prefix of the log that also ends here.
    #[inline(always)]
    fn log(&mut self, token: u64) -> usize {
        let i = self.tokens.len();
        self.tokens.push(token);
        let mut k = if i == 0 { 0 } else { self.border[i - 1] as usize };
        while k > 0 && self.tokens[k] != token {
            k = self.border[k - 1] as usize;
        }
        if i > 0 && self.tokens[k] == token {
            k += 1;
        }
        self.border.push(k as u32);
        k
    }

    #[cold]
    fn begin_recording(&mut self, blocks: &Slab, stats: &Counters, period: usize) {
        self.tokens = Vec::new();
        self.border = Vec::new();
        self.phase = Phase::Recording;
        self.period = period;
        self.mallocs = 0;
        self.entries = Vec::with_capacity(2 * period);
        self.start = shapes(blocks);
        self.device_calls = device_calls(stats);
    }

    /// Compares the blocks with those at the recording's start; if they match and nothing in
    /// the period touched the device, renames them to their ids at the start and begins
    /// replaying, else records the next period.
    #[cold]
    fn end_recording(&mut self, blocks: &mut Slab, stats: &Counters) {
        let now = shapes(blocks);
        // Quiet at its start, a recording queries no event: a free that would queue one stops
        // it, and `record_stream` ends it. Every other device call moves a counter.
        let untouched = device_calls(stats) == self.device_calls;
        let same = now.len() == self.start.len() && now.iter().zip(&self.start).all(|((a, _), (b, _))| a == b);
        if !(untouched && same) {
            self.recordings_refused += 1;
            self.unsettled += 1;
            if self.unsettled == MAX_UNSETTLED {
                return self.give_up();
            }
            // Not settled yet: the period just served becomes the start of the next recording.
            self.start = now;
            self.entries.clear();
            self.mallocs = 0;
            self.device_calls = device_calls(stats);
            return;
        }
        self.renames = now.iter().zip(&self.start).map(|(&(_, id), &(_, was))| (id, was)).collect();
        self.segments = segment_ranges(&now);
        blocks.rename(&self.renames);
        self.start = Vec::new();
        self.entries.shrink_to_fit();
        self.phase = Phase::Replaying;
        self.position = 0;
    }

    /// What the memo is doing.
    pub fn counts(&self) -> MemoCounts {
        MemoCounts {
            replaying: self.replaying(),
            period: if self.replaying() { self.entries.len() } else { 0 },
            periods_replayed: self.periods_replayed,
            recordings_refused: self.recordings_refused,
            replays_ended: self.replays_ended,
            bytes: self.heap_bytes(),
        }
    }

    /// Host memory held: the log, the recording and the shapes.
    fn heap_bytes(&self) -> usize {
        self.tokens.capacity() * 8
            + self.border.capacity() * 4
            + self.entries.capacity() * core::mem::size_of::<Entry>()
            + self.start.capacity() * core::mem::size_of::<(Shape, u32)>()
            + self.renames.capacity() * 8
            + self.segments.capacity() * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(memo: &mut DecisionMemo, blocks: &mut Slab, tokens: impl IntoIterator<Item = u64>) -> Option<usize> {
        for (i, t) in tokens.into_iter().enumerate() {
            memo.malloc_served(blocks, &Counters::default(), (t, 0, 0, 0, 0), true);
            if memo.phase == Phase::Recording {
                return Some(i);
            }
        }
        None
    }

    #[test]
    fn a_period_is_proposed_once_the_log_holds_it_twice_and_at_least_min_repeat_tokens_repeat() {
        let (mut memo, mut blocks) = (DecisionMemo::default(), Slab::default());
        // A period of 10: found when 64 tokens repeat (index 73), not before.
        let at = watched(&mut memo, &mut blocks, (0..200).map(|i| i % 10));
        assert_eq!((at, memo.period), (Some(73), 10));
        // A period of 100: found at its second end.
        let (mut memo, mut blocks) = (DecisionMemo::default(), Slab::default());
        let at = watched(&mut memo, &mut blocks, (0..400).map(|i| i % 100));
        assert_eq!((at, memo.period), (Some(199), 100));
        // No repeat, no proposal, and the log keeps no more than its capacity.
        let (mut memo, mut blocks) = (DecisionMemo::default(), Slab::default());
        assert_eq!(watched(&mut memo, &mut blocks, 0..5000), None);
        assert!(memo.tokens.len() < memo.capacity && memo.capacity > FIRST_LOG, "{}", memo.capacity);
    }

    #[test]
    fn tokens_before_a_loop_fall_out_of_the_log() {
        let (mut memo, mut blocks) = (DecisionMemo::default(), Slab::default());
        let junk = (0..300).map(|i| 1_000_000 + i);
        let at = watched(&mut memo, &mut blocks, junk.chain((0..4000).map(|i| i % 150)));
        assert_eq!(memo.period, 150, "{at:?}");
    }

    #[test]
    fn a_recording_that_cannot_be_replayed_sends_the_watch_to_longer_periods() {
        let (mut memo, mut blocks) = (DecisionMemo::default(), Slab::default());
        watched(&mut memo, &mut blocks, (0..200).map(|i| i % 10)).unwrap();
        // A period that does not end as it began, four times, is passed over.
        for _ in 0..MAX_UNSETTLED {
            assert_eq!(memo.phase, Phase::Recording);
            blocks.insert(Block::new(0, 512, 0, BlockState::Free, Pool::Small, false));
            for t in 0..10 {
                memo.malloc_served(&mut blocks, &Counters::default(), (t, 0, 0, 0, 0), true);
            }
        }
        assert_eq!((memo.phase, memo.min_period), (Phase::Watching, 11));
        // The same short loop is not proposed again; one of 40 is.
        assert_eq!(watched(&mut memo, &mut blocks, (0..300).map(|i| i % 10)), None);
        assert!(watched(&mut memo, &mut blocks, (0..3000).map(|i| i % 40)).is_some());
        assert_eq!(memo.period, 40);
        memo.restart();
        assert_eq!((memo.min_period, memo.capacity, memo.tokens.len()), (0, FIRST_LOG, 0));
    }

    #[test]
    fn an_event_queued_ends_a_recording_without_passing_the_period_over() {
        let (mut memo, mut blocks) = (DecisionMemo::default(), Slab::default());
        watched(&mut memo, &mut blocks, (0..200).map(|i| i % 10)).unwrap();
        memo.free_served(0, 0, false);
        assert_eq!((memo.phase, memo.min_period), (Phase::Watching, 0));
        assert!(watched(&mut memo, &mut blocks, (0..200).map(|i| i % 10)).is_some());
    }

    #[test]
    fn a_period_passed_over_is_tried_again_once_the_log_fills_at_its_largest() {
        let (mut memo, mut blocks) = (DecisionMemo::default(), Slab::default());
        watched(&mut memo, &mut blocks, (0..200).map(|i| i % 10)).unwrap();
        memo.period = 10;
        memo.give_up();
        assert_eq!(memo.min_period, 11);
        let at = watched(&mut memo, &mut blocks, (0..2 * MAX_LOG).map(|i| i as u64 % 10));
        assert!(at.is_some_and(|i| i >= MAX_LOG / 2), "{at:?}");
        assert_eq!(memo.period, 10);
    }

    #[test]
    fn the_segments_are_found_from_the_blocks_shapes() {
        let mut blocks = Slab::default();
        // Two segments, [0, 2048) in two blocks and [8192, 8704) in one.
        let a = blocks.insert(Block::new(0, 1024, 0, BlockState::Free, Pool::Small, false));
        let b = blocks.insert(Block::new(1024, 1024, 0, BlockState::Allocated, Pool::Small, false));
        (blocks[a].next, blocks[b].prev) = (b, a);
        blocks.insert(Block::new(8192, 512, 0, BlockState::Free, Pool::Small, false));
        let memo = DecisionMemo { segments: segment_ranges(&shapes(&blocks)), ..DecisionMemo::default() };
        assert_eq!(memo.segments, [(0, 2048), (8192, 8704)]);
        let inside = [0, 1024, 2047, 8192, 8703].map(|addr| memo.within_segments(addr));
        let outside = [2048, 4096, 8191, 8704, u64::MAX].map(|addr| memo.within_segments(addr));
        assert_eq!((inside, outside), ([true; 5], [false; 5]));
    }

    #[test]
    fn a_recorded_operation_takes_24_bytes() {
        assert_eq!(core::mem::size_of::<Entry>(), 24);
    }

    #[test]
    fn a_malloc_entry_keeps_its_size_and_stream_apart() {
        let e = Entry::malloc(MAX_REQUEST, 65_535, 1 << 40, 3, NIL).unwrap();
        assert_eq!((e.size(), e.stream_index(), e.is_free()), (MAX_REQUEST, 65_535, false));
        let e = Entry::malloc(512, 0, 0, 3, 4).unwrap();
        assert_eq!((e.size(), e.stream_index()), (512, 0));
        assert_eq!(Entry::malloc(512, 65_536, 0, 3, 4), None);
    }

    #[test]
    fn a_period_short_beside_the_blocks_is_not_recorded() {
        let (mut memo, mut blocks) = (DecisionMemo::default(), Slab::default());
        for i in 0..100u64 {
            blocks.insert(Block::new(i << 9, 512, 0, BlockState::Free, Pool::Small, false));
        }
        assert_eq!(watched(&mut memo, &mut blocks, (0..200).map(|i| i % 10)), None);
        memo.restart();
        assert!(watched(&mut memo, &mut blocks, (0..400).map(|i| i % 20)).is_some());
        // Recording: the blocks' shapes are held, and counted.
        assert!(memo.heap_bytes() >= 100 * core::mem::size_of::<(Shape, u32)>(), "{}", memo.heap_bytes());
    }
}
