//! What a trace file's bytes are, told by their first bytes whatever the file is called, and
//! the bytes of a whole (already decompressed) file opened into a snapshot value or CSV text:
//! the one decision the CLI (which streams) and the browser (which holds the file) both make.
//! A pickle starts with the PROTO opcode of protocol 2 to 5 (what `pickle.dump` writes, as
//! `torch.cuda.memory._dump_snapshot` does); JSON with `{` or `[` after a byte-order mark and
//! white space; anything else is read as an RMM CSV. Gzip is told by its magic bytes, but
//! decompressing is the front-end's (flate2 in the CLI, `DecompressionStream` in the page).
//!
//! Invariants: [`open_bytes`] refuses bytes past `limits.bytes` before looking at them; a
//! pickle is read by [`crate::trace::pickle`] within the limits and a JSON text is checked for
//! nesting before parsing, so either becomes a value only within the limits.

use alloc::format;

use crate::trace::limits::{nests_deeper, Limit, TraceLimits};
use crate::trace::pickle::{self, PickleError};
use crate::trace::trace_error::{error, over, TraceError};

/// The bytes that start a gzip member.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A byte-order mark, as some editors write.
const BOM: &[u8] = "\u{feff}".as_bytes();

/// What a trace file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A pickled PyTorch snapshot.
    Pickle,
    /// A PyTorch snapshot as JSON.
    Json,
    /// An RMM CSV (or text that is no trace: its reader says so).
    Csv,
}

/// True when `bytes` start as a pickle of protocol 2 or later does (the PROTO opcode).
pub fn is_pickle(bytes: &[u8]) -> bool {
    bytes.len() >= 2 && bytes[0] == 0x80 && (2..=5).contains(&bytes[1])
}

/// True when `bytes` start as gzip does.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// The format of a file that starts with `head`, or `None` while `head` cannot tell yet
/// (nothing, the pickle's first byte, part of a byte-order mark, or white space alone): a
/// streaming reader reads one more byte and asks again; at the end of the input, `Csv`.
pub fn format_of(head: &[u8]) -> Option<Format> {
    let body = head.strip_prefix(BOM).unwrap_or(head);
    if head == [0x80] || (BOM.starts_with(head) && head.len() < BOM.len()) {
        return None;
    }
    if is_pickle(head) {
        return Some(Format::Pickle);
    }
    match body.iter().copied().find(|b| !b.is_ascii_whitespace()) {
        None => None,
        Some(b'{' | b'[') => Some(Format::Json),
        Some(_) => Some(Format::Csv),
    }
}

/// A whole file's bytes, opened.
pub enum Opened<'a> {
    /// A snapshot (pickle or JSON) as its JSON value.
    Snapshot(serde_json::Value),
    /// CSV text (without a byte-order mark).
    Csv(&'a str),
}

/// Opens a whole decompressed file within `limits`: a pickle or JSON snapshot becomes its JSON
/// value, anything else CSV text. Errors: past the limit on bytes (checked first), past the
/// nesting limit, a pickle this reader refuses, JSON that does not parse, text not UTF-8.
pub fn open_bytes<'a>(bytes: &'a [u8], limits: &TraceLimits) -> Result<Opened<'a>, TraceError> {
    if bytes.len() as u64 > limits.bytes {
        return Err(over(0, Limit::Bytes(limits.bytes)));
    }
    match format_of(bytes).unwrap_or(Format::Csv) {
        Format::Pickle => pickle::read(bytes, limits).map(Opened::Snapshot).map_err(|e| match e {
            PickleError::Unreadable(m) => error(0, format!("not a readable pickle: {m}")),
            PickleError::Limit(l) => over(0, l),
        }),
        format => {
            let text = core::str::from_utf8(bytes)
                .map_err(|e| error(0, format!("not UTF-8 text (nor gzip, nor a pickle): {e}")))?;
            let text = text.strip_prefix('\u{feff}').unwrap_or(text);
            if format == Format::Csv {
                return Ok(Opened::Csv(text));
            }
            if nests_deeper(text, limits.depth) {
                return Err(over(0, Limit::Depth(limits.depth)));
            }
            serde_json::from_str(text).map(Opened::Snapshot).map_err(|e| error(e.line(), format!("{e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_the_format() {
        assert_eq!(format_of(b""), None);
        assert_eq!(format_of(b"\x80"), None);
        assert_eq!(format_of(b"\x80\x04"), Some(Format::Pickle));
        assert_eq!(format_of(b"\x80\x09"), Some(Format::Csv));
        assert_eq!(format_of(&BOM[..2]), None);
        assert_eq!(format_of("\u{feff} \n".as_bytes()), None);
        assert_eq!(format_of("\u{feff} {".as_bytes()), Some(Format::Json));
        assert_eq!(format_of(b"  [1]"), Some(Format::Json));
        assert_eq!(format_of(b"Time,Action"), Some(Format::Csv));
        assert!(is_gzip(&[0x1f, 0x8b, 8]) && !is_gzip(b"\x1f"));
    }

    #[test]
    fn whole_files_open_within_the_limits() {
        let limits = TraceLimits { bytes: 64, depth: 3, events: 10 };
        assert!(matches!(open_bytes(b"Time,Action\n", &limits), Ok(Opened::Csv("Time,Action\n"))));
        assert!(matches!(open_bytes(br#"{"a": [1]}"#, &limits), Ok(Opened::Snapshot(_))));
        // A pickle of {"a": [1]}, as protocol 2 writes it.
        let pickled = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01]q\x02K\x01as.";
        match open_bytes(pickled, &limits) {
            Ok(Opened::Snapshot(v)) => assert_eq!(v["a"][0], 1),
            _ => panic!("the pickle did not open"),
        }
        let e = |b: &[u8]| open_bytes(b, &limits).err().map(|e| alloc::string::ToString::to_string(&e));
        assert_eq!(e(&[b' '; 65]).unwrap(), "the trace holds more than 64 bytes of text (the limit on bytes read)");
        assert!(e(b"[[[[1]]]]").unwrap().contains("nested deeper than 3"));
        assert!(e(b"\x80\x02cos\nsystem\n.").unwrap().contains("not a readable pickle"));
        assert!(e(b"\xff\xfe").unwrap().contains("not UTF-8 text"));
    }
}
