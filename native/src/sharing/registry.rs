//! The process-wide allocators of PyTorch's entry points: one per CUDA device, created on
//! first use with the config in `CACHALOT_ALLOC_CONF`.
//!
//! Device N's allocator owns a `CudaDevice` that retains device N's primary context (the one
//! PyTorch and the CUDA runtime use) and makes it current around each of its driver calls, so
//! a call for device N is right whatever context the calling thread has current. Lookups that
//! must not touch the driver ([`existing`], [`created`]) never create an allocator.
//!
//! Invariants: each device's slot is initialised at most once (the first caller creates,
//! concurrent callers wait); a creation that fails is remembered, so every later call for
//! that device fails with the same message instead of retrying the driver; allocators live
//! until the process ends (they are never dropped, so nothing runs during CUDA's teardown).

use std::sync::OnceLock;

use super::shared_allocator::SharedAllocator;
use crate::config_env;
use crate::error::Error;

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

/// Device `device`'s allocator if it has been created (and its creation succeeded); never
/// creates one.
pub fn existing(device: i32) -> Option<&'static SharedAllocator> {
    let slot = ALLOCATORS.get(usize::try_from(device).ok()?)?;
    slot.get().and_then(|r| r.as_ref().ok())
}

/// The allocators created so far, by device.
pub fn created() -> impl Iterator<Item = &'static SharedAllocator> {
    ALLOCATORS.iter().filter_map(|slot| slot.get().and_then(|r| r.as_ref().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_create_nothing_and_refuse_bad_ordinals() {
        assert!(existing(-1).is_none());
        assert!(existing(MAX_DEVICES as i32).is_none());
        // No test creates an allocator for the last device.
        assert!(existing(MAX_DEVICES as i32 - 1).is_none());
        assert!(ALLOCATORS[MAX_DEVICES - 1].get().is_none(), "a lookup never initialises a slot");
        assert!(matches!(get(-1), Err(Error::NoDevice(m)) if m.contains("out of range")));
    }
}
