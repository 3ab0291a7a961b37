//! `Model`: the shadow model that random operation sequences check an allocator against, the
//! one both `core/tests/property.rs` (proptest) and the `ops` fuzz target
//! (`fuzz/targets/ops.rs`, which includes this file with `#[path]`) use.
//!
//! It keeps the live allocations (address → requested size), the streams each one is used on,
//! the work a busy stream may still run on memory freed while it was busy, and the active
//! statistics' values after each step. [`Model::check`], after every step, checks:
//! `check_invariants()` holds; live allocations never overlap and each lies in memory the
//! device backs (a segment or mapped pages); the device's used bytes equal the allocator's
//! reserved bytes; the layout the memory map draws is contiguous, starts every live allocation
//! with an allocated block, holds no more than is reserved (all of it under classic segments)
//! and draws idle no more than `empty_cache` returns; no memory a busy stream's work may still
//! use is unmapped, remapped or handed to an allocation on another stream until that stream
//! finishes or is synchronized; and the active statistics peak where their step-by-step
//! values did, their totals agreeing with the allocation statistics' across resets.
//! [`Model::check_drained`] checks the end: nothing allocated, nothing reserved, every byte
//! back on the device. Errors are `String`s that name what broke.

use std::collections::BTreeMap;

use cachalot_core::layout::Piece;
use cachalot_core::sim::Memory;
use cachalot_core::size::{LARGE_BUFFER, SMALL_SIZE};
use cachalot_core::stats::{Stat, StatArray};
use cachalot_core::{Allocator, OomReport, Policy, SimDevice};

/// What an allocator run should hold, as far as a test can tell from outside.
#[derive(Default)]
pub struct Model {
    /// Live allocations by address.
    pub live: BTreeMap<u64, u64>,
    /// The live addresses, in an order `pick` indexes.
    pub order: Vec<u64>,
    /// Addresses freed earlier (the last few), for double frees.
    pub freed: Vec<u64>,
    /// The allocation handed out in this step, checked against busy streams' work at the
    /// next [`Model::check`].
    handed_out: Option<(u64, u64, u64)>,
    work: StreamWork,
    active: ActiveFigures,
}

/// A free the model has been told of before the allocator is asked: the work busy streams
/// may still run on the allocation's memory. [`Model::freed`] keeps it once the free
/// succeeded; dropped, it changes nothing.
#[must_use]
pub struct Freeing {
    addr: u64,
    in_flight: Vec<InFlight>,
}

impl Model {
    /// Records an allocation of `size` bytes handed out at `addr` for `stream`; an address
    /// not 512-aligned or handed out twice is an error.
    pub fn allocated(&mut self, addr: u64, size: u64, stream: u64) -> Result<(), String> {
        if addr % 512 != 0 {
            return Err(format!("address {addr:#x} is not 512-aligned"));
        }
        if self.live.insert(addr, size).is_some() {
            return Err(format!("address {addr:#x} handed out twice"));
        }
        self.order.push(addr);
        self.handed_out = Some((addr, size, stream));
        Ok(())
    }

    /// The live address `pick` chooses, if any is live.
    pub fn pick(&self, pick: usize) -> Option<u64> {
        (!self.order.is_empty()).then(|| self.order[pick % self.order.len()])
    }

    /// Before the live allocation at `addr` is freed: the work of its streams held busy,
    /// which may still use its memory.
    pub fn freeing(&self, dev: &SimDevice, addr: u64) -> Freeing {
        let size = self.live[&addr];
        let memory = dev.memory_behind(addr, size);
        let users = self.work.users.get(&addr).map_or(&[][..], Vec::as_slice);
        let in_flight = users
            .iter()
            .filter(|&&stream| dev.is_busy(stream))
            .map(|&stream| InFlight { stream, addr, size, memory: memory.clone() })
            .collect();
        Freeing { addr, in_flight }
    }

    /// Forgets the live allocation the allocator just freed. `order` keeps its order: a later
    /// `pick` chooses among the rest as it would have.
    pub fn freed(&mut self, freeing: Freeing) {
        let addr = freeing.addr;
        self.live.remove(&addr);
        self.order.retain(|&a| a != addr);
        if self.freed.len() == 16 {
            self.freed.remove(0);
        }
        self.freed.push(addr);
        self.work.users.remove(&addr);
        self.work.in_flight.extend(freeing.in_flight);
    }

    /// Records that the live allocation at `addr` is used on `stream` too (`record_stream`).
    pub fn recorded(&mut self, addr: u64, stream: u64) {
        let users = self.work.users.get_mut(&addr).expect("recorded allocation is live");
        if !users.contains(&stream) {
            users.push(stream);
        }
    }

    /// Records a peak reset (`reset_peak_stats`): the active peaks restart where they are.
    pub fn peak_reset(&mut self, a: &Allocator<SimDevice>) {
        self.active.reset(a, true);
    }

    /// Records a total reset (`reset_accumulated_stats`).
    #[allow(dead_code)] // the fuzz target's scenarios reset no totals
    pub fn accumulated_reset(&mut self, a: &Allocator<SimDevice>) {
        self.active.reset(a, false);
    }

    /// Everything that must hold between steps.
    pub fn check(&mut self, a: &Allocator<SimDevice>) -> Result<(), String> {
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
        check_layout(a, &self.live)?;
        self.work.check(a.device())?;
        if let Some((addr, size, stream)) = self.handed_out.take() {
            self.work.check_new(a.device(), addr, size, stream)?;
            self.work.users.insert(addr, vec![stream]);
        }
        self.active.step(a);
        self.active.check(a)
    }

    /// The state after freeing everything and emptying the cache: every byte returned.
    pub fn check_drained(&mut self, a: &Allocator<SimDevice>) -> Result<(), String> {
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

/// True when an out-of-memory error (with no injected fault) was not justified: the memory
/// a new segment (or its pages: expandable segments map 20 MiB pages for the large pool)
/// needs fits under the capacity and the memory fraction beside what stays reserved after
/// the allocator released every cached segment.
pub fn spurious_oom(a: &Allocator<SimDevice>, r: &OomReport) -> bool {
    let c = a.config();
    let limit = r.allowed.unwrap_or(u64::MAX).min(r.capacity);
    let expandable = c.policy == Policy::PyTorch && c.expandable_segments && a.uses_virtual_memory();
    let need = if expandable && r.rounded > SMALL_SIZE {
        r.segment_size.next_multiple_of(LARGE_BUFFER)
    } else {
        r.segment_size
    };
    need <= limit.saturating_sub(r.reserved)
}

/// The memory map's layout against the live allocations and the reserved bytes.
fn check_layout(a: &Allocator<SimDevice>, live: &BTreeMap<u64, u64>) -> Result<(), String> {
    let rows = a.layout();
    if !rows.windows(2).all(|w| w[0].address + w[0].size <= w[1].address) {
        return Err("layout rows overlap".into());
    }
    let mut allocated = BTreeMap::new();
    let mut held = 0;
    for row in &rows {
        let mut at = row.address;
        for b in &row.blocks {
            if b.address != at {
                return Err(format!("layout blocks are not contiguous at {:#x}", b.address));
            }
            at += b.size;
            match b.piece {
                Piece::Allocated | Piece::PendingFree => {
                    allocated.insert(b.address, b.size);
                }
                Piece::Unmapped | Piece::Idle if !row.virtual_range => {
                    return Err(format!("a classic segment at {:#x} has {:?} space", row.address, b.piece));
                }
                Piece::Unmapped | Piece::Idle | Piece::Free => {}
            }
            if b.piece != Piece::Unmapped {
                held += b.size;
            }
        }
        if at != row.address + row.size {
            return Err(format!("the blocks of the row at {:#x} end at {at:#x}, not at its end", row.address));
        }
        if !row.blocks.last().is_some_and(|b| b.piece != Piece::Unmapped) {
            return Err(format!("the row at {:#x} ends in unmapped space", row.address));
        }
    }
    for (&addr, &size) in live {
        if allocated.get(&addr).is_none_or(|&s| s < size) {
            return Err(format!("live {addr:#x} is no allocated block"));
        }
    }
    // Chunks kept aside from a move hold memory outside every range.
    if held > a.reserved_bytes() {
        return Err(format!("the layout holds {held}, more than reserved ({})", a.reserved_bytes()));
    }
    // Idle pages are what empty_cache can return: no more than it does return.
    let idle: u64 = rows.iter().flat_map(|r| &r.blocks).filter(|b| b.piece == Piece::Idle).map(|b| b.size).sum();
    let mut emptied = a.clone();
    if emptied.empty_cache().is_ok() {
        let returned = a.reserved_bytes() - emptied.reserved_bytes();
        if returned < idle {
            return Err(format!("{idle} bytes drawn idle, but empty_cache returns {returned}"));
        }
    }
    if !a.uses_virtual_memory() && held != a.reserved_bytes() {
        return Err(format!("the layout holds {held} of {} reserved classic bytes", a.reserved_bytes()));
    }
    Ok(())
}

/// What the active statistics must report, worked out from their values after each step:
/// active rises only inside a malloc, after that malloc's pending frees completed, so its
/// peak is reached at the end of a step.
#[derive(Default)]
struct ActiveFigures {
    /// Per statistic (blocks, bytes) and pool (all, small, large): the highest current value
    /// seen since the last peak reset, and the current value at the last total reset.
    peak: [[i64; 3]; 2],
    at_reset: [[i64; 3]; 2],
}

fn pools(s: &StatArray) -> [&Stat; 3] {
    [&s.all, &s.small_pool, &s.large_pool]
}

impl ActiveFigures {
    fn step(&mut self, a: &Allocator<SimDevice>) {
        let st = a.stats();
        for (k, active) in [&st.active, &st.active_bytes].into_iter().enumerate() {
            for (p, s) in pools(active).into_iter().enumerate() {
                self.peak[k][p] = self.peak[k][p].max(s.current);
            }
        }
    }

    fn reset(&mut self, a: &Allocator<SimDevice>, peak: bool) {
        let st = a.stats();
        for (k, active) in [&st.active, &st.active_bytes].into_iter().enumerate() {
            for (p, s) in pools(active).into_iter().enumerate() {
                if peak {
                    self.peak[k][p] = s.current;
                } else {
                    self.at_reset[k][p] = s.current;
                }
            }
        }
    }

    fn check(&self, a: &Allocator<SimDevice>) -> Result<(), String> {
        let st = a.stats();
        let pairs = [("active", &st.active, &st.allocation), ("active_bytes", &st.active_bytes, &st.allocated_bytes)];
        for (k, (name, active, allocation)) in pairs.into_iter().enumerate() {
            for (p, (s, alloc)) in pools(active).into_iter().zip(pools(allocation)).enumerate() {
                let expected = [
                    ("peak", s.peak, self.peak[k][p]),
                    ("allocated", s.allocated, alloc.allocated),
                    ("freed", s.freed, s.allocated - s.current + self.at_reset[k][p]),
                ];
                if let Some((what, got, want)) = expected.into_iter().find(|(_, got, want)| got != want) {
                    return Err(format!("{name} {what} (pool {p}) is {got}, expected {want}"));
                }
            }
        }
        Ok(())
    }
}

/// Work a busy stream queued before an allocation it used was freed: the stream, the
/// allocation's addresses and the memory behind them then.
struct InFlight {
    stream: u64,
    addr: u64,
    size: u64,
    memory: Vec<(Memory, u64, u64)>,
}

/// Which streams use each live allocation (its own, then those it was recorded on), and the
/// work that may still touch freed memory.
#[derive(Default)]
struct StreamWork {
    users: BTreeMap<u64, Vec<u64>>,
    in_flight: Vec<InFlight>,
}

impl StreamWork {
    /// Forgets work that finished (a stream finished or synchronized, or a classic segment
    /// freed, which waits for the device) and checks that the rest still finds its memory
    /// where it was.
    fn check(&mut self, dev: &SimDevice) -> Result<(), String> {
        self.in_flight.retain(|w| {
            dev.is_busy(w.stream) && w.memory.iter().all(|&(m, ..)| matches!(m, Memory::Handle(_)) || dev.holds(m))
        });
        for w in &self.in_flight {
            if dev.memory_behind(w.addr, w.size) != w.memory {
                return Err(format!(
                    "{:#x} (+{}) unmapped or remapped while stream {}'s work may still use it",
                    w.addr, w.size, w.stream
                ));
            }
        }
        Ok(())
    }

    /// A new allocation on `stream` may take memory still in use only by that stream's own work.
    fn check_new(&self, dev: &SimDevice, addr: u64, size: u64, stream: u64) -> Result<(), String> {
        for (m, off, len) in dev.memory_behind(addr, size) {
            for w in self.in_flight.iter().filter(|w| w.stream != stream) {
                if w.memory.iter().any(|&(wm, woff, wlen)| wm == m && woff < off + len && off < woff + wlen) {
                    return Err(format!(
                        "{addr:#x} (+{size}) on stream {stream} reuses memory stream {}'s work may still use ({:#x}, freed)",
                        w.stream, w.addr
                    ));
                }
            }
        }
        Ok(())
    }
}
