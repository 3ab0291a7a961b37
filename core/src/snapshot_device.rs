//! Which GPU's history a PyTorch snapshot is read from. A snapshot keeps one list of events
//! per device (`device_traces`), and a replay simulates one GPU: reading two GPUs' events
//! as one device's would double their memory and mix their addresses.
//!
//! Invariants: a trace holds the events of at most one device; a snapshot with allocation
//! events of several devices and no device asked for is refused, naming the devices that
//! have them ([`TraceErrorKind::DeviceNotChosen`]); a device asked for must be listed, and
//! must have events when another does.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::Value;

use crate::trace::{TraceError, TraceErrorKind};

/// Actions the reader turns into operations.
const EVENT_ACTIONS: [&str; 2] = ["alloc", "free_requested"];

/// The list to read among `lists` (a snapshot's `device_traces`): `device` if given, else
/// the only one with allocation events. `None` when no list has any (nothing to replay).
pub fn choose(lists: &[Value], device: Option<usize>) -> Result<Option<usize>, TraceError> {
    let with_events: Vec<usize> = (0..lists.len()).filter(|&d| has_events(&lists[d])).collect();
    let listed = || {
        if with_events.is_empty() {
            return "none".to_string();
        }
        with_events.iter().map(usize::to_string).collect::<Vec<String>>().join(", ")
    };
    let refuse = |kind, message| Err(TraceError { line: 0, message, kind });
    match device {
        Some(d) if d >= lists.len() => refuse(
            TraceErrorKind::NoSuchDevice,
            alloc::format!(
                "device {d} asked for, but the snapshot records devices 0 to {} (with allocation events: {})",
                lists.len().saturating_sub(1),
                listed()
            ),
        ),
        Some(d) if !with_events.contains(&d) && !with_events.is_empty() => refuse(
            TraceErrorKind::NoSuchDevice,
            alloc::format!("the snapshot holds no allocation events of device {d} (devices with events: {})", listed()),
        ),
        Some(d) => Ok(Some(d)),
        None if with_events.len() > 1 => refuse(
            TraceErrorKind::DeviceNotChosen { devices: with_events.clone() },
            alloc::format!(
                "the snapshot holds allocation events of devices {}, and a replay simulates one GPU",
                listed()
            ),
        ),
        None => Ok(with_events.first().copied()),
    }
}

fn has_events(list: &Value) -> bool {
    list.as_array().is_some_and(|entries| {
        entries.iter().any(|e| e.get("action").and_then(Value::as_str).is_some_and(|a| EVENT_ACTIONS.contains(&a)))
    })
}
