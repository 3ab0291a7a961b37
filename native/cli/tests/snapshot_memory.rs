//! A snapshot's stack frames are interned as it is parsed and its JSON text, or its pickle, is
//! never held whole (issue 41): the heap a read takes stays well under the file's size, where
//! the whole text as a JSON value took about 10 bytes per byte, and the pickle machine holding
//! the whole pickle about 8; a snapshot's events are not held at all. Heap bytes are counted by this test's own global allocator (the
//! one test of this file, so no other test allocates meanwhile).

mod heap_count;

use heap_count::peak_of;

use cachalot_cli::trace_file::{parse_spooled, Input, Source};
use cachalot_core::trace::TraceLimits;

/// A snapshot of `events` allocations and frees, each with a 24-frame stack drawn from 50
/// distinct frames, as `_record_memory_history(stacks="python")` records them: the frames
/// are most of the text.
fn snapshot(events: u64) -> Vec<u8> {
    let frame = |i: u64| {
        format!(
            r#"{{"filename": "/home/user/project/model/layer_{}.py", "line": {}, "name": "forward_{}"}}"#,
            i % 50,
            100 + i % 50,
            i % 7
        )
    };
    let mut s = String::from(r#"{"segments": [], "device_traces": [["#);
    for e in 0..events {
        let stack: Vec<String> = (0..24).map(|k| frame(e * 7 + k)).collect();
        let (action, addr) = if e % 2 == 0 { ("alloc", e) } else { ("free_completed", e - 1) };
        if e > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"action": "{action}", "addr": {}, "size": 4096, "stream": 0, "time_us": {}, "frames": [{}]}}"#,
            // Addresses come back, as a caching allocator's do.
            0x7f00_0000_0000u64 + (addr % 1024) * 4096,
            1_000_000 + e,
            stack.join(", ")
        ));
    }
    s.push_str("]]}");
    s.into_bytes()
}

/// Reads `bytes` as the CLI does and checks its stacks are in the table; the heap's peak.
fn read_slim(bytes: &[u8], what: &str) -> usize {
    let ((loaded, spool), peak) =
        peak_of(|| parse_spooled(bytes, what, None, &TraceLimits::DEFAULT, Source::Gone).expect("a valid trace"));
    assert!(spool.len() >= 5_000, "{what}: {} operations", spool.len());
    let Input::Snapshot { frames, .. } = &loaded.input else { panic!("{what}: a snapshot") };
    let event = loaded.input.snapshot_event(0).expect("the first event kept");
    assert_eq!(frames.frames(event.stack).len(), 24, "{what}: the stack is kept, in the table");
    peak
}

/// One test for both encodings: the counts are the process's, so no other test may run
/// beside it.
#[test]
fn a_snapshots_frames_and_text_are_not_held() {
    // JSON's events are handed on as they are parsed and kept in a temporary file: the heap a
    // read takes does not grow with them (here, with stacks that repeat, as a training loop's
    // do). Held as a JSON value, the text took about 10 bytes per byte.
    let shorter = read_slim(&snapshot(10_000), "t.json");
    let text = snapshot(20_000);
    let peak = read_slim(&text, "t.json");
    assert!(peak < text.len() / 20, "{peak} bytes at the peak for {} bytes of text", text.len());
    assert!(peak < shorter + shorter / 4, "{peak} bytes at the peak for 20,000 events, {shorter} for 10,000");

    // The same as a pickle (serde-pickle's, every value written in full as in
    // make_large_snapshot.py): read as the machine asks for its bytes, each frames list
    // interned and freed as its dict is set, each event handed on as it is appended to its
    // device's list. Held whole, the pickle's machine took about 8 bytes per byte of it,
    // frames included; holding the events, about a fifth of its size.
    let pickle_of = |text: Vec<u8>| {
        let value: serde_json::Value = serde_json::from_slice(&text).unwrap();
        drop(text);
        cachalot_cli::pickle_snapshot::from_json(&value).unwrap()
    };
    drop(text);
    let shorter = read_slim(&pickle_of(snapshot(10_000)), "t.pickle");
    let pickle = pickle_of(snapshot(20_000));
    let peak = read_slim(&pickle, "t.pickle");
    assert!(peak < pickle.len() / 10, "{peak} bytes at the peak for a {}-byte pickle", pickle.len());
    assert!(peak < shorter + shorter / 4, "{peak} bytes at the peak for 20,000 events, {shorter} for 10,000");
}
