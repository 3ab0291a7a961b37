//! A PyTorch snapshot's own `segments` (what `torch.cuda.memory._snapshot()` lists of the
//! memory held when it was taken) as the memory map's flat array (`memory_map.rs`'s layout),
//! so the page draws a snapshot taken without a recorded history.
//!
//! Invariants: only segments and blocks whose numbers are whole and below 2^53 are kept (a JS
//! number holds them exactly); segments are drawn by address and blocks by address within
//! their segment, as the map's layout requires; a state PyTorch names that the map does not
//! draw apart counts as cached free.

use serde_json::Value;

use crate::memory_map::{KIND_CLASSIC, STATE_ALLOCATED, STATE_INACTIVE, STATE_PENDING_FREE};

/// The largest integer a JS number holds exactly.
const EXACT: u64 = 1 << 53;

fn number(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_u64).filter(|&n| n < EXACT).map(|n| n as f64)
}

/// The flat map of `segments` (the snapshot's list); empty (`[0]`) when none is readable.
pub fn flat(segments: &Value) -> Vec<f64> {
    let mut rows: Vec<(f64, Vec<f64>)> = Vec::new();
    for seg in segments.as_array().map_or(&[][..], Vec::as_slice) {
        let (Some(address), Some(total)) = (number(seg, "address"), number(seg, "total_size")) else { continue };
        let mut blocks: Vec<[f64; 4]> = seg
            .get("blocks")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|b| {
                let (address, size) = (number(b, "address")?, number(b, "size")?);
                let state = match b.get("state").and_then(Value::as_str) {
                    Some("active_allocated") => STATE_ALLOCATED,
                    Some("active_pending_free") => STATE_PENDING_FREE,
                    _ => STATE_INACTIVE,
                };
                Some([address, size, number(b, "requested_size").unwrap_or(size), state])
            })
            .collect();
        blocks.sort_by(|a, b| a[0].total_cmp(&b[0]));
        let large = seg.get("segment_type").and_then(Value::as_str) != Some("small");
        let stream = number(seg, "stream").unwrap_or(0.0);
        let mut row = vec![address, total, stream, f64::from(u8::from(large)), KIND_CLASSIC, blocks.len() as f64];
        row.extend(blocks.iter().flatten());
        rows.push((address, row));
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = vec![rows.len() as f64];
    out.extend(rows.into_iter().flat_map(|(_, row)| row));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_become_the_maps_rows_by_address() {
        let segments: Value = serde_json::from_str(
            r#"[{"address": 4194304, "total_size": 2097152, "stream": 0, "segment_type": "small",
                 "blocks": [{"address": 4194816, "size": 1597952, "state": "inactive"},
                            {"address": 4194304, "size": 512, "requested_size": 500, "state": "active_allocated"}]},
                {"address": 1048576, "total_size": 20971520, "stream": 7, "segment_type": "large",
                 "blocks": [{"address": 1048576, "size": 20971520, "state": "active_pending_free"}]},
                {"address": "nope"}]"#,
        )
        .unwrap();
        let f = flat(&segments);
        assert_eq!(f[0], 2.0);
        assert_eq!(&f[1..11], &[1048576.0, 20971520.0, 7.0, 1.0, 0.0, 1.0, 1048576.0, 20971520.0, 20971520.0, 1.0]);
        assert_eq!(&f[11..17], &[4194304.0, 2097152.0, 0.0, 0.0, 0.0, 2.0]);
        assert_eq!(&f[17..21], &[4194304.0, 512.0, 500.0, 0.0], "blocks by address");
        assert_eq!(flat(&Value::Null), [0.0]);
    }
}
