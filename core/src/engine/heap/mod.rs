//! The block heap (`block_heap.rs`): the blocks and their indexes, below the allocator. It
//! imports nothing of the engine above it (`core/tests/layers.rs` holds it to that).

pub(crate) mod block_heap;
