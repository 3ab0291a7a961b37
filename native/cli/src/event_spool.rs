//! A snapshot's history kept out of memory while its trace is replayed: each event as the
//! core's fixed record ([`SnapshotEvent::BYTES`] bytes: action, numbers, stack id) in a
//! temporary file ([`TempStore`]), written as the snapshot is parsed, device by device. It
//! serves the reader's second pass (the chosen device's events, in order) and, later, what a
//! report quotes of one event (its address and frames: the first out-of-memory's location, a
//! `--snapshot` written with the recorded stacks).
//!
//! Invariants: events are written device by device, each device's in order, devices in
//! order; event `i` of device `d` reads back as written.

use std::io::{self, BufReader, Read};

use cachalot_core::trace::SnapshotEvent;

use crate::temp_store::{TempSink, TempStore};

/// Writes a history, an event at a time.
pub struct EventSpoolWriter {
    sink: TempSink,
    /// Index of each device's first event among all written.
    starts: Vec<u64>,
    count: u64,
    /// The first write that failed; later writes are skipped and `finish` returns it.
    error: Option<io::Error>,
}

/// A history, written.
pub struct EventSpool {
    store: TempStore,
    starts: Vec<u64>,
    count: u64,
}

impl Default for EventSpoolWriter {
    fn default() -> Self {
        EventSpoolWriter::new()
    }
}

impl EventSpoolWriter {
    /// A writer to a temporary file, or to memory where none can be made.
    pub fn new() -> EventSpoolWriter {
        EventSpoolWriter { sink: TempSink::new("events"), starts: Vec::new(), count: 0, error: None }
    }

    /// Appends device `device`'s next event (devices in order: a device after a later one is
    /// an error, which [`EventSpoolWriter::finish`] returns, as it does a failed write).
    pub fn push(&mut self, device: usize, e: SnapshotEvent) {
        if self.error.is_some() {
            return;
        }
        if device + 1 < self.starts.len() {
            self.error = Some(io::Error::other(format!("device {device}'s events after a later device's")));
            return;
        }
        while self.starts.len() <= device {
            self.starts.push(self.count);
        }
        match self.sink.write(&e.encode(), "the snapshot's events") {
            Ok(()) => self.count += 1,
            Err(e) => self.error = Some(e),
        }
    }

    /// The history written, or the first write that failed.
    pub fn finish(self) -> io::Result<EventSpool> {
        if let Some(e) = self.error {
            return Err(e);
        }
        Ok(EventSpool { store: self.sink.finish()?, starts: self.starts, count: self.count })
    }
}

impl EventSpool {
    /// The range of device `device`'s events among all.
    fn range(&self, device: usize) -> (u64, u64) {
        let start = self.starts.get(device).copied().unwrap_or(self.count);
        let end = self.starts.get(device + 1).copied().unwrap_or(self.count);
        (start, end.max(start))
    }

    /// Calls `each` with device `device`'s events in order; stops at its first error, or a
    /// failed read (as text).
    pub fn each<E: From<String>>(
        &self,
        device: usize,
        mut each: impl FnMut(SnapshotEvent) -> Result<(), E>,
    ) -> Result<(), E> {
        let (start, end) = self.range(device);
        let mut input = BufReader::with_capacity(1 << 16, self.store.reader(start * SnapshotEvent::BYTES as u64));
        let mut record = [0u8; SnapshotEvent::BYTES];
        for _ in start..end {
            input.read_exact(&mut record).map_err(|e| read_error(&e))?;
            each(SnapshotEvent::decode(&record))?;
        }
        Ok(())
    }

    /// Event `i` of device `device`, if there is one.
    pub fn get(&self, device: usize, i: u32) -> Option<SnapshotEvent> {
        let (start, end) = self.range(device);
        let at = start.checked_add(u64::from(i)).filter(|&at| at < end)?;
        let mut record = [0u8; SnapshotEvent::BYTES];
        self.store.reader(at * SnapshotEvent::BYTES as u64).read_exact(&mut record).ok()?;
        Some(SnapshotEvent::decode(&record))
    }
}

fn read_error(e: &io::Error) -> String {
    format!("cannot read back the snapshot's events: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::trace::{Action, Field};

    fn event(n: u64) -> SnapshotEvent {
        SnapshotEvent {
            action: if n % 2 == 0 { Action::Alloc } else { Action::FreeRequested },
            addr: Field::Number(n << 12),
            size: if n % 3 == 0 { Field::Other } else { Field::Number(n) },
            stack: n as u32,
            ..SnapshotEvent::default()
        }
    }

    #[test]
    fn each_devices_events_read_back_as_written() {
        let mut w = EventSpoolWriter::new();
        // Device 1 records nothing: its range is empty.
        (0..5).for_each(|n| w.push(0, event(n)));
        (5..70_000).for_each(|n| w.push(2, event(n)));
        let s = w.finish().unwrap();
        let all = |d| {
            let mut out = Vec::new();
            s.each(d, |e| -> Result<(), String> {
                out.push(e);
                Ok(())
            })
            .unwrap();
            out
        };
        assert_eq!(all(0), (0..5).map(event).collect::<Vec<_>>());
        assert!(all(1).is_empty());
        assert_eq!(all(2).len(), 69_995);
        assert_eq!(all(3), []);
        assert_eq!(s.get(2, 69_994), Some(event(69_999)));
        assert_eq!((s.get(2, 69_995), s.get(1, 0), s.get(0, 4)), (None, None, Some(event(4))));
        let mut w = EventSpoolWriter::new();
        w.push(1, event(0));
        w.push(0, event(1));
        assert!(w.finish().is_err(), "devices come in order");
    }
}
