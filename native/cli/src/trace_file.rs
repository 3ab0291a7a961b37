//! Reading a trace file: RMM CSV, or a PyTorch snapshot as JSON or as the pickle
//! `torch.cuda.memory._dump_snapshot` writes, plain or gzipped (gzip and pickle are recognised
//! by their first bytes, whatever the file is called), parsed by the core's own reader; of a
//! snapshot of several GPUs, the one chosen.
//!
//! Invariants: every failure is a message that names the file and what is wrong with it; a
//! snapshot is read by the core's one snapshot reader whichever its encoding, so a pickle and
//! the same data as JSON give the same trace.

use std::io::Read;

use cachalot_core::{parse_device_trace, parse_snapshot_value, Trace, TraceError, TraceErrorKind};

use crate::pickle_snapshot;

/// What a trace was read from, kept for what the trace itself does not hold (a CSV row's
/// pointer, a snapshot event's frames).
pub enum Input {
    /// An RMM CSV's text.
    Csv(String),
    /// A snapshot, as a JSON value (a pickle converted).
    Snapshot(serde_json::Value),
}

/// A trace and what it was read from.
pub struct Loaded {
    /// The parsed trace.
    pub trace: Trace,
    /// Its input.
    pub input: Input,
}

/// Parses a trace file's `bytes` (gzip, pickle, JSON or CSV); `what` names it in messages.
pub fn parse(bytes: &[u8], what: &str, device: Option<usize>) -> Result<Loaded, String> {
    let raw = gunzip(bytes, what)?;
    let named = |e: TraceError| match e.kind {
        TraceErrorKind::DeviceNotChosen { .. } => format!("{what}: {e}: choose one with --device N"),
        TraceErrorKind::NoSuchDevice | TraceErrorKind::Invalid | TraceErrorKind::Limit(_) => format!("{what}: {e}"),
    };
    let snapshot = if pickle_snapshot::is_pickle(&raw) {
        pickle_snapshot::to_json(&raw, what)?
    } else {
        let text = String::from_utf8(raw).map_err(|_| not_text(bytes, what))?;
        let body = text.trim_start_matches('\u{feff}').trim_start();
        if !body.starts_with(['{', '[']) {
            let trace = parse_device_trace(&text, device).map_err(named)?;
            return Ok(Loaded { trace, input: Input::Csv(text) });
        }
        serde_json::from_str(body).map_err(|e| format!("{what}: invalid trace, line {}: {e}", e.line()))?
    };
    let trace = parse_snapshot_value(&snapshot, device).map_err(named)?;
    Ok(Loaded { trace, input: Input::Snapshot(snapshot) })
}

fn not_text(bytes: &[u8], what: &str) -> String {
    if bytes.starts_with(&GZIP_MAGIC) {
        format!("{what}: not UTF-8 text once decompressed (nor a pickle)")
    } else {
        format!("{what}: not UTF-8 text (nor gzip, nor a pickle)")
    }
}

/// A trace file's bytes, gunzipped if they are gzip; `what` names the file in messages.
pub fn gunzip(bytes: &[u8], what: &str) -> Result<Vec<u8>, String> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(bytes.to_vec());
    }
    let mut raw = Vec::new();
    if let Err(e) = flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut raw) {
        return Err(match trailing_bytes(bytes) {
            Some(n) => format!(
                "{what}: cannot decompress: {n} bytes after the end of the gzip data are not gzip (something appended to the file?)"
            ),
            None => format!("{what}: cannot decompress: {e}"),
        });
    }
    Ok(raw)
}

/// The text of a trace file's bytes, gunzipped if they are gzip; `what` names the file in
/// messages.
pub fn decode(bytes: &[u8], what: &str) -> Result<String, String> {
    let raw = gunzip(bytes, what)?;
    String::from_utf8(raw).map_err(|_| {
        if bytes.starts_with(&GZIP_MAGIC) {
            format!("{what}: not UTF-8 text once decompressed")
        } else {
            format!("{what}: not UTF-8 text (nor gzip)")
        }
    })
}

/// The bytes that start a gzip member.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Bytes left after the last whole gzip member of `bytes` when they do not start another
/// member: a file with data appended after its gzip stream. `None` when a member itself is
/// broken (truncated or corrupt: the decoder's own error says so) or nothing follows.
fn trailing_bytes(bytes: &[u8]) -> Option<usize> {
    let mut rest = bytes;
    while rest.starts_with(&GZIP_MAGIC) {
        let mut member = flate2::bufread::GzDecoder::new(rest);
        member.read_to_end(&mut Vec::new()).ok()?;
        rest = member.into_inner();
    }
    Some(rest.len()).filter(|&n| n > 0)
}

/// Reads and parses the trace at `path`: of a snapshot of several GPUs, `device`'s events,
/// which must then be chosen (a replay simulates one GPU).
pub fn read(path: &str, device: Option<usize>) -> Result<Trace, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    Ok(parse(&bytes, path, device)?.trace)
}

/// Takes `--device N` (or `--device=N`) out of a program's arguments: the GPU whose events
/// to read from a snapshot of several (`None` when the flag is absent). Given twice, it is
/// refused rather than one of the two silently chosen.
pub fn take_device_flag(args: &mut Vec<String>) -> Result<Option<usize>, String> {
    let mut device = None;
    let mut i = 0;
    while i < args.len() {
        let (value, taken) = if args[i] == "--device" {
            (args.get(i + 1).cloned().ok_or("--device needs a device number")?, 2)
        } else if let Some(v) = args[i].strip_prefix("--device=") {
            (v.to_string(), 1)
        } else {
            i += 1;
            continue;
        };
        let n = value.parse().map_err(|_| format!("--device needs a device number, got '{value}'"))?;
        if device.replace(n).is_some() {
            return Err("--device is given twice".into());
        }
        args.drain(i..i + taken);
    }
    Ok(device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(text: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(text).unwrap();
        e.finish().unwrap()
    }

    /// Several members are one stream (as `gzip -d` reads them); only bytes that start no
    /// member are called appended, and a broken member or text that is not UTF-8 is named as
    /// such (found by review: both read as "something appended").
    #[test]
    fn gzip_members_appended_bytes_and_bad_text_are_told_apart() {
        let header = gzip(b"Time,Action,Pointer,Size\n");
        let row = gzip(b"0,allocate,0x10,4096\n");
        let joined = [header.clone(), row.clone()].concat();
        assert_eq!(decode(&joined, "t").unwrap(), "Time,Action,Pointer,Size\n0,allocate,0x10,4096\n");
        let appended = [joined.clone(), b"junk".to_vec()].concat();
        assert!(decode(&appended, "t").unwrap_err().contains("4 bytes after the end of the gzip data are not gzip"));
        let truncated = [header.clone(), row[..row.len() - 6].to_vec()].concat();
        let e = decode(&truncated, "t").unwrap_err();
        assert!(e.starts_with("t: cannot decompress: ") && !e.contains("not gzip"), "{e}");
        let not_utf8 = [header, gzip(b"0,allocate,0x10,\xff\xfe\n")].concat();
        assert_eq!(decode(&not_utf8, "t").unwrap_err(), "t: not UTF-8 text once decompressed");
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_device_flag_is_taken_out_wherever_it_stands() {
        let mut a = args(&["t.json", "--device", "1", "4"]);
        assert_eq!((take_device_flag(&mut a), a), (Ok(Some(1)), args(&["t.json", "4"])));
        let mut a = args(&["t.json"]);
        assert_eq!(take_device_flag(&mut a), Ok(None));
        assert_eq!(take_device_flag(&mut args(&["--device"])), Err("--device needs a device number".into()));
        assert_eq!(
            take_device_flag(&mut args(&["--device", "x"])),
            Err("--device needs a device number, got 'x'".into())
        );
        let mut a = args(&["--device=2", "t.json"]);
        assert_eq!((take_device_flag(&mut a), a), (Ok(Some(2)), args(&["t.json"])));
        let twice = take_device_flag(&mut args(&["t.json", "--device", "0", "--device=1"]));
        assert_eq!(twice, Err("--device is given twice".into()));
    }

    #[test]
    fn a_snapshot_of_two_gpus_needs_a_device() {
        let path =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/recorded/two_gpus.policy_pytorch.snapshot.json.gz");
        let e = read(path, None).unwrap_err();
        assert!(e.contains("devices 0 and 1") && e.ends_with("choose one with --device N"), "{e}");
        let (zero, one) = (read(path, Some(0)).unwrap(), read(path, Some(1)).unwrap());
        assert_ne!(zero.ops.len(), 0);
        assert_ne!(zero.ops, one.ops);
    }
}
