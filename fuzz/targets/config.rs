//! The `config` target: any text through `Config::parse`.
//!
//! Checks: parsing never panics; an error names a key that occurs in the text (or none) and
//! formats; a config that parses reads back equal from `to_config_string()`, and an
//! allocator built with it serves, frees and releases a spread of sizes with its invariants
//! intact and every byte returned.

use cachalot_core::{AllocError, Allocator, Config, SimDevice};

const CAPACITY: u64 = 1 << 30;
const SIZES: [u64; 9] = [1, 512, 4097, 1 << 20, (1 << 20) + 1, 3 << 20, 12 << 20, 100 << 20, 300 << 20];

/// Runs one input; panics on a crash.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let config = match Config::parse(&text) {
        Ok(c) => c,
        Err(e) => {
            assert!(text.contains(e.key.as_str()), "error names key {:?}, which is not in {text:?}", e.key);
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let again = config.to_config_string();
    assert_eq!(Config::parse(&again).as_ref(), Ok(&config), "{text:?} printed as {again:?} reads back differently");
    exercise(config).unwrap_or_else(|e| panic!("config {text:?}: {e}"));
}

/// Allocates every size on two streams, frees everything, empties the cache.
fn exercise(config: Config) -> Result<(), String> {
    let mut a = Allocator::new(SimDevice::new(CAPACITY), config);
    let mut live = Vec::new();
    for (i, &size) in SIZES.iter().enumerate() {
        match a.malloc(size, i as u64 % 2) {
            Ok(addr) => live.push(addr),
            Err(AllocError::OutOfMemory(_)) => {}
            Err(e) => return Err(format!("malloc({size}): {e}")),
        }
        a.check_invariants()?;
    }
    for addr in live {
        a.free(addr).map_err(|e| format!("free({addr:#x}): {e}"))?;
        a.check_invariants()?;
    }
    a.empty_cache().map_err(|e| format!("empty_cache: {e}"))?;
    a.check_invariants()?;
    match (a.device().used(), a.reserved_bytes()) {
        (0, 0) => Ok(()),
        (used, reserved) => Err(format!("{used} bytes used and {reserved} reserved after emptying the cache")),
    }
}
