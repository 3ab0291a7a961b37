//! A snapshot's history read an event at a time, as [`CsvReader`](crate::trace::CsvReader)
//! reads a CSV a line at a time: [`SnapshotReader`] is fed one device's [`SnapshotEvent`]s in
//! order and builds the [`Trace`]; a caller that takes the operations out as it goes
//! ([`SnapshotReader::take_operations`]) holds only what grows with live allocations.
//!
//! What the reader must know of a whole list before its first event is in its [`EventList`],
//! made in a first pass over the events: whether the list logs completions at all (older
//! snapshots log none, and each free then counts as completed at once), whether it holds
//! allocations (which device a snapshot is read from, `snapshot_device.rs`), and the text of
//! what messages quote. One event of look-ahead is kept: a `free_requested` followed at once by
//! the `free_completed` of the same address did not wait.
//!
//! Invariants: fed the events of the lists a value holds, the reader gives what the value's
//! reader ([`parse_snapshot_value_within`](crate::trace::parse_snapshot_value_within)) gives,
//! which is this reader fed so; errors name `device_traces[d][i]` and come in the order of
//! the events.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::Value;

use crate::trace::limits::TraceLimits;
use crate::trace::operations::{checked_size, Builder, Trace, TraceOp};
use crate::trace::position::Position;
use crate::trace::snapshot_event::{action_of, Action, Field, SnapshotEvent};
use crate::trace::trace_error::{error, TraceError};

/// What a first pass learns of one device's list of events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventList {
    /// Events in the list.
    pub events: u64,
    /// It holds an allocation a replay keeps (one of zero bytes is skipped).
    pub allocations: bool,
    /// It logs `free_completed` at all.
    pub logs_completions: bool,
    /// The `action` of its first event with an unknown one ("" for none at all).
    first_unknown: Option<String>,
    /// The first `time_us` in it that is not a whole number, as JSON writes it.
    first_odd_time: Option<String>,
    /// The first `stream` of an `alloc` in it that is not a whole number.
    first_odd_stream: Option<String>,
}

impl EventList {
    /// Counts `e` in (`value`: the event it was read from, for what messages quote).
    pub fn see(&mut self, e: &SnapshotEvent, value: &Value) {
        self.events += 1;
        match e.action {
            Action::Alloc if e.size != Field::Number(0) => self.allocations = true,
            Action::FreeCompleted => self.logs_completions = true,
            Action::Unknown if self.first_unknown.is_none() => self.first_unknown = Some(action_of(value).to_string()),
            _ => {}
        }
        let quoted = |k: &str| value.get(k).map(Value::to_string);
        if e.time_us == Field::Other && self.first_odd_time.is_none() {
            self.first_odd_time = quoted("time_us");
        }
        if e.action == Action::Alloc && e.stream == Field::Other && self.first_odd_stream.is_none() {
            self.first_odd_stream = quoted("stream");
        }
    }
}

/// The list being read.
struct Current {
    device: usize,
    list: EventList,
    /// Events fed from it so far.
    index: u32,
    /// The last event fed, read once the next one (its look-ahead) comes.
    pending: Option<SnapshotEvent>,
}

/// A snapshot's history read an event at a time.
pub struct SnapshotReader {
    builder: Builder,
    placements: Vec<(u64, u64)>,
    /// The device read, `None` when no list has allocations (each is read, for what they
    /// count and for their errors).
    chosen: Option<usize>,
    /// Lists in the snapshot.
    lists: usize,
    current: Option<Current>,
}

impl SnapshotReader {
    /// A reader of device `chosen`'s list among `lists` (see the field), keeping `limits`.
    pub fn new(chosen: Option<usize>, lists: usize, limits: TraceLimits) -> SnapshotReader {
        SnapshotReader { builder: Builder::within(limits), placements: Vec::new(), chosen, lists, current: None }
    }

    /// Starts device `device`'s list, whose first pass gave `list`.
    pub fn begin(&mut self, device: usize, list: &EventList) -> Result<(), TraceError> {
        self.end_list()?;
        self.current = Some(Current { device, list: list.clone(), index: 0, pending: None });
        Ok(())
    }

    /// Feeds the list's next event.
    pub fn event(&mut self, e: SnapshotEvent) -> Result<(), TraceError> {
        let Some(c) = self.current.as_mut() else {
            return Err(error(0, "an event fed before its list began"));
        };
        let pending = c.pending.replace(e);
        if let Some(p) = pending {
            self.read(p, Some(e))?;
        }
        Ok(())
    }

    /// Moves the operations made so far out (see [`Trace::take_operations`]).
    pub fn take_operations(&mut self, each: impl FnMut(TraceOp, u64, Position)) {
        self.builder.take_operations(each);
    }

    /// The trace of the events fed.
    pub fn finish(mut self) -> Result<Trace, TraceError> {
        self.end_list()?;
        let mut trace = self.builder.finish();
        // The run's own record of its segments, where it kept one, over what its pointers imply.
        if !self.placements.is_empty() {
            trace.segment_placements = self.placements;
            trace.placements_inferred = false;
        }
        trace.device = self.chosen.filter(|_| self.lists > 1);
        Ok(trace)
    }

    /// Reads the current list's last event, which has no look-ahead.
    fn end_list(&mut self) -> Result<(), TraceError> {
        if let Some(p) = self.current.as_mut().and_then(|c| c.pending.take()) {
            self.read(p, None)?;
        }
        Ok(())
    }

    /// Reads the current list's next event `e`, `next` the one after it.
    fn read(&mut self, e: SnapshotEvent, next: Option<SnapshotEvent>) -> Result<(), TraceError> {
        let Some(c) = self.current.as_mut() else { return Ok(()) };
        let (d, i) = (c.device, c.index);
        c.index = c.index.saturating_add(1);
        let b = &mut self.builder;
        b.at = Position::Event(i);
        b.event(0)?;
        let action = e.action;
        let named = match action {
            Action::Unknown => c.list.first_unknown.as_deref().unwrap_or(""),
            a => a.name(),
        };
        let need = |k: &str, f: Field| {
            f.number()
                .ok_or_else(|| error(0, alloc::format!("device_traces[{d}][{i}] ({named}) lacks a numeric '{k}'")))
        };
        // Absent is 0 (older snapshots); present but not a whole number is an error.
        let optional = |k: &str, f: Field, quoted: &Option<String>| match f {
            Field::Absent => Ok(0),
            Field::Number(n) => Ok(n),
            Field::Other => Err(error(
                0,
                alloc::format!(
                    "device_traces[{d}][{i}] ({named}): '{k}' is {}, not a whole number",
                    quoted.as_deref().unwrap_or("?")
                ),
            )),
        };
        let time = optional("time_us", e.time_us, &c.list.first_odd_time)?;
        match action {
            Action::Alloc => {
                let size = checked_size(need("size", e.size)?)
                    .map_err(|m| error(0, alloc::format!("device_traces[{d}][{i}] (alloc): {m}")))?;
                let (addr, stream) = (need("addr", e.addr)?, optional("stream", e.stream, &c.list.first_odd_stream)?);
                b.alloc(addr, size, stream, time).map_err(|m| error(0, m))?
            }
            Action::FreeRequested => {
                let addr = need("addr", e.addr)?;
                let at_once = !c.list.logs_completions
                    || next.is_some_and(|n| n.action == Action::FreeCompleted && n.addr == e.addr);
                if at_once { b.free(addr, time) } else { b.free_deferred(addr, time) }.map_err(|m| error(0, m))?
            }
            Action::FreeCompleted => b.complete(need("addr", e.addr)?, time).map_err(|m| error(0, m))?,
            Action::Oom => b.failure(),
            Action::SegmentAlloc if self.chosen.is_some() => {
                self.placements.push((need("addr", e.addr)?, need("size", e.size)?))
            }
            Action::SegmentAlloc | Action::Ignored => {}
            Action::Unknown => b.unknown_action(named),
        }
        Ok(())
    }
}
