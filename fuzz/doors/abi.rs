//! The `abi` target: bytes decoded into a sequence of C ABI calls (the real `extern "C"`
//! functions of `cachalot::ffi`) on up to two simulated allocators, each status checked
//! against a model of what the header promises.
//!
//! The model keeps, per allocator: its handle (NULL once freed), capacity, memory fraction,
//! whether pools are refused (`lock_per_stream:True`), the live allocations (address →
//! requested bytes), the private pools (uses; a pool with none may be gone), and captures
//! underway. Checked: no call returns `CACHALOT_STATUS_INTERNAL` (a caught panic) or a code
//! the header does not list; a live pointer frees with OK; a freed or unknown one gives
//! DOUBLE_FREE or UNKNOWN_POINTER, and one inside a live allocation INTERIOR_POINTER; a size
//! of 0 or past 1 TiB INVALID_SIZE; out of memory only when the request's segment (with a
//! page's slack) could not fit beside what stays reserved; NULL arguments NULL_POINTER;
//! statistics equal the live allocations (count, and bytes at least those asked for), and
//! `cachalot_blocks` lists exactly them with their requested sizes; reports fit the size they
//! announce and are refused, untouched, by a buffer one byte short; at the end every live
//! allocation frees and nothing stays allocated.
#![allow(clippy::missing_safety_doc)]

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CString};
use std::ptr::null_mut;

use cachalot::ffi::allocation::*;
use cachalot::ffi::blocks::{cachalot_blocks, BlockInfo, CACHALOT_BLOCK_ALLOCATED};
use cachalot::ffi::handle::{cachalot_allocator_free, cachalot_allocator_new_simulated};
use cachalot::ffi::pool::*;
use cachalot::ffi::report::{cachalot_memory_summary, cachalot_snapshot_json};
use cachalot::ffi::stats::{cachalot_get_stats, Stats};
use cachalot::ffi::Status;
use cachalot::SharedAllocator;

const MIB: u64 = 1 << 20;
const TIB: u64 = 1 << 40;

/// The configs an allocator is made with; the last is refused.
const CONFIGS: [&str; 8] = [
    "",
    "policy:pytorch",
    "policy:pytorch,expandable_segments:True",
    "policy:pytorch,max_split_size_mb:20,roundup_power2_divisions:4",
    "policy:pytorch,lock_per_stream:True",
    "lock_per_stream:True",
    "policy:pytorch,record_history:16",
    "no_such_key:1",
];
const CAPACITIES: [u64; 6] = [8 * MIB, 64 * MIB, 1 << 30, 16 << 30, 0, TIB + 1];
const STREAMS: [usize; 4] = [0, 1, 2, 0x7f00_0000];

/// Reads numbers from the front of the input; zeros past its end.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        (0..4).fold(0, |acc, i| acc | (self.u8() as u32) << (8 * i))
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.u8() as usize % from.len()]
    }
}

/// What the model knows of one private pool.
#[derive(Clone, Copy)]
struct PoolModel {
    uses: u32,
    /// False once a call said the pool is gone; a pool with no use may be gone unseen.
    known_gone: bool,
}

/// One allocator and what it should hold.
pub struct Slot {
    pub handle: *mut SharedAllocator,
    pub capacity: u64,
    fraction: f64,
    pools_refused: bool,
    pub live: BTreeMap<u64, u64>,
    freed: Vec<u64>,
    pools: Vec<(u32, PoolModel)>,
    captures: u32,
}

impl Slot {
    pub fn empty() -> Slot {
        Slot {
            handle: null_mut(),
            capacity: 0,
            fraction: 1.0,
            pools_refused: false,
            live: BTreeMap::new(),
            freed: Vec::new(),
            pools: Vec::new(),
            captures: 0,
        }
    }

    /// The live allocation `addr` lies strictly inside, if any.
    fn inside(&self, addr: u64) -> bool {
        self.live.range(..addr).next_back().is_some_and(|(&a, &size)| addr > a && addr < a + size.max(1))
    }
}

thread_local! {
    /// How often each status came back from a call the model checked, by code.
    static SEEN: std::cell::RefCell<[u64; 14]> = const { std::cell::RefCell::new([0; 14]) };
}

/// Counts `s` among the statuses seen, and returns it.
fn seen(s: Status) -> Status {
    SEEN.with(|seen| seen.borrow_mut()[s as usize] += 1);
    s
}

/// How often each status (by code) came back on this thread since the last call.
pub fn statuses_seen() -> [u64; 14] {
    SEEN.with(|seen| std::mem::take(&mut *seen.borrow_mut()))
}

fn ok(s: Status, what: &str) {
    assert_eq!(s, Status::Ok, "{what}: {}", last_error());
}

fn last_error() -> String {
    let mut buf = [0 as c_char; 512];
    // SAFETY: the buffer and its length are honest.
    unsafe {
        cachalot::ffi::last_error_message::cachalot_last_error_message(buf.as_mut_ptr(), buf.len());
        std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    }
}

/// Runs one input; panics on a finding.
pub fn run(data: &[u8]) {
    let mut input = Input(data);
    let mut slots = [Slot::empty(), Slot::empty()];
    let mut steps = 0;
    while !input.0.is_empty() && steps < 200 {
        steps += 1;
        let op = input.u8();
        let which = (op >> 7) as usize;
        // SAFETY: every handle passed is NULL or a live one of the model's; every out-pointer
        // and buffer is a local of the size passed.
        unsafe { step(op & 0x7f, &mut slots, which, &mut input) };
    }
    for slot in &mut slots {
        // SAFETY: as above.
        unsafe { drain(slot) };
    }
}

/// Out of memory is justified when the request's segment, with a large page of slack and
/// its rounding, could not fit beside what stays reserved after the allocator released its
/// cache (read after the failure).
unsafe fn oom_justified(slot: &Slot, size: u64) -> bool {
    let stats = unsafe { stats(slot.handle) };
    let allowed = if slot.fraction < 1.0 { (slot.capacity as f64 * slot.fraction) as u64 } else { slot.capacity };
    let need = size.next_multiple_of(2 * MIB).max(20 * MIB) + 20 * MIB;
    stats.reserved_bytes.all.current as u64 + need > allowed
}

unsafe fn stats(handle: *mut SharedAllocator) -> Stats {
    let mut s = Stats { struct_size: size_of::<Stats>() as u32, ..Stats::default() };
    ok(unsafe { cachalot_get_stats(handle, &mut s) }, "get_stats");
    s
}

/// A pointer the call will name: live, freed, interior, or a stranger.
fn pointer(slots: &[Slot; 2], input: &mut Input) -> u64 {
    let kind = input.u8();
    let all_live: Vec<(u64, u64)> = slots.iter().flat_map(|s| s.live.iter().map(|(&a, &n)| (a, n))).collect();
    let all_freed: Vec<u64> = slots.iter().flat_map(|s| s.freed.iter().copied()).collect();
    match kind % 8 {
        0..=3 if !all_live.is_empty() => all_live[input.u8() as usize % all_live.len()].0,
        4 if !all_live.is_empty() => {
            let (a, n) = all_live[input.u8() as usize % all_live.len()];
            a + 1 + (input.u32() as u64) % n.max(1)
        }
        5 if !all_freed.is_empty() => all_freed[input.u8() as usize % all_freed.len()],
        6 => input.pick(&[0x1234, !511, 0x7f00_0000_0000, 512]),
        _ => 0,
    }
}

fn size(input: &mut Input) -> usize {
    match input.u8() % 8 {
        0 => 0,
        1 => input.pick(&[usize::MAX, (TIB + 1) as usize, usize::MAX - 511, TIB as usize]),
        2 | 3 => 1 + input.u32() as usize % 4096,
        4 | 5 => 1 + input.u32() as usize % (4 * MIB as usize),
        _ => 1 + input.u32() as usize % (64 * MIB as usize),
    }
}

unsafe fn step(op: u8, slots: &mut [Slot; 2], which: usize, input: &mut Input) {
    let handle = slots[which].handle;
    let null_handle = handle.is_null();
    match op % 24 {
        // New allocator (the old one freed first).
        0 | 1 => {
            unsafe { drain(&mut slots[which]) };
            let config = CString::new(input.pick(&CONFIGS)).unwrap();
            let capacity = input.pick(&CAPACITIES);
            let mut out: *mut SharedAllocator = null_mut();
            let s = seen(unsafe { cachalot_allocator_new_simulated(capacity, config.as_ptr(), &mut out) });
            let refused = config.as_bytes().starts_with(b"no_such_key");
            match s {
                Status::Ok => {
                    assert!(!refused && capacity > 0 && capacity <= TIB && !out.is_null(), "made with {config:?}");
                    let text = config.to_str().unwrap();
                    slots[which] = Slot {
                        handle: out,
                        capacity,
                        pools_refused: text.contains("lock_per_stream"),
                        ..Slot::empty()
                    };
                }
                Status::InvalidConfig => assert!(refused && out.is_null()),
                Status::InvalidArgument => assert!(!refused && (capacity == 0 || capacity > TIB) && out.is_null()),
                s => panic!("allocator_new_simulated: {s:?}: {}", last_error()),
            }
        }
        2 => unsafe { drain(&mut slots[which]) },
        // malloc, in the allocator or one of its pools.
        3..=6 => {
            let n = size(input);
            let stream = input.pick(&STREAMS) as *mut c_void;
            let mut out: *mut c_void = 0x5a5a as *mut c_void;
            let s = seen(unsafe { cachalot_malloc(handle, n, stream, &mut out) });
            malloc_checked(&mut slots[which], s, n, out as u64);
        }
        7 => {
            let pool = pool_id(&slots[which], input);
            let n = size(input);
            let mut out: *mut c_void = 0x5a5a as *mut c_void;
            let s = seen(unsafe { cachalot_pool_malloc(handle, pool, n, null_mut(), &mut out) });
            let slot = &mut slots[which];
            let usable = !slot.pools_refused && slot.pools.iter().any(|(id, p)| *id == pool && p.uses > 0);
            if null_handle {
                assert_eq!(s, Status::NullPointer);
            } else if !usable {
                assert_eq!(s, Status::InvalidArgument, "pool_malloc in pool {pool}: {}", last_error());
                assert_eq!(out as u64, 0x5a5a, "written on failure");
            } else {
                malloc_checked(slot, s, n, out as u64);
            }
        }
        8..=10 => {
            let p = pointer(slots, input);
            let s = seen(unsafe { cachalot_free(handle, p as *mut c_void) });
            let slot = &mut slots[which];
            if null_handle {
                assert_eq!(s, Status::NullPointer);
            } else if p == 0 {
                assert_eq!(s, Status::Ok, "free(NULL)");
            } else if slot.live.contains_key(&p) {
                ok(s, "free of a live allocation");
                slot.live.remove(&p);
                slot.freed.push(p);
                if slot.freed.len() > 16 {
                    slot.freed.remove(0);
                }
            } else {
                stranger(slot, s, p, "free");
            }
        }
        11 => {
            let p = pointer(slots, input);
            let stream = input.pick(&STREAMS) as *mut c_void;
            let s = seen(unsafe { cachalot_record_stream(handle, p as *mut c_void, stream) });
            let slot = &slots[which];
            if null_handle {
                assert_eq!(s, Status::NullPointer);
            } else if p == 0 {
                assert_eq!(s, Status::NullPointer, "record_stream(NULL)");
            } else if slot.live.contains_key(&p) {
                ok(s, "record_stream of a live allocation");
            } else {
                stranger(slot, s, p, "record_stream");
            }
        }
        12 => {
            let s = seen(unsafe { cachalot_empty_cache(handle) });
            assert_eq!(s, if null_handle { Status::NullPointer } else { Status::Ok }, "{}", last_error());
        }
        13 => {
            let f = input.pick(&[0.0, 0.25, 0.5, 0.9, 1.0, -0.0, 1.5, -0.5, f64::NAN, f64::INFINITY]);
            let s = seen(unsafe { cachalot_set_memory_fraction(handle, f) });
            if null_handle {
                assert_eq!(s, Status::NullPointer);
            } else if (0.0..=1.0).contains(&f) {
                ok(s, "set_memory_fraction");
                slots[which].fraction = f;
            } else {
                assert_eq!(s, Status::InvalidArgument, "fraction {f}");
            }
        }
        14 => unsafe { check_stats(&slots[which], input) },
        15 => unsafe { check_reports(&slots[which], input) },
        16 => unsafe { check_blocks(&slots[which]) },
        17 => unsafe { pool_call(&mut slots[which], input) },
        18 => {
            let s = seen(unsafe { cachalot_capture_begin(handle) });
            let slot = &mut slots[which];
            if null_handle {
                assert_eq!(s, Status::NullPointer);
            } else if slot.pools_refused {
                assert_eq!(s, Status::InvalidArgument, "capture_begin under lock_per_stream");
            } else {
                ok(s, "capture_begin");
                slot.captures += 1;
            }
        }
        19 => {
            let s = seen(unsafe { cachalot_capture_end(handle) });
            let slot = &mut slots[which];
            if null_handle {
                assert_eq!(s, Status::NullPointer);
            } else if slot.pools_refused || slot.captures == 0 {
                assert_eq!(s, Status::InvalidArgument, "capture_end with none underway");
            } else {
                ok(s, "capture_end");
                slot.captures -= 1;
            }
        }
        // NULL out-parameters: refused, nothing changes.
        20 => {
            if !null_handle {
                assert_eq!(unsafe { cachalot_malloc(handle, 512, null_mut(), null_mut()) }, Status::NullPointer);
                assert_eq!(unsafe { cachalot_get_stats(handle, null_mut()) }, Status::NullPointer);
                assert_eq!(unsafe { cachalot_pool_create(handle, null_mut()) }, Status::NullPointer);
                assert_eq!(unsafe { cachalot_snapshot_json(handle, null_mut(), 0, null_mut()) }, Status::NullPointer);
            }
        }
        _ => {
            // A malloc and at once its free: the common pair.
            let n = 1 + input.u32() as usize % (2 * MIB as usize);
            let mut out: *mut c_void = 0x5a5a as *mut c_void;
            let s = seen(unsafe { cachalot_malloc(handle, n, null_mut(), &mut out) });
            malloc_checked(&mut slots[which], s, n, out as u64);
            if s == Status::Ok {
                ok(unsafe { cachalot_free(handle, out) }, "free right after malloc");
                slots[which].live.remove(&(out as u64));
            }
        }
    }
}

/// Checks a malloc's status against the model and records what it handed out.
pub fn malloc_checked(slot: &mut Slot, s: Status, n: usize, out: u64) {
    if slot.handle.is_null() {
        assert_eq!(s, Status::NullPointer);
        return;
    }
    match s {
        Status::Ok => {
            assert!(n > 0 && n as u64 <= TIB, "malloc({n}) served");
            assert!(out != 0 && out % 512 == 0, "malloc({n}) gave {out:#x}");
            assert!(!slot.inside(out), "malloc({n}) gave {out:#x}, inside a live allocation");
            if let Some((&next, _)) = slot.live.range(out..).next() {
                assert!(out + n as u64 <= next, "malloc({n}) at {out:#x} overlaps the allocation at {next:#x}");
            }
            assert!(slot.live.insert(out, n as u64).is_none(), "{out:#x} handed out twice");
            slot.freed.retain(|&f| f != out);
        }
        Status::InvalidSize => assert!(n == 0 || n as u64 > TIB, "malloc({n}): invalid size"),
        Status::OutOfMemory => {
            assert!(n > 0 && n as u64 <= TIB);
            // SAFETY: a live handle.
            assert!(unsafe { oom_justified(slot, n as u64) }, "malloc({n}) out of memory: {}", last_error());
        }
        s => panic!("malloc({n}): {s:?}: {}", last_error()),
    }
    if s != Status::Ok {
        assert_eq!(out, 0x5a5a, "malloc({n}) wrote its out-parameter on failure");
    }
}

/// A pointer the model does not know as live: freed, foreign, or inside an allocation.
pub fn stranger(slot: &Slot, s: Status, p: u64, call: &str) {
    if slot.inside(p) {
        assert_eq!(s, Status::InteriorPointer, "{call}({p:#x}) inside a live allocation: {}", last_error());
    } else {
        // Inside a block past the bytes asked for (its rounding) reads as interior too.
        assert!(
            matches!(s, Status::DoubleFree | Status::UnknownPointer | Status::InteriorPointer),
            "{call}({p:#x}), not live: {s:?}: {}",
            last_error()
        );
        if s == Status::InteriorPointer {
            let rows = unsafe { blocks(slot.handle) };
            assert!(
                rows.iter().any(|b| b.state != 2 && p > b.address && p < b.address + b.size),
                "{call}({p:#x}): interior, but inside no block in use"
            );
        }
    }
}

fn pool_id(slot: &Slot, input: &mut Input) -> u32 {
    match input.u8() % 4 {
        0 => input.pick(&[0, 0xdead_beef]),
        _ if !slot.pools.is_empty() => slot.pools[input.u8() as usize % slot.pools.len()].0,
        _ => 1,
    }
}

unsafe fn pool_call(slot: &mut Slot, input: &mut Input) {
    let h = slot.handle;
    let call = input.u8() % 7;
    if call == 0 {
        let mut id = 0x5a5a_u32;
        let s = seen(unsafe { cachalot_pool_create(h, &mut id) });
        if h.is_null() {
            assert_eq!(s, Status::NullPointer);
        } else if slot.pools_refused {
            assert_eq!((s, id), (Status::InvalidArgument, 0x5a5a), "pool_create under lock_per_stream");
        } else {
            ok(s, "pool_create");
            assert!(id != 0 && slot.pools.iter().all(|(p, _)| *p != id), "pool id {id} given twice");
            slot.pools.push((id, PoolModel { uses: 1, known_gone: false }));
        }
        return;
    }
    let id = pool_id(slot, input);
    let stream = input.pick(&STREAMS) as *mut c_void;
    let mut count = 0x5a5a_u32;
    let s = match call {
        1 => unsafe { cachalot_pool_retain(h, id) },
        2 => unsafe { cachalot_pool_release(h, id) },
        3 => unsafe { cachalot_pool_use_count(h, id, &mut count) },
        4 => unsafe { cachalot_pool_begin_allocate(h, id, stream) },
        5 => unsafe { cachalot_pool_end_allocate(h, id) },
        _ => unsafe { cachalot_pool_empty_cache(h, id) },
    };
    let s = seen(s);
    if h.is_null() {
        assert_eq!(s, Status::NullPointer);
        return;
    }
    let model = slot.pools.iter_mut().find(|(p, _)| *p == id).map(|(_, m)| m);
    let Some(m) = model.filter(|m| !m.known_gone && !slot.pools_refused) else {
        assert_eq!(s, Status::InvalidArgument, "pool call {call} on pool {id}, none such: {}", last_error());
        return;
    };
    let what = format!("pool call {call} on pool {id} with {} uses", m.uses);
    if m.uses == 0 && call == 4 {
        // Routing needs a use, whether or not the pool is still kept: this says nothing of that.
        assert_eq!(s, Status::InvalidArgument, "{what}: routed to a pool with no use");
        return;
    }
    if m.uses == 0 {
        // Kept while it holds a segment, forgotten once it holds none: either may be.
        match s {
            Status::InvalidArgument => m.known_gone = true,
            Status::Ok => match call {
                1 => m.uses = 1,
                3 => assert_eq!(count, 0, "{what}"),
                _ => {}
            },
            s => panic!("{what}: {s:?}: {}", last_error()),
        }
        return;
    }
    ok(s, &what);
    match call {
        1 => m.uses += 1,
        2 => m.uses -= 1,
        3 => assert_eq!(count, m.uses, "{what}: use count"),
        _ => {}
    }
}

unsafe fn check_stats(slot: &Slot, input: &mut Input) {
    let h = slot.handle;
    let size = input.pick(&[size_of::<Stats>() as u32, size_of::<Stats>() as u32 - 8, 0, 8, 4096]);
    let mut buf = vec![0u8; 8192];
    buf[..4].copy_from_slice(&size.to_ne_bytes());
    let s = seen(unsafe { cachalot_get_stats(h, buf.as_mut_ptr().cast()) });
    if h.is_null() {
        assert_eq!(s, Status::NullPointer);
        return;
    }
    if size < size_of::<Stats>() as u32 - 8 {
        assert_eq!(s, Status::InvalidArgument, "struct_size {size}");
        assert!(buf[4..].iter().all(|&b| b == 0), "written on failure");
        return;
    }
    ok(s, "get_stats");
    let written = u32::from_ne_bytes(buf[..4].try_into().unwrap()) as usize;
    assert!(written <= size as usize && buf[written..].iter().all(|&b| b == 0), "wrote past {written}");
    let stats = unsafe { stats(h) };
    let live = slot.live.len() as i64;
    let asked: u64 = slot.live.values().sum();
    assert_eq!(stats.allocation.all.current, live, "allocations counted against the model's");
    assert!(stats.allocated_bytes.all.current as u64 >= asked, "allocated bytes below the bytes asked for");
    assert!(stats.requested_bytes.all.current as u64 >= asked, "requested bytes below the live ones");
    assert!(stats.reserved_bytes.all.current >= stats.allocated_bytes.all.current, "reserved below allocated");
    assert!(stats.reserved_bytes.all.current as u64 <= slot.capacity, "reserved past the capacity");
}

unsafe fn check_reports(slot: &Slot, input: &mut Input) {
    let h = slot.handle;
    let summary = input.u8() % 3;
    let call = |buf: *mut c_char, len: usize, out: *mut usize| match summary {
        0 => unsafe { cachalot_memory_summary(h, false, buf, len, out) },
        1 => unsafe { cachalot_memory_summary(h, true, buf, len, out) },
        _ => unsafe { cachalot_snapshot_json(h, buf, len, out) },
    };
    let mut len = 0usize;
    let s = seen(call(null_mut(), 0, &mut len));
    if h.is_null() {
        assert_eq!(s, Status::NullPointer);
        return;
    }
    ok(s, "report size");
    assert!(len >= 1);
    let mut buf = vec![b'x' as c_char; len];
    let mut len2 = 7usize;
    assert_eq!(seen(call(buf.as_mut_ptr(), len - 1, &mut len2)), Status::BufferTooSmall);
    assert!(len2 == 7 && buf.iter().all(|&c| c == b'x' as c_char), "written on failure");
    ok(call(buf.as_mut_ptr(), len, &mut len2), "report");
    assert_eq!(len2, len);
    assert_eq!(buf[len - 1], 0, "not NUL-terminated");
    let text: Vec<u8> = buf[..len - 1].iter().map(|&c| c as u8).collect();
    assert!(!text.contains(&0), "a NUL inside the report");
    if summary == 2 {
        let v: serde_json::Value = serde_json::from_slice(&text).expect("the snapshot is JSON");
        let active = v["segments"]
            .as_array()
            .expect("segments")
            .iter()
            .flat_map(|s| s["blocks"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["state"] == "active_allocated")
            .count();
        assert_eq!(active, slot.live.len(), "the snapshot's allocated blocks against the model's");
    }
}

unsafe fn blocks(h: *mut SharedAllocator) -> Vec<BlockInfo> {
    let mut count = 0usize;
    ok(unsafe { cachalot_blocks(h, null_mut(), 0, &mut count) }, "blocks count");
    let mut rows = vec![BlockInfo::default(); count];
    ok(unsafe { cachalot_blocks(h, rows.as_mut_ptr(), count, &mut count) }, "blocks");
    rows.truncate(count);
    rows
}

unsafe fn check_blocks(slot: &Slot) {
    let h = slot.handle;
    if h.is_null() {
        let mut count = 0usize;
        assert_eq!(unsafe { cachalot_blocks(h, null_mut(), 0, &mut count) }, Status::NullPointer);
        return;
    }
    let rows = unsafe { blocks(h) };
    let allocated: BTreeMap<u64, (u64, u64)> = rows
        .iter()
        .filter(|b| b.state == CACHALOT_BLOCK_ALLOCATED)
        .map(|b| (b.address, (b.requested_size, b.size)))
        .collect();
    let model: BTreeMap<u64, u64> = slot.live.clone();
    let listed: BTreeMap<u64, u64> = allocated.iter().map(|(&a, &(r, _))| (a, r)).collect();
    assert_eq!(listed, model, "the allocated blocks against the model's live allocations");
    let bytes: u64 = allocated.values().map(|&(_, size)| size).sum();
    let stats = unsafe { stats(h) };
    assert_eq!(stats.allocated_bytes.all.current as u64, bytes, "allocated bytes against the blocks' sizes");
    for (a, (r, size)) in allocated {
        assert!(size >= r && size % 512 == 0, "block {a:#x}: {size} bytes for {r} asked");
    }
}

/// Frees every live allocation (each must free), ends captures, checks nothing stays
/// allocated, and destroys the allocator.
unsafe fn drain(slot: &mut Slot) {
    let h = slot.handle;
    if h.is_null() {
        unsafe { cachalot_allocator_free(h) };
        return;
    }
    for &p in slot.live.keys() {
        ok(unsafe { cachalot_free(h, p as *mut c_void) }, "free at the end");
    }
    for _ in 0..slot.captures {
        ok(unsafe { cachalot_capture_end(h) }, "capture_end at the end");
    }
    ok(unsafe { cachalot_empty_cache(h) }, "empty_cache at the end");
    let stats = unsafe { stats(h) };
    assert_eq!(stats.allocation.all.current, 0, "allocations left after freeing all");
    assert_eq!(stats.allocated_bytes.all.current, 0, "bytes left allocated after freeing all");
    unsafe { cachalot_allocator_free(h) };
    *slot = Slot::empty();
}
