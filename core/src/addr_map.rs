//! The map from the address of an allocated block to its id: the lookup `free` makes.
//!
//! Invariant (kept by the allocator): an address is in the map iff a block starting there
//! is in the `Allocated` state, and it maps to that block's id.

use core::hash::{BuildHasherDefault, Hasher};

/// A fast hasher for device addresses (512-byte aligned, so the low bits carry nothing):
/// one 128-bit multiply folded to 64 bits.
#[derive(Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    #[inline]
    fn write_u64(&mut self, x: u64) {
        let p = ((x ^ self.0) as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }
}

/// Address → block id.
pub type AddrMap = hashbrown::HashMap<u64, u32, BuildHasherDefault<AddrHasher>>;
