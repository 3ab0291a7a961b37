//! Reading a trace file: RMM CSV or snapshot JSON, plain or gzipped (gzip is recognised by its
//! magic bytes, whatever the file is called), parsed by the core's own reader; of a snapshot
//! of several GPUs, the one chosen.
//!
//! Invariant: every failure is a message that names the file and what is wrong with it.

use std::io::Read;

use cachalot_core::{parse_device_trace, Trace, TraceErrorKind};

/// The text of a trace file's bytes, gunzipped if they are gzip; `what` names the file in
/// messages.
pub fn decode(bytes: &[u8], what: &str) -> Result<String, String> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut text = String::new();
        if let Err(e) = flate2::read::MultiGzDecoder::new(bytes).read_to_string(&mut text) {
            return Err(match trailing_bytes(bytes) {
                Some(n) => format!(
                    "{what}: cannot decompress: {n} bytes after the end of the gzip data are not gzip (something appended to the file?)"
                ),
                None => format!("{what}: cannot decompress: {e}"),
            });
        }
        Ok(text)
    } else {
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what}: not UTF-8 text (nor gzip)"))
    }
}

/// Bytes left after the first gzip member of `bytes`, when that member decodes whole and
/// something follows it: a file with data appended after its gzip stream.
fn trailing_bytes(bytes: &[u8]) -> Option<usize> {
    let mut first = flate2::bufread::GzDecoder::new(bytes);
    first.read_to_end(&mut Vec::new()).ok()?;
    Some(first.into_inner().len()).filter(|&n| n > 0)
}

/// Reads and parses the trace at `path`: of a snapshot of several GPUs, `device`'s events,
/// which must then be chosen (a replay simulates one GPU).
pub fn read(path: &str, device: Option<usize>) -> Result<Trace, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    parse_device_trace(&decode(&bytes, path)?, device).map_err(|e| match e.kind {
        TraceErrorKind::DeviceNotChosen { .. } => format!("{path}: {e}: choose one with --device N"),
        TraceErrorKind::NoSuchDevice | TraceErrorKind::Invalid => format!("{path}: {e}"),
    })
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
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/recorded/two_gpus.policy_pytorch.snapshot.json.gz");
        let e = read(path, None).unwrap_err();
        assert!(e.contains("devices 0 and 1") && e.ends_with("choose one with --device N"), "{e}");
        let (zero, one) = (read(path, Some(0)).unwrap(), read(path, Some(1)).unwrap());
        assert_ne!(zero.ops.len(), 0);
        assert_ne!(zero.ops, one.ops);
    }
}
