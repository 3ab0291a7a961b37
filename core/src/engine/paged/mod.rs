//! cachalot's own paged policy: its state (`PagedState`), pages mapped on demand and moved,
//! free epochs, and the learned layout. Part of the engine: its `impl Allocator` blocks write
//! the allocator's state. The virtual ranges it maps into are the engine's (`vrange.rs`),
//! shared with PyTorch's expandable segments.

pub(crate) mod cell_hints;
pub(crate) mod epochs;
pub(crate) mod idle_chunks;
pub(crate) mod layout_plan;
pub(crate) mod paged_state;
pub(crate) mod paging;
pub(crate) mod planned_range;
pub(crate) mod recurrence;
pub(crate) mod region;
pub(crate) mod regrowth;
pub(crate) mod single_pages;
pub(crate) mod slot_tail;
pub(crate) mod vm;
