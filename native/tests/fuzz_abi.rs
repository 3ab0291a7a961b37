//! Replays the committed inputs of the `abi` fuzz target (`fuzz/doors/abi.rs`: sequences of C
//! ABI calls on simulated allocators, each status checked against a model) on stable Rust:
//! every file under `fuzz/seeds/abi/` and `fuzz/corpus/abi/` goes through the `run` function
//! the libFuzzer binary calls.
//!
//! Invariant: the folders hold at least one input, and no input panics; the model's checks
//! can fail (`the_model_catches_a_wrong_status`).

#[path = "../../fuzz/doors/abi.rs"]
mod abi;

use std::path::PathBuf;

fn inputs() -> Vec<PathBuf> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for folder in ["seeds", "corpus"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(folder).join("abi")) else { continue };
        let mut found: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
        found.sort();
        files.extend(found);
    }
    files
}

#[test]
fn abi_corpus_replays() {
    let files = inputs();
    assert!(files.len() >= 5, "too few committed inputs for fuzz target abi: {}", files.len());
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| abi::run(&data)) {
            let msg = panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied());
            panic!("fuzz input {} fails: {}", file.display(), msg.unwrap_or("(non-string panic)"));
        }
    }
}

/// The seeds reach every status the model reasons about, so each of its branches is in play.
#[test]
fn the_seeds_reach_every_status_the_model_checks() {
    abi::statuses_seen();
    for file in inputs().iter().filter(|f| f.parent().unwrap().ends_with("seeds/abi")) {
        abi::run(&std::fs::read(file).unwrap());
    }
    let seen = abi::statuses_seen();
    for (code, name) in [
        (0, "OK"),
        (1, "NULL_POINTER"),
        (2, "INVALID_ARGUMENT"),
        (3, "INVALID_CONFIG"),
        (4, "INVALID_SIZE"),
        (5, "OUT_OF_MEMORY"),
        (6, "UNKNOWN_POINTER"),
        (7, "DOUBLE_FREE"),
        (8, "INTERIOR_POINTER"),
        (9, "BUFFER_TOO_SMALL"),
    ] {
        assert!(seen[code] > 0, "no seed reaches CACHALOT_STATUS_{name}: {seen:?}");
    }
    assert_eq!(seen[13], 0, "a call returned CACHALOT_STATUS_INTERNAL");
}

/// The model's checks can fail: a wrong status for a malloc, a free of a stranger that
/// succeeds, and a malloc that overlaps a live allocation are each caught.
#[test]
fn the_model_catches_a_wrong_status() {
    use cachalot::ffi::Status;
    let mut handle = std::ptr::null_mut();
    // SAFETY: a NUL-terminated config and a writable out-pointer.
    let s = unsafe { cachalot::ffi::handle::cachalot_allocator_new_simulated(1 << 30, c"".as_ptr(), &mut handle) };
    assert_eq!(s, Status::Ok);
    let slot = || {
        let mut slot = abi::Slot::empty();
        (slot.handle, slot.capacity) = (handle, 1 << 30);
        slot.live.insert(1 << 20, 4096);
        slot
    };
    let fails = |f: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
    assert!(fails(&|| abi::malloc_checked(&mut slot(), Status::InvalidSize, 100, 0x5a5a)));
    assert!(fails(&|| abi::malloc_checked(&mut slot(), Status::Ok, 100, (1 << 20) + 512)));
    assert!(fails(&|| abi::malloc_checked(&mut slot(), Status::Internal, 100, 0x5a5a)));
    assert!(fails(&|| abi::malloc_checked(&mut slot(), Status::OutOfMemory, 100, 0x5a5a)));
    assert!(fails(&|| abi::stranger(&slot(), Status::Ok, 0x1234, "free")));
    assert!(fails(&|| abi::stranger(&slot(), Status::DoubleFree, (1 << 20) + 512, "free")));
    // And what is right passes.
    assert!(!fails(&|| abi::malloc_checked(&mut slot(), Status::InvalidSize, 0, 0x5a5a)));
    assert!(!fails(&|| abi::stranger(&slot(), Status::InteriorPointer, (1 << 20) + 512, "free")));
    // SAFETY: a live handle, destroyed once.
    unsafe { cachalot::ffi::handle::cachalot_allocator_free(handle) };
}
