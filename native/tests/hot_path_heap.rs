//! The C ABI adds no heap allocation to a malloc or free: a pass of operations through
//! `cachalot_malloc` / `cachalot_free` makes exactly the heap allocations the core allocator
//! makes for the same pass on its own (its class vectors growing and shrinking), under both
//! policies. A heap allocation costs about as much as the whole bookkeeping of a cached
//! malloc, so one per call would slow every call by a fifth.
//!
//! Heap allocations are counted per thread, by a global allocator that wraps the system's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::{c_void, CString};

use cachalot::ffi::allocation::{cachalot_free, cachalot_malloc};
use cachalot::ffi::handle::{cachalot_allocator_free, cachalot_allocator_new_simulated};
use cachalot::ffi::Status;
use cachalot::SharedAllocator;
use cachalot_core::{Allocator, Config, SimDevice};

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

fn count_one() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only a
// thread-local integer and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's promises about `layout` are passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, which is the system's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: as in dealloc.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(|n| n.get())
}

const CAPACITY: u64 = 64 << 30;

/// A deterministic pass: (size to allocate into a slot, or a free of a slot), over 64 slots,
/// small and large sizes mixed, on two streams.
fn pass() -> Vec<(usize, Option<(u64, u64)>)> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut live = [false; 64];
    (0..4000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let slot = (x % 64) as usize;
            let op = if live[slot] {
                None
            } else {
                let size = match (x >> 8) % 3 {
                    0 => 1 + (x >> 16) % 4096,
                    1 => 1 + (x >> 16) % (1 << 20),
                    _ => 1 + (x >> 16) % (48 << 20),
                };
                Some((size, (x >> 12) % 2))
            };
            live[slot] = !live[slot];
            (slot, op)
        })
        .collect()
}

/// Heap allocations of the second of two passes, straight through the core.
fn core_pass_allocations(config: &str) -> u64 {
    let mut a = Allocator::new(SimDevice::new(CAPACITY), Config::parse(config).unwrap());
    let mut ptrs = [0u64; 64];
    let ops = pass();
    let mut second = 0;
    for _ in 0..2 {
        let before = allocations();
        for &(slot, op) in &ops {
            match op {
                Some((size, stream)) => ptrs[slot] = a.malloc(size, stream).unwrap(),
                None => a.free(std::mem::take(&mut ptrs[slot])).unwrap(),
            }
        }
        second = allocations() - before;
        for p in ptrs.iter_mut().filter(|p| **p != 0) {
            a.free(std::mem::take(p)).unwrap();
        }
    }
    second
}

/// Heap allocations of the second of two passes, through the C ABI over a simulated device.
fn c_abi_pass_allocations(config: &str) -> u64 {
    let config = CString::new(config).unwrap();
    let mut a: *mut SharedAllocator = std::ptr::null_mut();
    // SAFETY: a valid C string and a writable out-pointer.
    assert_eq!(unsafe { cachalot_allocator_new_simulated(CAPACITY, config.as_ptr(), &mut a) }, Status::Ok);
    let mut ptrs = [std::ptr::null_mut::<c_void>(); 64];
    let ops = pass();
    let mut second = 0;
    for _ in 0..2 {
        let before = allocations();
        for &(slot, op) in &ops {
            // SAFETY: a live handle, a writable out-pointer, and addresses this handle returned.
            let status = unsafe {
                match op {
                    Some((size, stream)) => cachalot_malloc(a, size as usize, stream as *mut c_void, &mut ptrs[slot]),
                    None => cachalot_free(a, std::mem::replace(&mut ptrs[slot], std::ptr::null_mut())),
                }
            };
            assert_eq!(status, Status::Ok);
        }
        second = allocations() - before;
        for p in ptrs.iter_mut().filter(|p| !p.is_null()) {
            // SAFETY: as above.
            assert_eq!(unsafe { cachalot_free(a, std::mem::replace(p, std::ptr::null_mut())) }, Status::Ok);
        }
    }
    // SAFETY: the handle is live and used by no other thread.
    unsafe { cachalot_allocator_free(a) };
    second
}

#[test]
fn malloc_and_free_through_the_c_abi_allocate_only_what_the_core_does() {
    for config in ["policy:pytorch", "policy:cachalot", "policy:pytorch,expandable_segments:True"] {
        let core = core_pass_allocations(config);
        let c_abi = c_abi_pass_allocations(config);
        assert_eq!(
            c_abi, core,
            "{config}: a warm pass of 4,000 calls made {c_abi} heap allocations through the C ABI, {core} in the core"
        );
    }
}
