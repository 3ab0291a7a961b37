//! A trace's operations kept out of memory while it is replayed: written once, as the reader
//! makes them, in a compact encoding to an unnamed temporary file, and read back a piece at a
//! time for each pass. A replay then holds what grows with live blocks (the allocator, the
//! slot table, one piece), not what grows with the file's length.
//!
//! Why a spool and not the file again: each pass reads a few bytes per operation with no
//! gunzip and no text to parse (a 10-million-row CSV is read back in a fraction of a second,
//! against seconds to parse), stdin can be read only once, and a file changed while it is
//! replayed cannot make two passes replay different traces. Where no temporary file can be
//! made the same bytes are kept in memory (3 to 12 bytes an operation, against 40 held as
//! the core's vectors).
//!
//! Encoding, per operation: a tag byte (bits 0-1 the kind: allocation, free, deferred free,
//! completion; bit 2 set when the position is a snapshot event, clear for a CSV line), then
//! LEB128 varints: the slot (a deferred free: slot then lane; a completion: lane), for an
//! allocation its size and stream, then the time and the position, each as the zigzag of its
//! difference from the previous operation's.
//!
//! Invariants: pieces come in the order the operations were written, numbered from 0 without
//! gaps, each of at most [`PIECE`] operations; what is read back equals what was written, by
//! any number of threads at once.

use std::io;

use cachalot_core::{Position, TraceOp};

use crate::temp_store::{TempSink, TempStore};

/// Operations in a piece: enough that a pass's time goes to replaying, small enough (2.6 MB
/// decoded) to stay beside the allocator.
pub const PIECE: usize = 1 << 16;

/// Consecutive operations of a trace, decoded.
#[derive(Default)]
pub struct Piece {
    /// Index of the first one among the trace's operations.
    pub first: usize,
    /// The operations.
    pub ops: Vec<TraceOp>,
    /// Each one's time, in microseconds.
    pub times_us: Vec<u64>,
    /// Each one's place in the input.
    pub positions: Vec<Position>,
}

impl Piece {
    fn clear(&mut self, first: usize) {
        self.first = first;
        self.ops.clear();
        self.times_us.clear();
        self.positions.clear();
    }
}

/// A trace's operations, written; read them back with [`Spool::pieces`].
pub struct Spool {
    store: TempStore,
    count: usize,
    bytes: u64,
    peak_requested: u64,
    first_time_us: Option<u64>,
}

/// Writes a spool, an operation at a time.
pub struct SpoolWriter {
    sink: TempSink,
    count: usize,
    bytes: u64,
    previous_time: u64,
    previous_position: u32,
    first_time_us: Option<u64>,
    /// Requested bytes of each slot's live allocation, for the peak.
    size_of: Vec<u64>,
    live: u128,
    peak: u128,
    /// The first write that failed; later writes are skipped and `finish` returns it.
    error: Option<io::Error>,
    buf: Vec<u8>,
}

impl Default for SpoolWriter {
    fn default() -> Self {
        SpoolWriter::new()
    }
}

impl SpoolWriter {
    /// A writer to a temporary file, or to memory where none can be made.
    pub fn new() -> SpoolWriter {
        SpoolWriter::with(TempSink::new("ops"))
    }

    /// A writer that keeps the spool in memory.
    pub fn in_memory() -> SpoolWriter {
        SpoolWriter::with(TempSink::Memory(Vec::new()))
    }

    fn with(sink: TempSink) -> SpoolWriter {
        SpoolWriter {
            sink,
            count: 0,
            bytes: 0,
            previous_time: 0,
            previous_position: 0,
            first_time_us: None,
            size_of: Vec::new(),
            live: 0,
            peak: 0,
            error: None,
            buf: Vec::with_capacity(64),
        }
    }

    /// Appends one operation, its time and its place in the input.
    pub fn push(&mut self, op: TraceOp, time_us: u64, position: Position) {
        let (kind, ids) = match op {
            TraceOp::Alloc { slot, .. } => (0u8, [slot, 0]),
            TraceOp::Free { slot } => (1, [slot, 0]),
            TraceOp::FreeDeferred { slot, lane } => (2, [slot, lane]),
            TraceOp::FreeCompleted { lane } => (3, [lane, 0]),
        };
        let (event, at) = match position {
            Position::Line(n) => (0, n),
            Position::Event(i) => (4, i),
        };
        let b = &mut self.buf;
        b.clear();
        b.push(kind | event);
        varint(b, u64::from(ids[0]));
        match op {
            TraceOp::Alloc { size, stream, .. } => {
                varint(b, size);
                varint(b, stream);
            }
            TraceOp::FreeDeferred { .. } => varint(b, u64::from(ids[1])),
            TraceOp::Free { .. } | TraceOp::FreeCompleted { .. } => {}
        }
        varint(b, zigzag(time_us.wrapping_sub(self.previous_time) as i64));
        varint(b, zigzag(i64::from(at) - i64::from(self.previous_position)));
        self.previous_time = time_us;
        self.previous_position = at;
        self.first_time_us.get_or_insert(time_us);
        self.count += 1;
        self.bytes += b.len() as u64;
        self.tally(op);
        if self.error.is_none() {
            if let Err(e) = self.sink.write(&self.buf, "the operations") {
                self.error = Some(e);
            }
        }
    }

    /// Follows the requested bytes live, for the peak (as `Trace::peak_requested` counts).
    fn tally(&mut self, op: TraceOp) {
        match op {
            TraceOp::Alloc { slot, size, .. } => {
                let slot = slot as usize;
                if slot >= self.size_of.len() {
                    self.size_of.resize(slot + 1, 0);
                }
                self.size_of[slot] = size;
                self.live += u128::from(size);
                self.peak = self.peak.max(self.live);
            }
            TraceOp::Free { slot } | TraceOp::FreeDeferred { slot, .. } => {
                self.live = self.live.saturating_sub(u128::from(self.size_of.get(slot as usize).copied().unwrap_or(0)))
            }
            TraceOp::FreeCompleted { .. } => {}
        }
    }

    /// The spool written, or the first write that failed.
    pub fn finish(self) -> io::Result<Spool> {
        if let Some(e) = self.error {
            return Err(e);
        }
        Ok(Spool {
            store: self.sink.finish()?,
            count: self.count,
            bytes: self.bytes,
            peak_requested: u64::try_from(self.peak).unwrap_or(u64::MAX),
            first_time_us: self.first_time_us,
        })
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// The most bytes one operation takes: a tag and five varints of at most 10 bytes.
const MOST_BYTES: usize = 1 + 5 * 10;

fn damaged() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "the operations read back are damaged")
}

/// Reads encoded operations from a byte slice.
struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Decoder<'_> {
    fn varint(&mut self) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at).ok_or_else(damaged)?;
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(damaged())
    }

    fn id(&mut self) -> io::Result<u32> {
        u32::try_from(self.varint()?).map_err(|_| damaged())
    }
}

impl Spool {
    /// Operations written.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether none were.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the encoded operations take.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether they are in a temporary file rather than in memory.
    pub fn on_disk(&self) -> bool {
        self.store.on_disk()
    }

    /// Peak of the bytes live at once, as requested: `Trace::peak_requested` of the
    /// operations written.
    pub fn peak_requested(&self) -> u64 {
        self.peak_requested
    }

    /// The first operation's time.
    pub fn first_time_us(&self) -> Option<u64> {
        self.first_time_us
    }

    /// Calls `each` with the operations in order, [`PIECE`] at a time; stops at the first
    /// error, `each`'s or a failed read (as text).
    pub fn pieces(&self, mut each: impl FnMut(&Piece) -> Result<(), String>) -> Result<(), String> {
        let read_error = |e: io::Error| format!("cannot read back the trace's operations: {e}");
        let mut input = self.store.reader(0);
        let mut buf = vec![0u8; 1 << 20];
        let (mut filled, mut at, mut ended) = (0usize, 0usize, false);
        let mut piece = Piece::default();
        let (mut time, mut position, mut done) = (0u64, 0u32, 0usize);
        while done < self.count {
            if !ended && filled - at < MOST_BYTES {
                buf.copy_within(at..filled, 0);
                filled -= at;
                at = 0;
                while filled < buf.len() && !ended {
                    let n = input.read(&mut buf[filled..]).map_err(read_error)?;
                    ended = n == 0;
                    filled += n;
                }
            }
            let mut d = Decoder { bytes: &buf[..filled], at };
            let tag = *d.bytes.get(d.at).ok_or_else(|| read_error(damaged()))?;
            d.at += 1;
            let decoded = (|| -> io::Result<TraceOp> {
                let id = d.id()?;
                Ok(match tag & 3 {
                    0 => TraceOp::Alloc { slot: id, size: d.varint()?, stream: d.varint()? },
                    1 => TraceOp::Free { slot: id },
                    2 => TraceOp::FreeDeferred { slot: id, lane: d.id()? },
                    _ => TraceOp::FreeCompleted { lane: id },
                })
            })();
            let op = decoded.map_err(read_error)?;
            time = time.wrapping_add(unzigzag(d.varint().map_err(read_error)?) as u64);
            let moved = unzigzag(d.varint().map_err(read_error)?);
            position = u32::try_from(i64::from(position) + moved).map_err(|_| read_error(damaged()))?;
            at = d.at;
            piece.ops.push(op);
            piece.times_us.push(time);
            piece.positions.push(if tag & 4 != 0 { Position::Event(position) } else { Position::Line(position) });
            done += 1;
            if piece.ops.len() == PIECE || done == self.count {
                each(&piece)?;
                piece.clear(done);
            }
        }
        Ok(())
    }

    /// Operation `i`, its time and its place in the input (a pass over the spool).
    pub fn get(&self, i: usize) -> Result<Option<(TraceOp, u64, Position)>, String> {
        let mut found = None;
        self.pieces(|p| {
            if let Some(k) = i.checked_sub(p.first).filter(|&k| k < p.ops.len()) {
                found = Some((p.ops[k], p.times_us[k], p.positions[k]));
            }
            Ok(())
        })?;
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: u32) -> Vec<(TraceOp, u64, Position)> {
        (0..n)
            .map(|i| {
                let op = match i % 5 {
                    0 => TraceOp::Alloc { slot: i, size: u64::from(i) << 20 | 7, stream: u64::MAX - u64::from(i) },
                    1 => TraceOp::Free { slot: i - 1 },
                    2 => TraceOp::FreeDeferred { slot: u32::MAX, lane: i },
                    3 => TraceOp::FreeCompleted { lane: i },
                    _ => TraceOp::Alloc { slot: 0, size: u64::MAX, stream: 0 },
                };
                // Times that go back as well as forward, and positions of both kinds.
                let time = if i % 7 == 3 { 5 } else { u64::from(i) * 1_000_003 + (1 << 60) };
                let at = if i % 2 == 0 { Position::Line(i * 3) } else { Position::Event(u32::MAX - i) };
                (op, time, at)
            })
            .collect()
    }

    fn read_back(s: &Spool) -> (Vec<(TraceOp, u64, Position)>, Vec<usize>) {
        let (mut all, mut firsts) = (Vec::new(), Vec::new());
        s.pieces(|p| {
            assert_eq!(p.first, all.len(), "pieces are numbered without gaps");
            firsts.push(p.ops.len());
            all.extend((0..p.ops.len()).map(|k| (p.ops[k], p.times_us[k], p.positions[k])));
            Ok(())
        })
        .unwrap();
        (all, firsts)
    }

    /// What is read back equals what was written, in pieces of PIECE, from a file or from
    /// memory, pass after pass.
    #[test]
    fn operations_read_back_as_written_in_pieces() {
        let ops = sample(PIECE as u32 * 2 + 17);
        for mut w in [SpoolWriter::new(), SpoolWriter::in_memory()] {
            ops.iter().for_each(|&(op, t, p)| w.push(op, t, p));
            let s = w.finish().unwrap();
            assert_eq!(s.len(), ops.len());
            for _pass in 0..2 {
                let (all, sizes) = read_back(&s);
                assert_eq!(sizes, [PIECE, PIECE, 17]);
                assert!(all == ops, "read back differs");
            }
            assert_eq!(s.get(PIECE + 3).unwrap(), Some(ops[PIECE + 3]));
            assert_eq!(s.get(ops.len()).unwrap(), None);
            assert_eq!(s.first_time_us(), Some(1 << 60));
            assert!(s.bytes() < ops.len() as u64 * 40, "{} bytes", s.bytes());
        }
    }

    /// The peak of requested bytes is the core's for the same operations.
    #[test]
    fn the_peak_requested_is_the_cores() {
        let mut trace = cachalot_core::parse_trace(
            "Time,Action,Pointer,Size\n1,allocate,0x10,512\n2,allocate,0x20,4096\n3,free,0x10,0\n\
             4,allocate,0x30,100\n5,free,0x20,0\n6,allocate,0x40,8192\n",
        )
        .unwrap();
        let peak = trace.peak_requested();
        let mut w = SpoolWriter::in_memory();
        trace.take_operations(|op, t, p| w.push(op, t, p));
        let s = w.finish().unwrap();
        assert_eq!((s.peak_requested(), peak), (8292, 8292));
        assert_eq!(s.len(), trace.op_count());
    }

    /// A spool with nothing written reads back nothing.
    #[test]
    fn an_empty_spool_gives_no_piece() {
        let s = SpoolWriter::in_memory().finish().unwrap();
        assert!(s.is_empty());
        s.pieces(|_| panic!("a piece of nothing")).unwrap();
    }
}
