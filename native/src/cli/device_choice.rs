//! Which GPU's history a PyTorch snapshot is replayed from. A snapshot keeps one list of
//! events per device (`device_traces`), and the simulated device is one GPU: replaying two
//! GPUs' events as one device's would double their memory. The core's reader reads every
//! list in order, so the snapshot it is given here holds the chosen device's list alone.
//!
//! Invariants: the text handed on holds events of at most one device; a snapshot with events
//! of several devices and no `--device` is refused with the devices that have them; an RMM
//! CSV (one device) is handed on unchanged, and refused with a `--device`.

use serde_json::Value;

/// Actions the trace reader turns into operations.
const EVENT_ACTIONS: [&str; 2] = ["alloc", "free_requested"];

/// The trace text to parse for `device` (or the only device with events), and the device
/// chosen when the snapshot recorded more than one.
pub fn choose(text: String, name: &str, device: Option<usize>) -> Result<(String, Option<usize>), String> {
    if !text.trim_start().starts_with('{') {
        return match device {
            Some(d) => Err(format!("--device {d}: {name} is an RMM CSV trace, which records one device")),
            None => Ok((text, None)),
        };
    }
    // Text the core cannot read as a snapshot is left for its reader to report, by line.
    let Ok(mut snapshot) = serde_json::from_str::<Value>(&text) else { return Ok((text, None)) };
    let Some(lists) = snapshot.get_mut("device_traces").and_then(Value::as_array_mut) else {
        return Ok((text, None));
    };
    let with_events: Vec<usize> = (0..lists.len()).filter(|&d| has_events(&lists[d])).collect();
    let listed = |ds: &[usize]| ds.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    let chosen = match device {
        Some(d) if d >= lists.len() => {
            return Err(format!(
                "--device {d}: {name} records devices 0 to {} (with events: {})",
                lists.len().saturating_sub(1),
                if with_events.is_empty() { "none".into() } else { listed(&with_events) }
            ))
        }
        Some(d) if !with_events.contains(&d) && !with_events.is_empty() => {
            return Err(format!(
                "--device {d}: {name} holds no allocation events of device {d} (devices with events: {})",
                listed(&with_events)
            ))
        }
        Some(d) => d,
        None if with_events.len() > 1 => {
            let devices = listed(&with_events);
            return Err(format!(
                "{name} holds allocation events of devices {devices}; the simulated device is one GPU: \
                 choose one with --device N"
            ));
        }
        None => match with_events.first() {
            Some(&d) => d,
            None => return Ok((text, None)),
        },
    };
    if lists.len() == 1 {
        return Ok((text, None));
    }
    let only = lists.swap_remove(chosen);
    let text = serde_json::to_string(&serde_json::json!({ "device_traces": [only] })).map_err(|e| e.to_string())?;
    Ok((text, Some(chosen)))
}

fn has_events(list: &Value) -> bool {
    list.as_array().is_some_and(|entries| {
        entries.iter().any(|e| e.get("action").and_then(Value::as_str).is_some_and(|a| EVENT_ACTIONS.contains(&a)))
    })
}
