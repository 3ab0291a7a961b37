//! The data structures the engine keeps its state in: the block slab with `u32` ids, the address
//! map, the free index, streams and events. They know nothing of policies.

pub(crate) mod addr_map;
pub(crate) mod block;
pub(crate) mod class_store;
pub(crate) mod events;
pub(crate) mod free_index;
pub(crate) mod streams;
