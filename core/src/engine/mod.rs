//! The engine: the only code that writes the allocator's state. `allocator.rs` holds
//! [`Allocator`](allocator::Allocator) and PyTorch's rules for malloc and free (rounding, pools,
//! best fit, splitting, coalescing, stream-ordered reuse); the other files add what those rules
//! need under memory pressure (release, out-of-memory recovery, expandable segments), private
//! pools for CUDA graphs (`private_pool.rs`, `pooling.rs`), the checks of its invariants, and the
//! readers the reports are built from. `paged/` is cachalot's own policy
//! and `memo/` the decision memo, each with state of its own that only the engine touches.

pub(crate) mod allocator;
pub(crate) mod block_heap;
pub(crate) mod capture;
pub(crate) mod expandable;
pub(crate) mod invariants;
pub(crate) mod layout_reader;
pub mod memo;
pub(crate) mod oom;
pub mod paged;
pub(crate) mod placement;
pub(crate) mod pooling;
pub(crate) mod private_pool;
pub(crate) mod release;
pub(crate) mod snapshot_reader;
pub(crate) mod split_rule;
pub mod vrange;
