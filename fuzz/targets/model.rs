//! `Model`: the live allocations an operation sequence should have, and the checks that
//! compare an allocator with it after every step.
//!
//! Checked each step: `check_invariants()` holds; live allocations never overlap; each lies
//! in memory the device backs (a segment or mapped pages); the device's used bytes equal the
//! allocator's reserved bytes (no segment or page leaks). [`Model::check_drained`] checks the
//! end state: nothing allocated, nothing reserved, every byte back on the device.

use std::collections::BTreeMap;

use cachalot_core::{Allocator, SimDevice};

/// Live allocations (address → requested size) and recently freed addresses.
#[derive(Default)]
pub struct Model {
    /// Live allocations by address.
    pub live: BTreeMap<u64, u64>,
    /// The live addresses, in an order `pick` indexes.
    pub order: Vec<u64>,
    /// Addresses freed earlier (the last few), for double frees.
    pub freed: Vec<u64>,
}

impl Model {
    /// Records a new allocation; an address handed out twice is an error.
    pub fn allocated(&mut self, addr: u64, size: u64) -> Result<(), String> {
        if addr % 512 != 0 {
            return Err(format!("address {addr:#x} is not 512-aligned"));
        }
        if self.live.insert(addr, size).is_some() {
            return Err(format!("address {addr:#x} handed out twice"));
        }
        self.order.push(addr);
        Ok(())
    }

    /// The live address `pick` chooses, if any is live.
    pub fn pick(&self, pick: usize) -> Option<u64> {
        (!self.order.is_empty()).then(|| self.order[pick % self.order.len()])
    }

    /// Forgets the live allocation at `addr`.
    pub fn freed(&mut self, addr: u64) {
        self.live.remove(&addr);
        self.order.retain(|&a| a != addr);
        if self.freed.len() == 16 {
            self.freed.remove(0);
        }
        self.freed.push(addr);
    }

    /// Everything that must hold between steps.
    pub fn check(&self, a: &Allocator<SimDevice>) -> Result<(), String> {
        a.check_invariants()?;
        let mut end = 0;
        for (&addr, &size) in &self.live {
            if addr < end {
                return Err(format!("allocation at {addr:#x} overlaps the one before it"));
            }
            end = addr + size;
            if !a.device().is_backed(addr, size) {
                return Err(format!("allocation {addr:#x}+{size} lies outside backed memory"));
            }
        }
        if a.device().used() != a.reserved_bytes() {
            return Err(format!(
                "device uses {} bytes but the allocator reserves {}",
                a.device().used(),
                a.reserved_bytes()
            ));
        }
        Ok(())
    }

    /// The state after freeing everything and emptying the cache: every byte returned.
    pub fn check_drained(&self, a: &mut Allocator<SimDevice>) -> Result<(), String> {
        self.check(a)?;
        let s = a.stats();
        let d = a.device();
        let left = [
            ("device used bytes", d.used()),
            ("reserved bytes", a.reserved_bytes()),
            ("live device segments", d.live_segments() as u64),
            ("physical bytes", d.physical_bytes()),
            ("mapped bytes", d.mapped_bytes()),
            ("allocated bytes", s.allocated_bytes.all.current as u64),
            ("active blocks", s.active.all.current as u64),
        ];
        match left.iter().find(|(_, v)| *v != 0) {
            Some((what, v)) => Err(format!("after freeing everything and empty_cache: {what} = {v}")),
            None => Ok(()),
        }
    }
}
