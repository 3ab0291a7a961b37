//! The process-wide allocators of PyTorch's entry points: one per CUDA device, created on
//! first use with the config in `CACHALOT_ALLOC_CONF`.
//!
//! Invariants: each device's slot is initialised at most once (the first caller creates,
//! concurrent callers wait); a creation that fails is remembered, so every later call for
//! that device fails with the same message instead of retrying the driver; allocators live
//! until the process ends (they are never dropped, so nothing runs during CUDA's teardown).

use std::sync::OnceLock;

use crate::config_env;
use crate::error::Error;
use crate::shared_allocator::SharedAllocator;

/// Devices the registry serves (ordinals 0 to MAX_DEVICES - 1).
pub const MAX_DEVICES: usize = 64;

static ALLOCATORS: [OnceLock<Result<SharedAllocator, Error>>; MAX_DEVICES] = [const { OnceLock::new() }; MAX_DEVICES];

/// The allocator of CUDA device `device`, created on first use.
#[inline]
pub fn get(device: i32) -> Result<&'static SharedAllocator, Error> {
    let slot = usize::try_from(device)
        .ok()
        .and_then(|d| ALLOCATORS.get(d))
        .ok_or_else(|| Error::NoDevice(format!("CUDA device {device} is out of range (0 to {})", MAX_DEVICES - 1)))?;
    match slot.get_or_init(|| SharedAllocator::cuda(device, config_env::from_env()?)) {
        Ok(a) => Ok(a),
        Err(e) => Err(e.clone()),
    }
}

/// The allocators created so far, by device.
pub fn created() -> impl Iterator<Item = &'static SharedAllocator> {
    ALLOCATORS.iter().filter_map(|slot| slot.get().and_then(|r| r.as_ref().ok()))
}
