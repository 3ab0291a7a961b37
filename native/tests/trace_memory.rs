//! A trace too large for the memory at hand is an error, not an abort: in a browser the wasm
//! module's memory ends at 4 GiB, and an allocation that fails there ends the module for good
//! (a 1.2 GB CSV of 40 million operations did). This test binary's allocator refuses any one
//! allocation above a limit set while parsing, as a full memory would.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Largest single allocation allowed; `usize::MAX` outside the parse under test.
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

struct Limited;

// SAFETY: every call is passed on to the system allocator unchanged, or refused with a null
// pointer, which `GlobalAlloc` allows for an allocation that cannot be made.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout promises hold for the system allocator too.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > LIMIT.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        // SAFETY: as in `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Limited = Limited;

#[test]
fn a_trace_larger_than_memory_is_an_error_naming_the_operation_count() {
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for i in 0..400_000u64 {
        csv.push_str(&format!("0,{i},allocate,{:#x},4096,0x0\n", 0x1000 + i * 0x1000));
    }
    // The operations take 24 bytes each: past 4 MiB, their list cannot grow.
    LIMIT.store(4 << 20, Ordering::Relaxed);
    let parsed = cachalot_core::parse_trace(&csv);
    LIMIT.store(usize::MAX, Ordering::Relaxed);
    let e = parsed.unwrap_err();
    assert!(
        e.message.contains("out of memory after") && e.message.contains("the trace is too large to hold here"),
        "{e}"
    );
    assert!(e.line > 100_000, "the line where memory ran out: {}", e.line);
    // With memory, the same text parses.
    assert_eq!(cachalot_core::parse_trace(&csv).unwrap().ops.len(), 400_000);
}
