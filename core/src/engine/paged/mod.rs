//! cachalot's own paged policy: virtual-memory ranges, pages mapped on demand, free epochs, and the
//! learned layout. Part of the engine: its `impl Allocator` blocks write the allocator's state.

pub(crate) mod cell_hints;
pub(crate) mod epochs;
pub(crate) mod layout_plan;
pub(crate) mod paged_state;
pub(crate) mod paging;
pub(crate) mod planned_range;
pub(crate) mod recurrence;
pub(crate) mod vm;
