//! A pickled snapshot's history handed on an event at a time as the pickle machine reads it,
//! as `streamed_snapshot` does for JSON: the machine then never holds the history, most of a
//! snapshot once its frames are interned.
//!
//! `pickle.dump` writes a snapshot dict's `device_traces` as an empty list (EMPTY_LIST) just
//! after its key, each device's list as an empty list just after it (or after the MARK that
//! opens a batch of them), and each event as a dict appended to its device's list (APPEND, or
//! APPENDS in batches of 1,000). So a list made empty while the snapshot dict's `device_traces`
//! key is on the top of the stack is the list of lists, and a list made empty while the
//! stack above that holds only its MARK and lists is a device's list: its appended items are
//! written out (frames as stack ids) and handed on, not kept. An event dict is taken out of
//! the memo too (nothing in a snapshot refers back to one), so its memory is reused; a
//! `frames` list the memo holds stays there as its stack, since a later event or block may
//! refer to it.
//!
//! Invariants: the events handed on are those the whole value would hold, device by device,
//! each device's in order, and their lists are those [`snapshot_events`] gives of it; a
//! pickle laid out otherwise is read whole, as before, and nothing is handed on.
//!
//! [`snapshot_events`]: crate::trace::snapshot_events

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use serde_json::Value as Json;

use crate::trace::frame_table::FrameTable;
use crate::trace::limits::{Limit, TraceLimits};
use crate::trace::pickle_arena::{bad, measure, Arena, PickleError, Value, DICT};
use crate::trace::pickle_writer::Writer;
use crate::trace::snapshot_event::SnapshotEvent;
use crate::trace::snapshot_reader::EventList;

/// Where the machine hands a snapshot's events, and what it knows of its lists.
pub(crate) struct PickleEvents<'a> {
    keep: &'a mut dyn FnMut(usize, SnapshotEvent),
    /// The list of lists (`device_traces`), once made.
    outer: Option<usize>,
    /// Each device's list, by its arena id: its device.
    devices: BTreeMap<usize, usize>,
    /// What was seen of each device's list.
    lists: Vec<EventList>,
    /// The memo index of each dict memoized once and never referred to again, to take an
    /// event out of the memo once handed on; `None` for a dict held in more than one place
    /// (memoized twice, DUP'd, or got from the memo), which is kept: a pickle that appends one
    /// event twice gives it twice, as its whole value does.
    memo_of_dict: BTreeMap<usize, Option<u64>>,
    /// What the events handed on took written out, each use of a shared value counted.
    bytes: u64,
}

/// The machine's parts an event is read out of and let go from.
pub(crate) struct Parts<'p> {
    pub(crate) arena: &'p mut Arena,
    pub(crate) table: Option<&'p mut FrameTable>,
    pub(crate) memo: &'p mut BTreeMap<u64, Value>,
    pub(crate) limits: &'p TraceLimits,
}

impl<'a> PickleEvents<'a> {
    /// Hands each event of `device_traces[d]` to `keep(d, e)`.
    pub(crate) fn new(keep: &'a mut dyn FnMut(usize, SnapshotEvent)) -> Self {
        PickleEvents {
            keep,
            outer: None,
            devices: BTreeMap::new(),
            lists: Vec::new(),
            memo_of_dict: BTreeMap::new(),
            bytes: 0,
        }
    }

    /// Each device's [`EventList`] once the machine wrote out `json`, the rest of the value;
    /// `None` when no `device_traces` was found where `pickle.dump` writes it, and nothing
    /// was handed on.
    pub(crate) fn finish(self, json: &Json) -> Result<Option<Vec<EventList>>, PickleError> {
        if self.outer.is_none() {
            return Ok(None);
        }
        // Every list of lists' item must have been a device's list made empty and handed on.
        let lists = json.get("device_traces").and_then(Json::as_array);
        let all_handed_on = lists.is_some_and(|l| {
            l.len() == self.lists.len() && l.iter().all(|d| d.as_array().is_some_and(|events| events.is_empty()))
        });
        if !all_handed_on {
            return Err(bad("the snapshot's device_traces are laid out as pickle.dump never writes them"));
        }
        Ok(Some(self.lists))
    }

    /// Called when EMPTY_LIST made the list on top of the stack: is it the list of lists, or
    /// a device's list?
    pub(crate) fn note_new_list(&mut self, stack: &[Value], arena: &Arena) {
        let events = self;
        let Some((&Value::List(new), below)) = stack.split_last() else { return };
        let is_key = |v: &Value| matches!(v, Value::Str(id) if arena.strings[*id] == "device_traces");
        match events.outer {
            None => {
                // {... "device_traces": [: the snapshot dict at the bottom, maybe its MARK,
                // key and value pairs, then the key.
                let Some((key, rest)) = below.split_last() else { return };
                let pairs = match rest {
                    [Value::Dict(_), Value::Mark, pairs @ ..] | [Value::Dict(_), pairs @ ..] => pairs,
                    _ => return,
                };
                if is_key(key) && pairs.len() % 2 == 0 && !pairs.iter().any(|v| matches!(v, Value::Mark)) {
                    events.outer = Some(new);
                }
            }
            Some(outer) => {
                let Some(at) = below.iter().rposition(|v| matches!(v, Value::List(id) if *id == outer)) else {
                    return;
                };
                let above = &below[at + 1..];
                let above = match above {
                    [Value::Mark, rest @ ..] => rest,
                    rest => rest,
                };
                if above.iter().all(|v| matches!(v, Value::List(id) if events.devices.contains_key(id))) {
                    let device = events.lists.len();
                    events.devices.insert(new, device);
                    events.lists.push(EventList::default());
                }
            }
        }
    }

    /// Whether `list` is a device's list of events.
    pub(crate) fn is_event_list(&self, list: usize) -> bool {
        self.devices.contains_key(&list)
    }

    /// Hands `items`, appended to the device list `list`, on as events, and lets them go.
    pub(crate) fn hand_on(&mut self, list: usize, items: Vec<Value>, at: Parts<'_>) -> Result<(), PickleError> {
        let Parts { arena, mut table, memo, limits } = at;
        // An event sits three deep (the snapshot dict, the list of lists, its device's list).
        let (depth, limit) = (limits.depth, limits.bytes);
        for item in items {
            // Measured before it is written out, as the whole value is: a nest or a bomb of
            // memo references is a limit met, not stack or memory taken.
            let (size, _) = measure(arena, item, depth.saturating_sub(3), &mut BTreeMap::new())
                .map_err(|_| PickleError::Limit(Limit::Depth(depth)))?;
            self.bytes = self.bytes.saturating_add(size);
            if self.bytes > limit {
                return Err(PickleError::Limit(Limit::Bytes(limit)));
            }
            // Copied, not taken: `drop_unshared` below frees the dict's strings and their slots.
            let value = Writer { arena, table: table.as_deref_mut() }.json(item, false, true);
            let device = self.devices.get(&list).copied().unwrap_or_default();
            let e = SnapshotEvent::of(&value);
            if let Some(l) = self.lists.get_mut(device) {
                l.see(&e, &value);
            }
            (self.keep)(device, e);
            // Nothing in a snapshot refers back to an event: out of the memo, its slot reused.
            if let Value::Dict(id) = arena.resolve(item) {
                // Only where the memo still holds it under the one index it was put at.
                if let Some(&Some(i)) = self.memo_of_dict.get(&id) {
                    if matches!(memo.get(&i), Some(Value::Dict(d)) if *d == id) {
                        self.memo_of_dict.remove(&id);
                        memo.remove(&i);
                        arena.shared[DICT][id] = false;
                    }
                }
                if !arena.shared[DICT][id] {
                    arena.free_stacks_of(id);
                }
                arena.drop_unshared(item);
            }
        }
        Ok(())
    }

    /// Remembers where the memo holds a dict, to take an event out of it; a dict put twice is
    /// held in more than one place.
    pub(crate) fn note_memo(&mut self, i: u64, v: Value) {
        if let Value::Dict(id) = v {
            self.memo_of_dict.entry(id).and_modify(|at| *at = None).or_insert(Some(i));
        }
    }

    /// A dict is now held in one more place (DUP, or got from the memo): it is never taken
    /// out of the memo nor freed when handed on.
    pub(crate) fn note_reference(&mut self, v: Value) {
        if let Value::Dict(id) = v {
            self.memo_of_dict.insert(id, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::pickle::{read_events_from, read_slim};
    use crate::trace::snapshot_events;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// `pickle.dumps(snapshot, protocol=4)` of two devices' events, the first with four (a
    /// batch: MARK, APPENDS), the second one (APPEND); a `frames` list memoized in `segments`
    /// and referred back to by two events; and protocol 2's BINPUT memo.
    const PROTOCOL_4: &str = "80049542010000000000007d94288c087365676d656e7473945d947d94288c0761646472657373944d00108c066672616d6573945d94287d94288c0866696c656e616d65948c04612e7079948c046c696e65944b038c046e616d65948c0166947568076575618c0d6465766963655f747261636573945d94285d94287d94288c06616374696f6e948c0d7365676d656e745f616c6c6f63948c0461646472944b008c0473697a65944a0000200068056806757d942868118c05616c6c6f639468134d001068144d00028c0673747265616d944b008c0774696d655f7573944b0568056806757d942868118c0e667265655f7265717565737465649468134d001068144d000268055d94680761757d942868118c0e667265655f636f6d706c657465649468134d001068144d000268055d9475655d947d942868118c036f6f6d9468134b0068144b09756165752e";
    const PROTOCOL_2: &str = "80027d7100580d0000006465766963655f74726163657371015d71025d71037d7104285806000000616374696f6e71055805000000616c6c6f63710658040000006164647271074b01580400000073697a6571084b02756161732e";

    /// PROTOCOL_2 with its one event appended twice in a batch (MARK, the dict, APPENDS):
    /// got back from the memo (BINGET), or DUP'd. `pickle.dump` never writes either; the fuzz
    /// target found that the first copy handed on freed the dict the second still named.
    const EVENT_GOT_TWICE: &str = "80027d7100580d0000006465766963655f74726163657371015d71025d7103287d7104285806000000616374696f6e71055805000000616c6c6f63710658040000006164647271074b01580400000073697a6571084b027568046561732e";
    const EVENT_DUPED: &str = "80027d7100580d0000006465766963655f74726163657371015d71025d7103287d7104285806000000616374696f6e71055805000000616c6c6f63710658040000006164647271074b01580400000073697a6571084b0275326561732e";

    /// The events handed on as the machine reads are those the whole value holds, with the
    /// same stacks; the value left holds empty lists in their place.
    #[test]
    fn the_history_is_handed_on_as_the_whole_value_holds_it() {
        let limits = TraceLimits::DEFAULT;
        let pickles = [
            ("protocol 4", hex(PROTOCOL_4)),
            ("protocol 2", hex(PROTOCOL_2)),
            ("an event got twice", hex(EVENT_GOT_TWICE)),
            ("an event DUP'd", hex(EVENT_DUPED)),
        ];
        for (name, bytes) in pickles {
            let mut whole_frames = FrameTable::default();
            let whole = read_slim(&bytes, &limits, &mut whole_frames).unwrap();
            let mut expected = Vec::new();
            let expected_lists = snapshot_events(&whole, &mut |d, e| {
                expected.push((d, e));
                Ok(())
            })
            .unwrap();
            let mut frames = FrameTable::default();
            let mut got = Vec::new();
            let (rest, lists) =
                read_events_from(&bytes[..], &limits, &mut frames, &mut |d, e| got.push((d, e))).unwrap();
            assert_eq!(lists.as_ref(), Some(&expected_lists), "{name}");
            assert_eq!(got, expected, "{name}");
            for (_, e) in &got {
                assert_eq!(frames.frames(e.stack), whole_frames.frames(e.stack), "{name}");
            }
            let empties = rest["device_traces"].as_array().unwrap();
            assert!(empties.iter().all(|l| l.as_array().is_some_and(|l| l.is_empty())), "{name}: {rest}");
            assert_eq!(rest.get("segments"), whole.get("segments"), "{name}");
        }
        assert_eq!(hex(PROTOCOL_4).len(), 333);
    }

    /// An event nested past the limit, or one that refers to a large value many times through
    /// the memo, is a limit met before it is written out (the fuzz target's corpus overflowed
    /// the stack with a deep one, handed on before the whole value was measured).
    #[test]
    fn an_event_past_a_limit_is_refused_before_it_is_written_out() {
        let limits = TraceLimits { bytes: 1 << 20, depth: 16, events: 100 };
        let s = |t: &str| [&[0x8c, t.len() as u8][..], t.as_bytes()].concat();
        let snapshot = |event: &[u8]| [&b"\x80\x04}"[..], &s("device_traces"), b"]]", event, b"aas."].concat();
        let deep = [&b"}("[..], &s("k"), &b"]".repeat(10_000), &b"a".repeat(9_999), b"u"].concat();
        let read = read_events_from(&snapshot(&deep)[..], &limits, &mut FrameTable::default(), &mut |_, _| {});
        assert!(matches!(read, Err(PickleError::Limit(Limit::Depth(16)))), "{read:?}");
        let mib = 1u32 << 20;
        let text = [&b"X"[..], &mib.to_le_bytes(), &alloc::vec![b'm'; mib as usize], b"\x94"].concat();
        let bomb = [&b"]("[..], &text, &b"h\x00".repeat(64), b"e"].concat();
        let limits = TraceLimits { bytes: 8 << 20, ..limits };
        let read = read_events_from(&snapshot(&bomb)[..], &limits, &mut FrameTable::default(), &mut |_, _| {});
        assert!(matches!(read, Err(PickleError::Limit(Limit::Bytes(_)))), "{read:?}");
    }

    /// A history not laid out as `pickle.dump` writes one is read whole; one that starts so
    /// and then is not is refused, since events were handed on.
    #[test]
    fn other_layouts_are_read_whole_or_refused() {
        let limits = TraceLimits::DEFAULT;
        // {"device_traces": [[{"addr": 1}]]} built with LIST and DICT from MARKs (protocol 0's
        // way): no list is made empty, nothing is handed on.
        let s = |t: &str| [&[0x8c, t.len() as u8][..], t.as_bytes()].concat();
        let marks = [&b"\x80\x02("[..], &s("device_traces"), b"(((", &s("addr"), b"K\x01dlld."].concat();
        let mut frames = FrameTable::default();
        let (value, lists) =
            read_events_from(&marks[..], &limits, &mut frames, &mut |_, _| panic!("handed on")).unwrap();
        assert_eq!((lists, value["device_traces"][0][0]["addr"].as_u64()), (None, Some(1)));
        // The list of lists made empty, then a device's list built from a MARK and appended.
        let odd = [&b"\x80\x02}"[..], &s("device_traces"), b"](", &s("x"), b"la", b"s."].concat();
        let read = read_events_from(&odd[..], &limits, &mut frames, &mut |_, _| {});
        assert!(matches!(&read, Err(PickleError::Unreadable(m)) if m.contains("laid out")), "{read:?}");
    }
}
