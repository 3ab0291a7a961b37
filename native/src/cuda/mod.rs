//! Real GPU memory through the CUDA driver API (cudarc, loaded at run time).
//!
//! [`driver`] finds and initialises the driver once per process and maps driver results to
//! the core's `DeviceError`; [`context`] makes a device's primary context current for the
//! length of a driver call; [`event_pool`] recycles the events behind stream-ordered reuse;
//! [`CudaDevice`] implements the core's `Device` with them. Invariant: no driver function is
//! called before [`driver::init`] has succeeded, so a machine without CUDA gets an error,
//! never a panic. [`virtual_memory`] reserves ranges and maps physical pages
//! (cuMemAddressReserve, cuMemCreate, cuMemMap…) where the driver and device support it;
//! [`foreign_stream`] waits for streams of another device that `record_stream` named;
//! [`free_memory_memo`] keeps what `cuMemGetInfo` said between the policy's questions;
//! [`peer_access`] opens each device's mappings to the other GPUs this process uses.

pub mod context;
pub mod cuda_device;
pub mod driver;
pub mod event_pool;
pub mod foreign_stream;
pub mod free_memory_memo;
pub mod peer_access;
pub mod virtual_memory;

pub use cuda_device::CudaDevice;
