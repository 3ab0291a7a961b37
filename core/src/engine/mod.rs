//! The engine: the only code that writes the allocator's state. `allocator.rs` holds
//! [`Allocator`](allocator::Allocator); `malloc_chain.rs` and `free_chain.rs` PyTorch's malloc
//! and free, each one chain in PyTorch's order, over the block heap (`block_heap.rs`: blocks,
//! free index, live map, stream lanes, statistics, with private fields); the growth seam
//! (`growth.rs`) gets memory from the device, classic, expandable or paged; the other files add
//! what those rules need under memory pressure (release, out-of-memory recovery), private
//! pools for CUDA graphs (`private_pool.rs`, `pooling.rs`), the checks of its invariants, and the
//! readers the reports are built from. `paged/` is cachalot's own policy
//! and `memo/` the decision memo, each with state of its own that only the engine touches.

pub(crate) mod allocator;
pub(crate) mod block_moves;
pub(crate) mod capture;
pub(crate) mod capture_state;
pub(crate) mod expandable;
pub(crate) mod free_chain;
pub(crate) mod growth;
pub(crate) mod heap;
pub(crate) mod invariants;
pub(crate) mod layout_reader;
pub(crate) mod malloc_chain;
pub mod memo;
pub(crate) mod oom;
pub mod paged;
pub(crate) mod placement;
pub(crate) mod pooling;
pub(crate) mod private_pool;
pub(crate) mod release;
pub(crate) mod snapshot_reader;
pub(crate) mod split_rule;
pub(crate) mod stream_events;
pub mod vrange;
