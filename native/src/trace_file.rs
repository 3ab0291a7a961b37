//! Reading a trace file: RMM CSV or snapshot JSON, plain or gzipped (gzip is recognised by its
//! magic bytes, whatever the file is called), parsed by the core's own reader.
//!
//! Invariant: every failure is a message that names the file and what is wrong with it.

use std::io::Read;

use cachalot_core::{parse_trace, Trace};

/// The text of a trace file's bytes, gunzipped if they are gzip; `what` names the file in
/// messages.
pub fn decode(bytes: &[u8], what: &str) -> Result<String, String> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .read_to_string(&mut text)
            .map_err(|e| format!("{what}: cannot decompress: {e}"))?;
        Ok(text)
    } else {
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what}: not UTF-8 text (nor gzip)"))
    }
}

/// Reads and parses the trace at `path`.
pub fn read(path: &str) -> Result<Trace, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    parse_trace(&decode(&bytes, path)?).map_err(|e| format!("{path}: {e}"))
}
