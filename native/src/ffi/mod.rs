//! The C ABI (`include/cachalot.h`, generated from this module by cbindgen).
//!
//! House rules, kept by every function here: one symbol prefix, `cachalot_`; an opaque
//! handle with a `_new`/`_free` pair; a [`Status`] returned, with codes fixed forever;
//! out-parameters written only on success; every pointer checked for NULL; every body run
//! inside [`boundary`]'s panic boundary, so no panic crosses into C; the message of a
//! failure kept per thread for [`last_error_message::cachalot_last_error_message`]. Each file holds
//! one group of functions: [`handle`] (create, destroy), [`allocation`] (malloc, free,
//! streams, cache, limits), [`blocks`] (every block, and placing one at an address), [`pool`] (private pools), [`stats`], [`report`] (summary, snapshot), [`config`] (what a
//! config string leaves without effect), [`torch`] (PyTorch's pluggable-allocator entry
//! points), [`version`].

pub mod allocation;
pub mod blocks;
pub mod boundary;
pub mod buffer;
pub mod config;
pub mod handle;
pub mod last_error;
pub mod last_error_message;
pub mod pool;
pub mod report;
pub mod stats;
pub mod status;
pub mod torch;
pub mod version;

pub use status::Status;
