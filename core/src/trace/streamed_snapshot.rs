//! A PyTorch snapshot as JSON, its history handed on an event at a time as it is parsed:
//! nothing of the snapshot is held but the event being read (its frames interned as
//! `slim_json` interns them) and, per device, an [`EventList`]. The caller keeps each
//! [`SnapshotEvent`] where it likes (the command-line tool: in a temporary file) and feeds the
//! chosen device's to a [`SnapshotReader`](crate::trace::SnapshotReader) in a second pass.
//! Everything beside `device_traces` (segments, settings) is checked as JSON and skipped.
//!
//! Invariants: the events handed on, and the lists, are those the value of the same text holds
//! (`SnapshotEvent::of` of each entry of `device_traces[d]`, in order, `d` by `d`); what the
//! value's reader refuses as not a snapshot (a list, no `device_traces`, a list in it that is
//! not one) is refused with the same [`TraceError`]; nothing here panics on input. As with
//! `slim_json`, the caller bounds nesting first.

use core::cell::RefCell;
use core::fmt;

use alloc::string::String;
use alloc::vec::Vec;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::frame_table::FrameTable;
use super::slim_json::Slim;
use super::snapshot_event::SnapshotEvent;
use super::snapshot_reader::EventList;
use super::trace_error::{error, TraceError};

/// Why reading stopped, when it was not the JSON's syntax.
pub enum Stop<E> {
    /// The text is not JSON (serde_json's error, with its line).
    Json(E),
    /// The JSON is not a snapshot, or the caller refused an event.
    Trace(TraceError),
}

/// What the visitors share: the frame table, the lists so far, the caller's keeper of events
/// and why it stopped.
struct Shared<'a, F> {
    frames: RefCell<FrameTable>,
    lists: RefCell<Vec<EventList>>,
    keep: RefCell<&'a mut F>,
    stopped: RefCell<Option<TraceError>>,
}

impl<F> Shared<'_, F> {
    /// Stops the parse with `e`, kept to be told instead of serde's words.
    fn stop<E: de::Error>(&self, e: TraceError) -> E {
        let message = e.message.clone();
        *self.stopped.borrow_mut() = Some(e);
        E::custom(message)
    }
}

fn not_a_snapshot() -> TraceError {
    error(0, "no 'device_traces' list: not a PyTorch memory snapshot")
}

/// Reads the snapshot `de` parses, handing each event of `device_traces[d]` to `keep(d, e)`
/// in order, its frames interned into `frames`; returns each device's [`EventList`].
pub fn read_events<'de, D, F>(de: D, frames: &mut FrameTable, keep: &mut F) -> Result<Vec<EventList>, Stop<D::Error>>
where
    D: Deserializer<'de>,
    F: FnMut(usize, SnapshotEvent) -> Result<(), TraceError>,
{
    let shared = Shared {
        frames: RefCell::new(core::mem::take(frames)),
        lists: RefCell::new(Vec::new()),
        keep: RefCell::new(keep),
        stopped: RefCell::new(None),
    };
    let read = de.deserialize_any(Top { shared: &shared, seen: false });
    *frames = shared.frames.into_inner();
    match (read, shared.stopped.into_inner()) {
        (_, Some(e)) => Err(Stop::Trace(e)),
        (Err(e), None) => Err(Stop::Json(e)),
        (Ok(()), None) => Ok(shared.lists.into_inner()),
    }
}

/// The whole text: an object holding `device_traces`.
struct Top<'s, 'a, F> {
    shared: &'s Shared<'a, F>,
    seen: bool,
}

/// Anything at the top but an object: not a snapshot.
macro_rules! refuse {
    ($($name:ident: $t:ty),*) => {$(
        fn $name<E: de::Error>(self, _: $t) -> Result<(), E> {
            Err(self.shared.stop(not_a_snapshot()))
        }
    )*};
}

impl<'de, F: FnMut(usize, SnapshotEvent) -> Result<(), TraceError>> Visitor<'de> for Top<'_, '_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a PyTorch memory snapshot")
    }
    refuse!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64, visit_str: &str);
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(self.shared.stop(not_a_snapshot()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        let message = "a JSON list, not a PyTorch memory snapshot (an object with 'device_traces', as \
                       torch.cuda.memory._snapshot() returns)";
        Err(self.shared.stop(error(0, message)))
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key != "device_traces" {
                map.next_value_seed(Skip)?;
                continue;
            }
            if self.seen {
                return Err(self.shared.stop(error(0, "'device_traces' given twice")));
            }
            self.seen = true;
            map.next_value_seed(Lists { shared: self.shared })?;
        }
        if !self.seen {
            return Err(self.shared.stop(not_a_snapshot()));
        }
        Ok(())
    }
}

/// A value read and dropped. Unlike serde's `IgnoredAny`, which serde_json skips without
/// reading, its strings are read, so bytes that are not UTF-8 are refused wherever they are,
/// as they were when the whole value was held.
#[derive(Clone, Copy)]
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
}

/// `device_traces`: a list of lists.
struct Lists<'s, 'a, F> {
    shared: &'s Shared<'a, F>,
}

impl<'de, F: FnMut(usize, SnapshotEvent) -> Result<(), TraceError>> DeserializeSeed<'de> for Lists<'_, '_, F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(usize, SnapshotEvent) -> Result<(), TraceError>> Visitor<'de> for Lists<'_, '_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of each device's events")
    }
    refuse!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64, visit_str: &str);
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(self.shared.stop(not_a_snapshot()))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.shared.stop(not_a_snapshot()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut device = 0;
        while seq.next_element_seed(Events { shared: self.shared, device })?.is_some() {
            device += 1;
        }
        Ok(())
    }
}

/// `device_traces[device]`: its events.
struct Events<'s, 'a, F> {
    shared: &'s Shared<'a, F>,
    device: usize,
}

impl<'de, F: FnMut(usize, SnapshotEvent) -> Result<(), TraceError>> DeserializeSeed<'de> for Events<'_, '_, F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.shared.lists.borrow_mut().push(EventList::default());
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(usize, SnapshotEvent) -> Result<(), TraceError>> Visitor<'de> for Events<'_, '_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a device's list of events")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(self.not_a_list())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(self.not_a_list())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(self.not_a_list())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(self.not_a_list())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(self.not_a_list())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(self.not_a_list())
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.not_a_list())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let slim = Slim(&self.shared.frames);
        while let Some(value) = seq.next_element_seed(slim)? {
            let e = SnapshotEvent::of(&value);
            if let Some(list) = self.shared.lists.borrow_mut().last_mut() {
                list.see(&e, &value);
            }
            let kept = (self.shared.keep.borrow_mut())(self.device, e);
            kept.map_err(|e| self.shared.stop(e))?;
        }
        Ok(())
    }
}

impl<F> Events<'_, '_, F> {
    fn not_a_list<E: de::Error>(&self) -> E {
        self.shared.stop(error(0, alloc::format!("device_traces[{}] is not a list", self.device)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse_snapshot_value;
    use crate::trace::snapshot_reader::SnapshotReader;
    use crate::trace::TraceLimits;
    use serde_json::Value;

    /// The events handed on, fed to a reader, give the trace the value's reader gives.
    fn streamed(text: &str, device: Option<usize>) -> Result<crate::trace::Trace, TraceError> {
        let mut frames = FrameTable::default();
        let mut kept: Vec<(usize, SnapshotEvent)> = Vec::new();
        let mut keep = |d: usize, e: SnapshotEvent| {
            kept.push((d, e));
            Ok(())
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let lists = match read_events(&mut de, &mut frames, &mut keep) {
            Ok(lists) => lists,
            Err(Stop::Trace(e)) => return Err(e),
            Err(Stop::Json(e)) => return Err(error(e.line(), alloc::string::ToString::to_string(&e))),
        };
        let with_allocs = (0..lists.len()).filter(|&d| lists[d].allocations).collect();
        let chosen = crate::trace::choose_among(lists.len(), with_allocs, device)?;
        let mut reader = SnapshotReader::new(chosen, lists.len(), TraceLimits::DEFAULT);
        for (d, list) in lists.iter().enumerate() {
            if chosen.is_some_and(|c| c != d) {
                continue;
            }
            reader.begin(d, list)?;
            for (_, e) in kept.iter().filter(|(k, _)| *k == d) {
                reader.event(*e)?;
            }
        }
        reader.finish()
    }

    #[test]
    fn streamed_events_give_the_values_trace() {
        let text = r#"{"segments": [{"address": 1, "frames": [{"name": "s"}]}], "device_traces": [
            [{"action": "alloc", "addr": 8, "size": 0}],
            [{"action": "segment_alloc", "addr": 0, "size": 2097152, "frames": [{"name": "f"}]},
             {"action": "alloc", "addr": 4096, "size": 100, "stream": 3, "time_us": 5, "frames": [{"name": "f"}]},
             {"action": "alloc", "addr": 8192, "size": 100},
             {"action": "free_requested", "addr": 4096, "size": 100},
             {"action": "free_requested", "addr": 8192, "size": 100},
             {"action": "free_completed", "addr": 8192, "size": 100},
             {"action": "warp", "addr": 1},
             {"action": "oom", "addr": 0, "size": 100}]], "settings": {"a": [1, 2]}}"#;
        let value: Value = serde_json::from_str(text).unwrap();
        let whole = parse_snapshot_value(&value, None).unwrap();
        let s = streamed(text, None).unwrap();
        assert_eq!(
            (&s.ops, &s.times_us, &s.positions, &s.report),
            (&whole.ops, &whole.times_us, &whole.positions, &whole.report)
        );
        assert_eq!((s.segment_placements, s.device, s.lanes), (whole.segment_placements, whole.device, whole.lanes));
    }

    #[test]
    fn what_is_not_a_snapshot_is_refused_as_the_values_reader_refuses_it() {
        for text in [
            "[1, 2]",
            "5",
            "\"x\"",
            "null",
            r#"{"segments": []}"#,
            r#"{"device_traces": 3}"#,
            r#"{"device_traces": [[], 4]}"#,
            r#"{"device_traces": [{"a": 1}]}"#,
            r#"{"device_traces": [[{"action": "alloc", "addr": 1}]]}"#,
            r#"{"device_traces": [[{"action": "alloc", "addr": 1, "size": 2, "stream": "s"}]]}"#,
            r#"{"device_traces": [[{"action": "free_requested", "time_us": -3}]]}"#,
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            let whole = parse_snapshot_value(&value, None).unwrap_err();
            assert_eq!(streamed(text, None).unwrap_err(), whole, "{text}");
        }
        let twice = r#"{"device_traces": [], "device_traces": []}"#;
        assert_eq!(streamed(twice, None).unwrap_err().message, "'device_traces' given twice");
        assert!(matches!(
            read_events(
                &mut serde_json::Deserializer::from_str("{\"device_traces\": [[}"),
                &mut FrameTable::default(),
                &mut |_, _| Ok(())
            ),
            Err(Stop::Json(_))
        ));
    }

    #[test]
    fn text_that_is_not_utf8_is_refused_where_it_is_skipped_too() {
        let text = b"{\"segments\": [{\"a\": \"\xc3\"}], \"device_traces\": []}";
        let read = read_events(
            &mut serde_json::Deserializer::from_slice(text),
            &mut FrameTable::default(),
            &mut |_, _| Ok(()),
        );
        assert!(
            matches!(read, Err(Stop::Json(e)) if alloc::string::ToString::to_string(&e).starts_with("invalid unicode code point"))
        );
    }

    #[test]
    fn an_event_the_caller_refuses_stops_the_read() {
        let text = r#"{"device_traces": [[{"action": "alloc", "addr": 1, "size": 2}, {"action": "alloc", "addr": 9, "size": 2}]]}"#;
        let mut seen = 0;
        let mut keep = |_: usize, _: SnapshotEvent| {
            seen += 1;
            Err(error(0, "full"))
        };
        let read = read_events(&mut serde_json::Deserializer::from_str(text), &mut FrameTable::default(), &mut keep);
        assert!(matches!(read, Err(Stop::Trace(e)) if e.message == "full"));
        assert_eq!(seen, 1);
    }
}
