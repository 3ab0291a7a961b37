//! A snapshot's stack frames are interned as it is parsed and its JSON text is never held
//! whole (issue 41): the heap a read takes stays well under the text's size, where the whole
//! text as a JSON value took about 10 bytes per byte. Heap bytes are counted by this test's
//! own global allocator (the one test of this file, so no other test allocates meanwhile).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use cachalot_cli::trace_file::{parse_spooled, Input, Source};
use cachalot_core::trace::TraceLimits;

/// The system's allocator, counting the bytes held and their peak.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = HELD.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

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
            0x7f00_0000_0000u64 + addr * 4096,
            1_000_000 + e,
            stack.join(", ")
        ));
    }
    s.push_str("]]}");
    s.into_bytes()
}

#[test]
fn a_snapshots_frames_and_text_are_not_held() {
    let text = snapshot(20_000);
    let before = HELD.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let (loaded, spool) =
        parse_spooled(&text[..], "t.json", None, &TraceLimits::DEFAULT, Source::Gone).expect("a valid trace");
    let peak = PEAK.load(Ordering::Relaxed) - before;
    assert!(spool.len() >= 10_000, "{} operations", spool.len());
    let Input::Snapshot { value, frames } = &loaded.input else { panic!("a snapshot") };
    let event = &value["device_traces"][0][0];
    assert_eq!(frames.frames(frames.clone().stack_of(event)).len(), 24, "the stack is kept, in the table");
    assert!(!event.to_string().contains("layer_"), "the value holds no frame text: {event}");
    // Held as a JSON value, the text took about 10 bytes per byte; held whole, at least 1.
    assert!(peak < text.len() / 2, "{peak} bytes at the peak for {} bytes of text", text.len());
}
