//! RAPIDS RMM's logging CSV (`Thread,Time,Action,Pointer,Size,Stream`, columns found by name),
//! read a line at a time: [`CsvReader`] is fed lines as a file yields them, so a reader of a
//! large or endless file holds one line and the operations, never the text; a caller that
//! takes the operations out after each line ([`CsvReader::take_operations`]) holds only what
//! grows with live allocations, distinct pointers and segments.
//!
//! Invariants: a reader fed a text's lines (as `str::lines` splits them) gives what
//! [`parse_csv`](crate::trace::parse_csv) gives for the text; line numbers are 1-based and
//! count blank lines; past [`TraceLimits`]' bytes or events, or a line past [`LINE_BYTES`],
//! the reader stops with a [`Limit`] error and takes nothing more.

use alloc::string::String;
use alloc::vec::Vec;

use crate::trace::late_frees::LateFrees;
use crate::trace::limits::{Limit, TraceLimits, LINE_BYTES};
use crate::trace::operations::{checked_size, parse_hex, parse_time, Builder, Trace, TraceOp};
use crate::trace::position::Position;
use crate::trace::trace_error::{error, over, TraceError};

/// Where the columns are, from the header.
struct Columns {
    count: usize,
    time: usize,
    action: usize,
    pointer: usize,
    size: usize,
    stream: Option<usize>,
}

/// A CSV trace read a line at a time.
pub struct CsvReader {
    builder: Builder,
    /// Free rows held until the next allocation row, and those that waited.
    late: LateFrees,
    columns: Option<Columns>,
    /// Lines fed so far.
    line: usize,
    /// Bytes fed so far, a line ending counted as one.
    bytes: u64,
    limits: TraceLimits,
}

impl CsvReader {
    /// A reader that keeps `limits`.
    pub fn new(limits: TraceLimits) -> CsvReader {
        CsvReader {
            builder: Builder::within(limits),
            late: LateFrees::default(),
            columns: None,
            line: 0,
            bytes: 0,
            limits,
        }
    }

    /// Feeds `n` blank lines (`\n` alone) at once, as `n` calls of [`CsvReader::line`] with
    /// `""` would: counted as lines and bytes, the limit on bytes met at the same line. A file
    /// of newlines is then read in runs, not a line at a time (a gigabyte of them took 30 s).
    pub fn blank_lines(&mut self, n: usize) -> Result<(), TraceError> {
        let fit = self.limits.bytes.saturating_add(1).saturating_sub(self.bytes);
        if n as u64 > fit {
            // The first line past the limit, as `line` would stop at it.
            let stop = usize::try_from(fit).unwrap_or(usize::MAX).saturating_add(1);
            self.line = self.line.saturating_add(stop);
            self.bytes = self.bytes.saturating_add(stop as u64);
            return Err(over(self.line, Limit::Bytes(self.limits.bytes)));
        }
        self.line += n;
        self.bytes += n as u64;
        Ok(())
    }

    /// Feeds the next line, without its line ending (`\n` or `\r\n`).
    pub fn line(&mut self, line: &str) -> Result<(), TraceError> {
        self.line += 1;
        let n = self.line;
        self.bytes = self.bytes.saturating_add(line.len() as u64 + 1);
        if self.bytes > self.limits.bytes.saturating_add(1) {
            return Err(over(n, Limit::Bytes(self.limits.bytes)));
        }
        if line.len() > LINE_BYTES {
            return Err(over(n, Limit::LineBytes(LINE_BYTES)));
        }
        let line = if n == 1 { line.strip_prefix('\u{feff}').unwrap_or(line) } else { line };
        if line.trim().is_empty() {
            return Ok(());
        }
        let Some(c) = &self.columns else {
            self.columns = Some(header(line, n)?);
            return Ok(());
        };
        let b = &mut self.builder;
        b.event(n)?;
        b.at = Position::Line(u32::try_from(n).unwrap_or(u32::MAX));
        let fields: Vec<&str> = line.splitn(c.count + 1, ',').collect();
        if fields.len() < c.count {
            return Err(error(n, alloc::format!("expected {} fields, found {}", c.count, fields.len())));
        }
        let time =
            parse_time(fields[c.time]).ok_or_else(|| error(n, alloc::format!("bad time '{}'", fields[c.time])))?;
        let ptr =
            parse_hex(fields[c.pointer]).ok_or_else(|| error(n, alloc::format!("bad pointer '{}'", fields[c.pointer])));
        let size =
            fields[c.size].trim().parse::<u64>().map_err(|_| error(n, alloc::format!("bad size '{}'", fields[c.size])));
        let stream = match c.stream {
            Some(s) => parse_hex(fields[s]).ok_or_else(|| error(n, alloc::format!("bad stream '{}'", fields[s])))?,
            None => 0,
        };
        match fields[c.action].trim() {
            "allocate" => {
                let (ptr, size) = (ptr?, checked_size(size?).map_err(|m| error(n, m))?);
                self.late.before_alloc(b, time).map_err(|m| error(n, m))?;
                b.alloc(ptr, size, stream, time).map_err(|m| error(n, m))
            }
            // Emitted at the next allocation row, when its time tells whether it waited.
            "free" => self.late.free(b, ptr?, time).map_err(|m| error(n, m)),
            "allocate failure" => {
                b.failure();
                Ok(())
            }
            other => {
                Err(error(n, alloc::format!("unknown action '{other}' (expected allocate, free or allocate failure)")))
            }
        }
    }

    /// Moves the operations the lines fed so far made into `each` (see
    /// [`Trace::take_operations`]): called after each line, the reader holds none but the
    /// frees since the last allocation row (`late_frees.rs`: the next allocation's time says
    /// whether they waited), and the trace [`CsvReader::finish`] gives counts them in
    /// `ops_taken` instead of holding them, holding only the frees after the last allocation.
    pub fn take_operations(&mut self, each: impl FnMut(TraceOp, u64, Position)) {
        self.builder.take_operations(each);
    }

    /// The trace of the lines fed; an error if none held a header.
    pub fn finish(mut self) -> Result<Trace, TraceError> {
        if self.columns.is_none() {
            return Err(error(0, "the text is empty"));
        }
        self.late.finish(&mut self.builder).map_err(|m| error(self.line, m))?;
        Ok(self.builder.finish())
    }
}

/// The columns a header line names (`n`: its line).
fn header(line: &str, n: usize) -> Result<Columns, TraceError> {
    let names: Vec<&str> = line.split(',').map(str::trim).collect();
    let find = |name: &str| names.iter().position(|c| c.eq_ignore_ascii_case(name));
    let column = |name: &str| {
        find(name).ok_or_else(|| {
            let message: String =
                alloc::format!("header lacks the '{name}' column (expected Thread,Time,Action,Pointer,Size,Stream)");
            error(n, message)
        })
    };
    Ok(Columns {
        count: names.len(),
        time: column("Time")?,
        action: column("Action")?,
        pointer: column("Pointer")?,
        size: column("Size")?,
        stream: find("Stream"),
    })
}

/// A CSV text read within `limits`.
pub(crate) fn parse_csv_within(text: &str, limits: &TraceLimits) -> Result<Trace, TraceError> {
    if text.len() as u64 > limits.bytes {
        return Err(over(0, Limit::Bytes(limits.bytes)));
    }
    let mut reader = CsvReader::new(*limits);
    for line in text.lines() {
        reader.line(line)?;
    }
    reader.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::trace::TraceErrorKind;
    use alloc::string::ToString;

    /// Blank lines fed at once are counted as those fed one by one: the same line numbers
    /// after them, and the limit on bytes met at the same line with the same error.
    #[test]
    fn blank_lines_at_once_count_as_one_by_one() {
        let rows = ["Thread,Time,Action,Pointer,Size,Stream", "0,1,allocate,0x10,512,0x0"];
        for (limit, blank) in [(10_000u64, 5usize), (80, 15), (80, 16), (80, 17), (80, 30)] {
            let limits = TraceLimits { bytes: limit, ..TraceLimits::DEFAULT };
            let (mut one, mut run) = (CsvReader::new(limits), CsvReader::new(limits));
            let (mut a, mut b) = (Ok(()), Ok(()));
            for r in rows {
                a = a.and_then(|()| one.line(r));
                b = b.and_then(|()| run.line(r));
            }
            for _ in 0..blank {
                a = a.and_then(|()| one.line(""));
            }
            b = b.and_then(|()| run.blank_lines(blank));
            let tail = "0,2,free,0x10,512,0x0";
            a = a.and_then(|()| one.line(tail));
            b = b.and_then(|()| run.line(tail));
            assert_eq!(alloc::format!("{a:?}"), alloc::format!("{b:?}"), "limit {limit}, {blank} blank lines");
            assert_eq!((one.line, one.bytes), (run.line, run.bytes), "limit {limit}, {blank} blank lines");
        }
    }

    #[test]
    fn each_limit_stops_the_reader_and_names_itself() {
        let csv = "Time,Action,Pointer,Size\n1,allocate,0x10,512\n2,free,0x10,512\n3,allocate,0x10,512\n";
        let limits = |bytes, events| TraceLimits { bytes, depth: 64, events };
        assert_eq!(parse_csv_within(csv, &limits(1 << 20, 3)).unwrap().ops.len(), 3);
        let e = parse_csv_within(csv, &limits(1 << 20, 2)).unwrap_err();
        assert_eq!((&e.kind, e.line), (&TraceErrorKind::Limit(Limit::Events(2)), 4));
        assert_eq!(e.to_string(), "line 4: the trace holds more than 2 rows or events (the limit on events)");
        let e = parse_csv_within(csv, &limits(csv.len() as u64 - 1, 10)).unwrap_err();
        assert_eq!(e.kind, TraceErrorKind::Limit(Limit::Bytes(csv.len() as u64 - 1)));
        // Fed a line at a time, the byte count is the reader's own.
        let mut r = CsvReader::new(limits(30, 10));
        r.line("Time,Action,Pointer,Size").unwrap();
        assert_eq!(r.line("1,allocate,0x10,512").unwrap_err().kind, TraceErrorKind::Limit(Limit::Bytes(30)));
        let long = alloc::format!("Time,Action,Pointer,Size{}", " ".repeat(LINE_BYTES));
        let e = CsvReader::new(TraceLimits::DEFAULT).line(&long).unwrap_err();
        assert_eq!(e.kind, TraceErrorKind::Limit(Limit::LineBytes(LINE_BYTES)));
    }

    /// Operations taken out after each line are those a reader that holds them gives, with
    /// their times and lines, and the trace left counts them without holding them.
    #[test]
    fn operations_taken_line_by_line_are_the_held_ones() {
        let csv = "Time,Action,Pointer,Size\n1,allocate,0x10,512\n\n2,allocate,0x10,1024\n3,free,0x10,0\n";
        let held = parse_csv_within(csv, &TraceLimits::DEFAULT).unwrap();
        let mut r = CsvReader::new(TraceLimits::DEFAULT);
        let mut taken = Vec::new();
        for line in csv.lines() {
            r.line(line).unwrap();
            r.take_operations(|op, t, p| taken.push((op, t, p)));
        }
        let mut streamed = r.finish().unwrap();
        // The free of the last line is held until the rows end (late_frees.rs).
        streamed.take_operations(|op, t, p| taken.push((op, t, p)));
        let want: Vec<_> = (0..held.ops.len()).map(|i| (held.ops[i], held.times_us[i], held.positions[i])).collect();
        assert_eq!(taken, want);
        assert_eq!(want.len(), 4, "an implicit free, then the allocation, then the free");
        assert!(streamed.ops.is_empty() && streamed.times_us.is_empty() && streamed.positions.is_empty());
        assert_eq!((streamed.op_count(), streamed.ops_taken, held.op_count()), (4, 4, 4));
        assert_eq!((&streamed.report, streamed.slots), (&held.report, held.slots));
        assert_eq!(streamed.segment_placements, held.segment_placements);
        assert_eq!(streamed.describe(), held.describe());
    }
}
