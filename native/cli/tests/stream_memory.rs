//! A CSV's operations are spooled, not held: the heap a read and a pass over the operations
//! take does not grow with the file's rows when the blocks live at once stay the same. Heap
//! bytes are counted by this test's own global allocator (the one test of this file, so no
//! other test allocates meanwhile); the release tool's resident memory on a long file is
//! checked by `native/cli/tests/bombs.sh`.

mod heap_count;

use heap_count::peak_of;

use cachalot_cli::trace_file::{parse_from, parse_spooled, Source};
use cachalot_core::trace::TraceLimits;

/// A training loop's log: `steps` times, 200 blocks allocated at the same pointers and freed.
fn csv(steps: usize) -> Vec<u8> {
    let mut s = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    let mut time = 1_000_000u64;
    for _ in 0..steps {
        for action in ["allocate", "free"] {
            for b in 0..200u64 {
                time += 3;
                s.push_str(&format!(
                    "0,{time},{action},{:#x},{},0x0\n",
                    0x7f00_0000_0000u64 + b * 0x10_0000,
                    4096 + b * 512
                ));
            }
        }
    }
    s.into_bytes()
}

#[test]
fn reading_and_replaying_a_csv_holds_what_grows_with_live_blocks_not_rows() {
    // 100,000 and 800,000 rows: both more than a piece of operations (op_spool::PIECE).
    let (short, long) = (csv(250), csv(2000));
    let spooled = |bytes: &[u8]| {
        peak_of(|| {
            let (loaded, spool) =
                parse_spooled(bytes, "t.csv", None, &TraceLimits::DEFAULT, Source::Gone).expect("a valid trace");
            assert!(spool.on_disk(), "no temporary file could be made: the test measures the file's case");
            assert_eq!((loaded.trace.ops.len(), spool.len()), (0, loaded.trace.op_count()));
            let mut seen = 0;
            for _pass in 0..2 {
                seen = 0;
                spool
                    .pieces(|p| {
                        seen += p.ops.len();
                        Ok(())
                    })
                    .expect("read back");
            }
            assert_eq!(seen, bytes.iter().filter(|&&b| b == b'\n').count() - 1);
        })
        .1
    };
    let held = |bytes: &[u8]| {
        peak_of(|| {
            let loaded = parse_from(bytes, "t.csv", None, &TraceLimits::DEFAULT, Source::Gone).expect("a valid trace");
            assert!(!loaded.trace.ops.is_empty());
        })
        .1
    };
    let (spooled_short, spooled_long) = (spooled(&short), spooled(&long));
    let (held_short, held_long) = (held(&short), held(&long));
    // Held, the 700,000 more operations take 40 bytes each (operation, time, position): the
    // count sees them, so it would see the spooled reader grow if it did.
    assert!(held_long > held_short + 700_000 * 30, "held: {held_short} then {held_long} bytes");
    // Spooled, the longer file takes no more than a few KiB more (vectors grown by doubling
    // may round differently).
    assert!(spooled_long < spooled_short + 64 * 1024, "spooled: {spooled_short} then {spooled_long} bytes");
    println!(
        "peak heap, 100,000 / 800,000 rows: spooled {spooled_short} / {spooled_long}, held {held_short} / {held_long}"
    );
}
