//! Reading a trace file: RMM CSV, or a PyTorch snapshot as JSON or as the pickle
//! `torch.cuda.memory._dump_snapshot` writes, plain or gzipped (gzip and pickle are recognised
//! by their first bytes, whatever the file is called), parsed by the core's own reader; of a
//! snapshot of several GPUs, the one chosen. Bytes are read as they come, and nothing that grows
//! with the file is held: a CSV is fed to the core a line at a time (with [`parse_spooled`],
//! its operations go to a spool as they are made); a snapshot's events are handed on as they
//! are parsed (JSON: the core's `streamed_snapshot`; a pickle, read as its machine asks for the
//! bytes: `pickle_events`) into an [`EventSpool`], a temporary file, and the chosen device's
//! are read back from it into operations. Stack frames are interned in a [`FrameTable`] as they
//! are parsed: each distinct frame and stack is kept once.
//!
//! Invariants: every failure is a message that names the file and what is wrong with it; a
//! limit met names itself and the flag that raises it (`--max-bytes`, `--max-depth`,
//! `--max-events`), and nothing past it is read; a snapshot is read by the core's one
//! snapshot reader whichever its encoding, so a pickle and the same data as JSON give the
//! same trace.

use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::PathBuf;

use cachalot_core::trace::streamed_snapshot::{self, Stop};
use cachalot_core::trace::{
    choose_list, format_of, is_gzip, snapshot_events, CsvReader, Format, FrameBounds, FrameTable, Limit, SnapshotEvent,
    SnapshotReader, TraceLimits, LINE_BYTES,
};
use cachalot_core::{Trace, TraceError, TraceErrorKind};

use crate::event_spool::{EventSpool, EventSpoolWriter};
use crate::gzip_members::Members;
use crate::nesting_guard::{too_deep, NestingGuard};
use crate::op_spool::{Spool, SpoolWriter};
use crate::pickle_snapshot;

/// What a trace was read from, kept for what the trace itself does not hold (a CSV row's
/// pointer, a snapshot event's frames).
pub enum Input {
    /// An RMM CSV, not held: where to read a row of it again.
    Csv(Source),
    /// A snapshot, JSON or pickle, not held: its history kept in a temporary file.
    Snapshot {
        /// Its events, each device's, each with its stack id in `frames`.
        events: EventSpool,
        /// Its stack frames, each stack whole ([`FrameBounds::within`] the limit on bytes).
        frames: FrameTable,
        /// The device whose events the trace holds (`None`: no device has allocations).
        device: Option<usize>,
    },
}

/// Where a trace's bytes can be read again.
#[derive(Clone)]
pub enum Source {
    /// A file.
    File(PathBuf),
    /// Bytes built into the program.
    Static(&'static [u8]),
    /// Read once (stdin, or bytes the caller held): not again.
    Gone,
}

impl Input {
    /// Event `i` of the device a snapshot's trace was read from.
    pub fn snapshot_event(&self, i: u32) -> Option<SnapshotEvent> {
        let Input::Snapshot { events, device: Some(d), .. } = self else { return None };
        events.get(*d, i)
    }

    /// The header and line `n` (1-based) of a CSV read from a source that can be read again.
    pub fn csv_row(&self, n: u32) -> Option<(String, String)> {
        let Input::Csv(source) = self else { return None };
        let bytes: Box<dyn Read> = match source {
            Source::File(p) => Box::new(std::fs::File::open(p).ok()?),
            Source::Static(b) => Box::new(*b),
            Source::Gone => return None,
        };
        let mut text = decompressed(bytes).ok()?;
        let (mut header, mut line, mut buf) = (None, 0u32, Vec::new());
        while next_line(&mut text, &mut buf).ok()? {
            line += 1;
            let l = String::from_utf8(std::mem::take(&mut buf)).ok()?;
            if header.is_none() && !l.trim().is_empty() {
                header = Some(l.clone());
            }
            if line == n {
                return Some((header?, l));
            }
        }
        None
    }
}

/// A trace and what it was read from.
pub struct Loaded {
    /// The parsed trace.
    pub trace: Trace,
    /// Its input.
    pub input: Input,
}

/// The flag that raises `limit`, as the tool's messages say it.
fn raise(limit: &Limit) -> &'static str {
    match limit {
        Limit::Bytes(_) => "; raise the limit with --max-bytes SIZE",
        Limit::Depth(_) => "; raise the limit with --max-depth N",
        Limit::Events(_) => "; raise the limit with --max-events N",
        Limit::LineBytes(_) => "",
    }
}

/// Parses a trace file's `bytes` (gzip, pickle, JSON or CSV) within the default limits;
/// `what` names it in messages.
pub fn parse(bytes: &[u8], what: &str, device: Option<usize>) -> Result<Loaded, String> {
    parse_from(bytes, what, device, &TraceLimits::DEFAULT, Source::Gone)
}

/// Reads at most `left` bytes, then fails with [`OverBytes`] if more follow.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min(usize::try_from(self.left.saturating_add(1)).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n as u64 > self.left {
            return Err(io::Error::other(OverBytesError));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Why reading stopped when it was the limit on bytes, not the input's own error.
#[derive(Debug)]
struct OverBytesError;
impl std::fmt::Display for OverBytesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("over the limit on bytes")
    }
}
impl std::error::Error for OverBytesError {}

fn over_bytes(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|e| e.is::<OverBytesError>())
}

/// The bytes of `input`, gunzipped if they start as gzip does.
fn decompressed<'a>(input: impl Read + 'a) -> io::Result<Box<dyn BufRead + 'a>> {
    let mut input = BufReader::with_capacity(1 << 16, input);
    let mut magic = Vec::new();
    (&mut input).take(2).read_to_end(&mut magic)?;
    let input = Cursor::new(magic.clone()).chain(input);
    Ok(if is_gzip(&magic) {
        Box::new(BufReader::with_capacity(1 << 16, Members::new(BufReader::new(input))))
    } else {
        Box::new(BufReader::new(input))
    })
}

/// Reads the next line (without `\n` or `\r\n`) into `buf`; `false` at the end of the input.
/// A line past [`LINE_BYTES`] stops with what was read of it: the caller sees its length.
fn next_line(r: &mut dyn BufRead, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    let mut any = false;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        any = true;
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                buf.extend_from_slice(&chunk[..i]);
                r.consume(i + 1);
                break;
            }
            None => {
                let n = chunk.len();
                buf.extend_from_slice(chunk);
                r.consume(n);
                if buf.len() > LINE_BYTES {
                    return Ok(true);
                }
            }
        }
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(any)
}

/// Consumes the `\n` bytes that come next, each a blank line, and says how many.
fn newlines_ahead(r: &mut impl BufRead) -> io::Result<usize> {
    let mut count = 0;
    loop {
        let chunk = r.fill_buf()?;
        let n = chunk.iter().take_while(|&&b| b == b'\n').count();
        let whole = n == chunk.len() && n > 0;
        r.consume(n);
        count += n;
        if !whole {
            return Ok(count);
        }
    }
}

/// Parses a trace read from `input` (gzip, pickle, JSON or CSV) within `limits`; `what`
/// names it in messages, `source` is where a CSV row can be read again.
pub fn parse_from(
    input: impl Read,
    what: &str,
    device: Option<usize>,
    limits: &TraceLimits,
    source: Source,
) -> Result<Loaded, String> {
    parse_into(input, what, device, limits, source, None)
}

/// Parses a trace as [`parse_from`] does, its operations written to a [`Spool`] instead of
/// held: a CSV's as each line is read, a snapshot's once it is read (the trace returned
/// holds none of them and counts them in `ops_taken`).
pub fn parse_spooled(
    input: impl Read,
    what: &str,
    device: Option<usize>,
    limits: &TraceLimits,
    source: Source,
) -> Result<(Loaded, Spool), String> {
    let mut spool = SpoolWriter::new();
    let mut loaded = parse_into(input, what, device, limits, source, Some(&mut spool))?;
    loaded.trace.take_operations(|op, t, p| spool.push(op, t, p));
    let spool = spool.finish().map_err(|e| {
        let dir = std::env::temp_dir();
        format!("{what}: cannot keep its operations in a temporary file in {}: {e}", dir.display())
    })?;
    Ok((loaded, spool))
}

/// [`parse_from`], a CSV's operations moved to `spool` line by line when one is given.
fn parse_into(
    input: impl Read,
    what: &str,
    device: Option<usize>,
    limits: &TraceLimits,
    source: Source,
    mut spool: Option<&mut SpoolWriter>,
) -> Result<Loaded, String> {
    let named = |e: TraceError| match &e.kind {
        TraceErrorKind::DeviceNotChosen { .. } => format!("{what}: {e}: choose one with --device N"),
        TraceErrorKind::Limit(l) => format!("{what}: {e}{}", raise(l)),
        TraceErrorKind::NoSuchDevice | TraceErrorKind::Invalid => format!("{what}: {e}"),
    };
    let io_error = |e: io::Error, gzip: bool| {
        if over_bytes(&e) {
            named(TraceError::limit(0, Limit::Bytes(limits.bytes)))
        } else if gzip {
            format!("{what}: cannot decompress: {e}")
        } else {
            format!("cannot read {what}: {e}")
        }
    };
    // The compressed bytes are capped too: they are never more than what they decompress to
    // by much, and a stream without end (/dev/zero) must end somewhere.
    let mut raw = BufReader::with_capacity(1 << 16, Capped { inner: input, left: limits.bytes });
    let gzip = is_gzip(raw.fill_buf().map_err(|e| io_error(e, false))?);
    let text = decompressed(raw).map_err(|e| io_error(e, false))?;
    let mut text = BufReader::with_capacity(1 << 16, Capped { inner: text, left: limits.bytes });
    // The first bytes tell a pickle, JSON (after a byte-order mark and white space) or CSV:
    // the core's test, which the browser makes too.
    let mut head = Vec::new();
    // Past a byte-order mark's length, only a byte that is not white space can decide: asking
    // at every byte of a run of blank lines read the whole head each time.
    let undecided = |head: &[u8]| {
        let blank = head.len() > "\u{feff}".len() && head.last().is_some_and(u8::is_ascii_whitespace);
        blank || format_of(head).is_none()
    };
    while undecided(&head) && head.len() < LINE_BYTES {
        let chunk = text.fill_buf().map_err(|e| io_error(e, gzip))?;
        let Some(&b) = chunk.first() else { break };
        head.push(b);
        text.consume(1);
    }
    let format = format_of(&head).unwrap_or(Format::Csv);
    let mut all = Cursor::new(head).chain(text);
    let mut frames = FrameTable::new(FrameBounds::within(limits.bytes));
    // A write that fails is kept by the writer and told once the events are read.
    let mut kept = EventSpoolWriter::new();
    let mut keep = |d: usize, e: SnapshotEvent| {
        kept.push(d, e);
        Ok(())
    };
    let lists = if format == Format::Pickle {
        // Read as the machine asks, never held whole; its frames interned as each is set,
        // and its events handed on as they are read (kept from the value if it is laid out
        // otherwise).
        let input = BufReader::with_capacity(1 << 16, all);
        let mut hand_on = |d: usize, e: SnapshotEvent| {
            let _ = keep(d, e);
        };
        let read = pickle_snapshot::read_events_within(input, what, limits, &mut frames, &mut hand_on);
        match read.map_err(|e| e.map_or_else(|message| message, |e| io_error(e, gzip)))? {
            (_, Some(lists)) => lists,
            (snapshot, None) => snapshot_events(&snapshot, &mut keep).map_err(named)?,
        }
    } else if format == Format::Json {
        // Parsed as it is read, the text never held, each event handed on as it is read:
        // from the bracket that opens it (what came before is a byte-order mark and white
        // space), so lines count from there.
        let (head, text) = all.into_inner();
        let open: Vec<u8> = head.into_inner().last().copied().into_iter().collect();
        // serde_json reads a byte at a time: the guard is given whole buffers.
        let guarded = NestingGuard::new(Cursor::new(open).chain(text), limits.depth);
        let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 16, guarded));
        let lists = streamed_snapshot::read_events(&mut de, &mut frames, &mut keep)
            .and_then(|lists| de.end().map(|()| lists).map_err(Stop::Json));
        lists.map_err(|stop| {
            let e = match stop {
                Stop::Trace(e) => return named(e),
                Stop::Json(e) => e,
            };
            if !e.is_io() {
                return json_error(e, what, gzip);
            }
            let e = io::Error::from(e);
            if too_deep(&e) {
                named(TraceError::limit(0, Limit::Depth(limits.depth)))
            } else {
                io_error(e, gzip)
            }
        })?
    } else {
        if device.is_some() {
            let d = device.unwrap_or_default();
            return Err(format!("{what}: device {d} asked for, but an RMM CSV trace records one device"));
        }
        let mut csv = CsvReader::new(*limits);
        let mut buf = Vec::new();
        let mut line = 0usize;
        while next_line(&mut all, &mut buf).map_err(|e| io_error(e, gzip))? {
            line += 1;
            let l = std::str::from_utf8(&buf).map_err(|_| {
                if gzip {
                    format!("{what}: line {line}: not UTF-8 text once decompressed (nor a pickle)")
                } else {
                    format!("{what}: line {line}: not UTF-8 text (nor gzip, nor a pickle)")
                }
            })?;
            csv.line(l).map_err(named)?;
            if let Some(spool) = spool.as_deref_mut() {
                csv.take_operations(|op, t, p| spool.push(op, t, p));
            }
            // The blank lines after it counted in runs, as a file of newlines is mostly.
            let blank = newlines_ahead(&mut all).map_err(|e| io_error(e, gzip))?;
            if blank > 0 {
                line += blank;
                csv.blank_lines(blank).map_err(named)?;
            }
        }
        let trace = csv.finish().map_err(named)?;
        return Ok(Loaded { trace, input: Input::Csv(source) });
    };
    // The second pass: the chosen device's events, from the temporary file, into operations.
    let events = kept.finish().map_err(|e| {
        format!("{what}: cannot keep its events in a temporary file in {}: {e}", std::env::temp_dir().display())
    })?;
    let chosen = choose_list(&lists, device).map_err(named)?;
    let mut reader = SnapshotReader::new(chosen, lists.len(), *limits);
    let read: Vec<usize> = chosen.map_or_else(|| (0..lists.len()).collect(), |d| vec![d]);
    for d in read {
        reader.begin(d, &lists[d]).map_err(named)?;
        events.each(d, |e| {
            reader.event(e).map_err(named)?;
            if let Some(spool) = spool.as_deref_mut() {
                reader.take_operations(|op, t, p| spool.push(op, t, p));
            }
            Ok::<(), String>(())
        })?;
    }
    let trace = reader.finish().map_err(named)?;
    Ok(Loaded { trace, input: Input::Snapshot { events, frames, device: chosen } })
}

/// A JSON snapshot's parse error as the tool says it: bytes that are not UTF-8 are called so,
/// as they were when the text was held whole.
fn json_error(e: serde_json::Error, what: &str, gzip: bool) -> String {
    // serde_json's words for bytes in a string that are not UTF-8.
    if e.to_string().starts_with("invalid unicode code point") {
        return not_text(gzip, what);
    }
    format!("{what}: invalid trace, line {}: {e}", e.line())
}

fn not_text(gzip: bool, what: &str) -> String {
    if gzip {
        format!("{what}: not UTF-8 text once decompressed (nor a pickle)")
    } else {
        format!("{what}: not UTF-8 text (nor gzip, nor a pickle)")
    }
}

/// Reads and parses the trace at `path` within the default limits: of a snapshot of several
/// GPUs, `device`'s events, which must then be chosen (a replay simulates one GPU).
pub fn read(path: &str, device: Option<usize>) -> Result<Trace, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    Ok(parse_from(file, path, device, &TraceLimits::DEFAULT, Source::File(path.into()))?.trace)
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

    fn text_of(bytes: &[u8]) -> Result<usize, String> {
        parse(bytes, "t", None).map(|l| l.trace.ops.len())
    }

    /// Several members are one stream (as `gzip -d` reads them); only bytes that start no
    /// member are called appended, and a broken member or text that is not UTF-8 is named as
    /// such (found by review: both read as "something appended").
    #[test]
    fn gzip_members_appended_bytes_and_bad_text_are_told_apart() {
        let header = gzip(b"Time,Action,Pointer,Size\n");
        let row = gzip(b"0,allocate,0x10,4096\n");
        let joined = [header.clone(), row.clone()].concat();
        assert_eq!(text_of(&joined), Ok(1));
        let appended = [joined.clone(), b"junk".to_vec()].concat();
        assert!(text_of(&appended).unwrap_err().contains("4 bytes after the end of the gzip data are not gzip"));
        let truncated = [header.clone(), row[..row.len() - 6].to_vec()].concat();
        let e = text_of(&truncated).unwrap_err();
        assert!(e.starts_with("t: cannot decompress: ") && !e.contains("not gzip"), "{e}");
        let not_utf8 = [header, gzip(b"0,allocate,0x10,\xff\xfe\n")].concat();
        assert_eq!(text_of(&not_utf8).unwrap_err(), "t: line 2: not UTF-8 text once decompressed (nor a pickle)");
    }

    /// Each limit is met where the bytes are read, before what lies past it is held, and
    /// named with the flag that raises it.
    #[test]
    fn each_limit_names_the_flag_that_raises_it() {
        let limits = TraceLimits { bytes: 64, depth: 4, events: 1 };
        let read = |bytes: &[u8]| parse_from(bytes, "t", None, &limits, Source::Gone).map(|l| l.trace.ops.len());
        let csv = b"Time,Action,Pointer,Size\n1,allocate,0x10,512\n";
        assert_eq!(read(csv), Ok(1));
        let e = read(&[&csv[..], b"2,free,0x10,512\n"].concat()).unwrap_err();
        assert!(
            e.ends_with("more than 1 rows or events (the limit on events); raise the limit with --max-events N"),
            "{e}"
        );
        let e = read(&gzip(&[b'0'; 1000])).unwrap_err();
        assert!(e.contains("more than 64 bytes of text") && e.ends_with("--max-bytes SIZE"), "{e}");
        let e = read(br#"{"device_traces": [[[[[1]]]]]}"#).unwrap_err();
        assert!(e.contains("nested deeper than 4") && e.ends_with("--max-depth N"), "{e}");
        let long = [&b"Time,Action,Pointer,Size"[..], &vec![b' '; LINE_BYTES]].concat();
        let e = parse_from(&long[..], "t", None, &TraceLimits::DEFAULT, Source::Gone).err().unwrap();
        assert!(e.contains("a line longer than 65536 bytes"), "{e}");
        // A JSON snapshot after a byte-order mark and white space is still told from CSV.
        let json = "\u{feff} \n{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 16, \"size\": 512}]]}";
        assert_eq!(text_of(json.as_bytes()), Ok(1));
    }

    /// A JSON snapshot is parsed as it is read, its text never held whole, and says what is
    /// wrong as it did when it was: bytes not UTF-8, the line of a syntax error counted from
    /// the opening bracket, the limit on bytes met mid-stream.
    #[test]
    fn a_streamed_json_snapshot_names_its_faults_as_before() {
        assert_eq!(
            text_of(b"{\"device_traces\": [[{\"action\": \"\xff\"}]]}"),
            Err("t: not UTF-8 text (nor gzip, nor a pickle)".into())
        );
        assert_eq!(
            text_of(&gzip(b"{\"a\": \"\xc3\"}")),
            Err("t: not UTF-8 text once decompressed (nor a pickle)".into())
        );
        let e = text_of("\u{feff}\n\n{\"device_traces\":\n [[}".as_bytes()).unwrap_err();
        assert!(e.starts_with("t: invalid trace, line 2: "), "{e}");
        let limits = TraceLimits { bytes: 32, depth: 64, events: 100 };
        let big = format!("{{\"device_traces\": [[]], \"x\": \"{}\"}}", "y".repeat(100));
        let e = parse_from(big.as_bytes(), "t", None, &limits, Source::Gone).err().unwrap();
        assert!(e.contains("more than 32 bytes of text") && e.ends_with("--max-bytes SIZE"), "{e}");
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
