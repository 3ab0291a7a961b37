//! Which GPU's history a PyTorch snapshot is read from. A snapshot keeps one list of events
//! per device (`device_traces`), and a replay simulates one GPU: reading two GPUs' events
//! as one device's would double their memory and mix their addresses. A device counts when
//! its list holds an allocation.
//!
//! Invariants: a trace holds the events of at most one device; a snapshot with allocation
//! events of several devices and no device asked for is refused, naming the devices that
//! have them ([`TraceErrorKind::DeviceNotChosen`]); a device asked for must be listed, and
//! must have events when another does.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::Value;

use crate::trace::trace_error::{TraceError, TraceErrorKind};

/// The devices among `lists` (a snapshot's `device_traces`) with at least one allocation,
/// in order. (A list of frees alone gives nothing to replay.)
pub fn with_allocations(lists: &[Value]) -> Vec<usize> {
    (0..lists.len()).filter(|&d| has_allocations(&lists[d])).collect()
}

/// The list to read among `lists`: `device` if given, else the only one with allocations.
/// `None` when no list has any (nothing to replay).
pub fn choose(lists: &[Value], device: Option<usize>) -> Result<Option<usize>, TraceError> {
    choose_among(lists.len(), with_allocations(lists), device)
}

/// [`choose`] among a snapshot's lists as a first pass over their events saw them.
pub fn choose_list(
    lists: &[crate::trace::snapshot_reader::EventList],
    device: Option<usize>,
) -> Result<Option<usize>, TraceError> {
    choose_among(lists.len(), (0..lists.len()).filter(|&d| lists[d].allocations).collect(), device)
}

/// [`choose`] among `lists` lists, of which those in `with_allocs` hold allocations.
pub fn choose_among(lists: usize, with_allocs: Vec<usize>, device: Option<usize>) -> Result<Option<usize>, TraceError> {
    let refuse = |kind, message| Err(TraceError { line: 0, message, kind });
    match device {
        Some(d) if lists == 0 => refuse(
            TraceErrorKind::NoSuchDevice,
            alloc::format!("device {d} asked for, but the snapshot records no devices"),
        ),
        Some(d) if d >= lists => refuse(
            TraceErrorKind::NoSuchDevice,
            alloc::format!(
                "device {d} asked for, but the snapshot records {} (with allocation events: {})",
                match lists {
                    1 => "device 0 only".to_string(),
                    n => alloc::format!("devices 0 to {}", n - 1),
                },
                spoken(&with_allocs)
            ),
        ),
        Some(d) if !with_allocs.contains(&d) && !with_allocs.is_empty() => refuse(
            TraceErrorKind::NoSuchDevice,
            alloc::format!(
                "the snapshot holds no allocation events of device {d} (devices with events: {})",
                spoken(&with_allocs)
            ),
        ),
        Some(d) => Ok(Some(d)),
        None if with_allocs.len() > 1 => refuse(
            TraceErrorKind::DeviceNotChosen { devices: with_allocs.clone() },
            alloc::format!(
                "the snapshot holds allocation events of devices {}; a replay simulates one GPU",
                spoken(&with_allocs)
            ),
        ),
        None => Ok(with_allocs.first().copied()),
    }
}

/// `[0, 1, 2]` as "0, 1 and 2"; nothing as "none".
fn spoken(devices: &[usize]) -> String {
    match devices {
        [] => "none".to_string(),
        [one] => one.to_string(),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(usize::to_string).collect();
            alloc::format!("{} and {last}", init.join(", "))
        }
    }
}

/// True when `list` holds an allocation the replay keeps: a zero-byte one is skipped (PyTorch
/// hands out no memory for it), so a device with only those has nothing to replay.
fn has_allocations(list: &Value) -> bool {
    list.as_array().is_some_and(|entries| {
        entries.iter().any(|e| {
            e.get("action").and_then(Value::as_str) == Some("alloc") && e.get("size").and_then(Value::as_u64) != Some(0)
        })
    })
}
