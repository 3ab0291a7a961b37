//! The `ops` target: runs a [`Scenario`] (any policy, limits, streams, injected device
//! faults) against an allocator and checks it against the [`Model`] after every step: the
//! shadow model `core/tests/property.rs` uses too (`core/tests/common/model.rs`).
//!
//! A crash is a panic, a broken invariant or model check, an error where none is allowed,
//! or memory not returned at the end. Allowed errors: out of memory when the request could
//! not fit (see `spurious_oom`) or a fault fired; a device error only when a fault fired
//! during the call, and then the call must have changed nothing the model sees; the
//! refusals of bad pointers, zero or huge sizes and invalid fractions.

use cachalot_core::size::MAX_REQUEST;
use cachalot_core::{AllocError, Allocator, Config, SimDevice};

use super::model::{spurious_oom, Model};
use super::scenario::{Op, Scenario, STREAMS};

/// Runs one input; panics on a crash.
pub fn run(data: &[u8]) {
    let s = Scenario::decode(data);
    if let Err(e) = execute(&s) {
        panic!("{e}\nscenario: {} on {} bytes (virtual memory: {})", s.config, s.capacity, s.virtual_memory);
    }
}

/// Runs a decoded scenario; the error describes the first crash.
pub fn execute(s: &Scenario) -> Result<(), String> {
    let config = Config::parse(&s.config).map_err(|e| format!("scenario config: {e}"))?;
    let device =
        if s.virtual_memory { SimDevice::new(s.capacity) } else { SimDevice::without_virtual_memory(s.capacity) };
    let mut a = Allocator::new(device, config);
    let mut m = Model::default();
    for (i, op) in s.ops.iter().enumerate() {
        let fired_before = a.device().calls().injected_failures;
        step(&mut a, &mut m, op, fired_before).map_err(|e| format!("op {i} {op:?}: {e}"))?;
        m.check(&a).map_err(|e| format!("after op {i} {op:?}: {e}"))?;
    }
    a.device_mut().clear_faults();
    for stream in 0..STREAMS {
        a.device_mut().finish_stream(stream);
    }
    for addr in m.order.clone() {
        let freeing = m.freeing(a.device(), addr);
        a.free(addr).map_err(|e| format!("final free of {addr:#x}: {e}"))?;
        m.freed(freeing);
    }
    a.empty_cache().map_err(|e| format!("final empty_cache: {e}"))?;
    m.check_drained(&a)
}

/// Runs one operation.
fn step(a: &mut Allocator<SimDevice>, m: &mut Model, op: &Op, fired_before: u64) -> Result<(), String> {
    let fired = |a: &Allocator<SimDevice>| a.device().calls().injected_failures > fired_before;
    match *op {
        Op::Malloc { size, stream } => match a.malloc(size, stream) {
            Ok(addr) if size > 0 && size <= MAX_REQUEST => m.allocated(addr, size, stream)?,
            Ok(addr) => return Err(format!("malloc({size}) returned {addr:#x}")),
            Err(AllocError::ZeroSize) if size == 0 => {}
            Err(AllocError::TooLarge { .. }) if size > MAX_REQUEST => {}
            Err(AllocError::OutOfMemory(r)) if fired(a) || !spurious_oom(a, &r) => {}
            Err(AllocError::Device(_)) if fired(a) => {}
            Err(e) => return Err(format!("malloc({size}) failed: {e}")),
        },
        Op::Free { pick } => {
            let Some(addr) = m.pick(pick) else { return Ok(()) };
            let freeing = m.freeing(a.device(), addr);
            match a.free(addr) {
                Ok(()) => m.freed(freeing),
                // A refused event record leaves the allocation live.
                Err(AllocError::Device(_)) if fired(a) => {}
                Err(e) => return Err(format!("free({addr:#x}) failed: {e}")),
            }
        }
        Op::BadFree { pick, kind } => {
            let addr = match kind {
                0 => match m.pick(pick) {
                    Some(addr) => addr + if m.live[&addr] > 512 { 512 } else { 1 },
                    None => return Ok(()),
                },
                1 => match m.freed.get(pick % m.freed.len().max(1)) {
                    Some(&addr) if !m.live.contains_key(&addr) => addr,
                    _ => return Ok(()),
                },
                _ => 0x1000 + pick as u64 * 512,
            };
            match (kind, a.free(addr)) {
                (0, Err(AllocError::InteriorPointer { .. })) => {}
                (1, Err(AllocError::DoubleFree { .. } | AllocError::UnknownPointer { .. })) => {}
                (1, Err(AllocError::InteriorPointer { .. })) => {}
                (2, Err(AllocError::UnknownPointer { .. })) => {}
                (_, r) => return Err(format!("bad free of {addr:#x} (kind {kind}) gave {r:?}")),
            }
        }
        Op::RecordStream { pick, stream } => {
            if let Some(addr) = m.pick(pick) {
                a.record_stream(addr, stream).map_err(|e| format!("record_stream({addr:#x}): {e}"))?;
                m.recorded(addr, stream);
            }
        }
        Op::HoldStream(s) => a.device_mut().hold_stream(s),
        Op::FinishStream(s) => a.device_mut().finish_stream(s),
        Op::EmptyCache => match a.empty_cache() {
            Ok(()) => {}
            Err(AllocError::Device(_)) if fired(a) => {}
            Err(e) => return Err(format!("empty_cache failed: {e}")),
        },
        Op::SetFraction(f) => match a.set_memory_fraction(f) {
            Ok(()) if f <= 1.0 => {}
            Err(AllocError::InvalidFraction(_)) if f > 1.0 => {}
            r => return Err(format!("set_memory_fraction({f}) gave {r:?}")),
        },
        Op::Fail { site, after } => {
            let call = a.device().next_call(site) + after;
            a.device_mut().fail_call(site, call);
        }
        Op::Inspect(what) => match what % 4 {
            0 => drop(a.memory_summary(0, what & 4 != 0)),
            1 => drop(a.snapshot_json(0)),
            2 => {
                a.set_explain(what & 4 != 0);
                drop(a.take_decisions());
            }
            _ => {
                a.reset_peak_stats();
                m.peak_reset(a);
            }
        },
    }
    Ok(())
}
