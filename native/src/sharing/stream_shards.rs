//! `StreamShards`: the core allocators behind one device's handle, each behind its own lock.
//!
//! By default there is one shard, serving every stream, as PyTorch's allocator does. With
//! `lock_per_stream:True` each stream gets a shard of its own on its first malloc (up to
//! [`MAX_SHARDS`]; later streams share the last, and find it through the assignment lock on
//! every malloc), all over one [`DeviceHub`]. PyTorch never
//! gives one stream's cached blocks to another, so a shard makes the decisions the single
//! allocator would, and threads on different streams never wait for each other.
//!
//! Invariants: a shard, once published (`count` covers it), never moves or changes its
//! stream; every shard uses the same config and memory fraction; shards share one address
//! space (the hub's device), so an address belongs to at most one of them. Lock order: the
//! assignment lock, then a shard's lock, then the hub's; no code holds two shards' locks.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cachalot_core::{AllocError, Allocator, Config, Stream};

use super::device_hub::{BoxedDevice, DeviceHub};
use super::shard_lock::{ShardGuard, ShardLock};
use crate::error::Error;

/// The most shards one device's allocator keeps; streams beyond the first `MAX_SHARDS - 1`
/// share the last shard.
pub const MAX_SHARDS: usize = 64;

/// One shard: a core allocator and its lock.
pub type Shard = ShardLock<Allocator<BoxedDevice>>;

/// A shard on cache lines of its own: a neighbour's lock word must not share a line with
/// this shard's hot fields, or two threads on two streams would still contend.
#[repr(align(128))]
struct Padded(Shard);

thread_local! {
    /// Where this thread's last free found its allocation (or the shard it last created):
    /// where its next free most likely belongs. Written only when it changes, since a
    /// thread-local access costs a call in a shared library.
    static LAST_SHARD: Cell<usize> = const { Cell::new(0) };
}

/// What a shard created later is made with.
struct Recipe {
    hub: Option<Arc<DeviceHub>>,
    config: Config,
    fraction: Option<f64>,
}

/// The shards of one device's allocator.
pub struct StreamShards {
    shards: Box<[OnceLock<Padded>]>,
    streams: Box<[AtomicU64]>,
    count: AtomicUsize,
    recipe: Mutex<Recipe>,
}

/// Locks a shard, refusing one a panic left half-updated.
#[inline]
pub fn lock(shard: &Shard) -> Result<ShardGuard<'_, Allocator<BoxedDevice>>, Error> {
    shard.lock().map_err(|_| Error::Poisoned)
}

impl StreamShards {
    /// The shards over `device`: one for every stream, or (with `lock_per_stream`) one per
    /// stream, created on first use.
    pub fn new(device: BoxedDevice, config: Config) -> StreamShards {
        if !config.lock_per_stream {
            let only = OnceLock::from(Padded(ShardLock::new(Allocator::new(device, config.clone()))));
            return StreamShards {
                shards: Box::new([only]),
                streams: Box::new([]),
                count: AtomicUsize::new(1),
                recipe: Mutex::new(Recipe { hub: None, config, fraction: None }),
            };
        }
        StreamShards {
            shards: (0..MAX_SHARDS).map(|_| OnceLock::new()).collect(),
            streams: (0..MAX_SHARDS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicUsize::new(0),
            recipe: Mutex::new(Recipe { hub: Some(DeviceHub::new(device)), config, fraction: None }),
        }
    }

    /// True when each stream has a shard of its own.
    #[inline]
    pub fn per_stream(&self) -> bool {
        self.shards.len() > 1
    }

    /// The shards created so far, with their positions.
    pub fn created(&self) -> impl Iterator<Item = (usize, &Shard)> {
        let n = self.count.load(Ordering::Acquire);
        self.shards[..n].iter().enumerate().filter_map(|(i, s)| s.get().map(|s| (i, &s.0)))
    }

    /// The shard of an allocator without per-stream locks. The error is built only when
    /// needed: its message is a heap allocation, which every malloc and free would pay for.
    #[inline]
    fn only(&self) -> Result<&Shard, Error> {
        self.shards[0].get().map(|only| &only.0).ok_or_else(|| Error::Panic("the only shard is missing".into()))
    }

    /// The shard serving `stream` and its position, created if need be.
    #[inline]
    pub fn for_stream(&self, stream: Stream) -> Result<(usize, &Shard), Error> {
        if !self.per_stream() {
            return self.only().map(|only| (0, only));
        }
        let n = self.count.load(Ordering::Acquire);
        for i in 0..n {
            if self.streams[i].load(Ordering::Relaxed) == stream {
                if let Some(s) = self.shards[i].get() {
                    return Ok((i, &s.0));
                }
            }
        }
        self.assign(stream)
    }

    #[cold]
    fn assign(&self, stream: Stream) -> Result<(usize, &Shard), Error> {
        let recipe = self.recipe.lock().map_err(|_| Error::Poisoned)?;
        let n = self.count.load(Ordering::Acquire);
        // Another thread may have assigned the stream while this one waited.
        let i = (0..n).find(|&i| self.streams[i].load(Ordering::Relaxed) == stream).unwrap_or(n);
        let i = i.min(MAX_SHARDS - 1);
        if i == n {
            let hub = recipe.hub.as_ref().ok_or_else(|| Error::Panic("a single shard cannot be missing".into()))?;
            let mut a = Allocator::new(Box::new(hub.shard()) as BoxedDevice, recipe.config.clone());
            if let Some(f) = recipe.fraction {
                a.set_memory_fraction(f)?;
            }
            let _ = self.shards[i].set(Padded(ShardLock::new(a)));
            self.streams[i].store(stream, Ordering::Relaxed);
            self.count.store(n + 1, Ordering::Release);
        }
        let shard = &self.shards[i].get().ok_or_else(|| Error::Panic("an assigned shard is missing".into()))?.0;
        LAST_SHARD.set(i);
        Ok((i, shard))
    }

    /// Runs `f` on the shard that owns `addr`: the one this thread used last first, then the
    /// others, until one does not answer `UnknownPointer`. A shard a panic left unusable is
    /// passed over; if no other shard knows the address, the answer is [`Error::Poisoned`],
    /// since the address may be that shard's.
    pub fn on_owner<T>(
        &self,
        addr: u64,
        mut f: impl FnMut(&mut Allocator<BoxedDevice>) -> Result<T, AllocError>,
    ) -> Result<T, Error> {
        if !self.per_stream() {
            // One shard knows every address: no search, and no thread-local to read.
            return Ok(f(&mut *lock(self.only()?)?)?);
        }
        let n = self.count.load(Ordering::Acquire);
        let first = LAST_SHARD.get();
        let order = (first < n).then_some(first).into_iter().chain((0..n).filter(|&i| i != first));
        let mut poisoned = false;
        for i in order {
            let Some(Padded(shard)) = self.shards[i].get() else { continue };
            let Ok(mut a) = lock(shard) else {
                poisoned = true;
                continue;
            };
            match f(&mut a) {
                Err(AllocError::UnknownPointer { .. }) => continue,
                result => {
                    if i != first {
                        LAST_SHARD.set(i);
                    }
                    return Ok(result?);
                }
            }
        }
        Err(if poisoned { Error::Poisoned } else { AllocError::UnknownPointer { addr }.into() })
    }

    /// Runs `f` on every shard, one lock at a time.
    pub fn each(&self, mut f: impl FnMut(&mut Allocator<BoxedDevice>) -> Result<(), AllocError>) -> Result<(), Error> {
        for (_, shard) in self.created() {
            f(&mut *lock(shard)?)?;
        }
        Ok(())
    }

    /// Returns the cached memory of every shard but `except` to the device.
    /// A shard a panic left unusable is skipped: its memory cannot be trusted to release, and
    /// the request being served is another shard's.
    pub fn empty_others(&self, except: usize) -> Result<(), Error> {
        for (i, shard) in self.created() {
            if i != except {
                if let Ok(mut other) = lock(shard) {
                    other.empty_cache()?;
                }
            }
        }
        Ok(())
    }

    /// The device hub the shards share (`lock_per_stream` only).
    pub fn hub(&self) -> Option<Arc<DeviceHub>> {
        match self.recipe.lock() {
            Ok(r) => r.hub.clone(),
            Err(poisoned) => poisoned.into_inner().hub.clone(),
        }
    }

    /// The config every shard uses.
    pub fn config(&self) -> Config {
        match self.recipe.lock() {
            Ok(r) => r.config.clone(),
            Err(poisoned) => poisoned.into_inner().config.clone(),
        }
    }

    /// Sets the memory fraction of every shard, present and future.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), Error> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(AllocError::InvalidFraction(fraction).into());
        }
        let mut recipe = self.recipe.lock().map_err(|_| Error::Poisoned)?;
        recipe.fraction = Some(fraction);
        self.each(|a| a.set_memory_fraction(fraction))
    }
}
