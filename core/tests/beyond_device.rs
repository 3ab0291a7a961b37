//! A request larger than the device (or its memory fraction) can never be served: under
//! cachalot's policy it fails as out of memory before any call to the device and leaves the
//! cache as it was. (PyTorch's policy asks the device and releases its cache first, as
//! PyTorch does: `rules.rs`.)

use cachalot_core::{AllocError, Allocator, Config, SimDevice};

const GIB: u64 = 1 << 30;

#[test]
fn a_request_larger_than_the_device_fails_before_any_device_call() {
    let confs = [("", 150), ("policy:cachalot,learn_layout:False", 150), ("per_process_memory_fraction:0.5", 80)];
    for (conf, gib) in confs {
        for virtual_memory in [true, false] {
            let device =
                if virtual_memory { SimDevice::new(140 * GIB) } else { SimDevice::without_virtual_memory(140 * GIB) };
            let mut a = Allocator::new(device, Config::parse(conf).unwrap());
            // Something cached, which releasing could not turn into 150 GiB.
            let p = a.malloc(3 << 20, 0).unwrap();
            a.free(p).unwrap();
            let (before, reserved) = (a.device().calls(), a.reserved_bytes());
            let e = a.malloc(gib * GIB, 0).unwrap_err();
            assert!(matches!(e, AllocError::OutOfMemory(_)), "{conf}: {e}");
            assert!(e.to_string().contains(&format!("{gib}.00 GiB")), "{conf}: {e}");
            // The out-of-memory report says what the device has free: a question, not a call
            // that allocates or releases.
            let calls = a.device().calls().since(&before);
            let changing = cachalot_core::sim::DeviceCalls { free_memory_queries: 0, ..calls };
            assert_eq!(changing, Default::default(), "{conf} (virtual memory {virtual_memory}): {calls:?}");
            assert_eq!(a.reserved_bytes(), reserved, "{conf}: the cache was released for nothing");
            assert_eq!(a.stats().num_ooms, 1, "{conf}");
            a.check_invariants().unwrap();
        }
    }
}
