//! Bytes a reader keeps out of memory while a trace is replayed (its operations, a snapshot's
//! events): written once to an unnamed temporary file, read back from any offset by any
//! number of threads at once, and gone when the process ends however it ends. Where no
//! temporary file can be made (no positioned reads on the system, no writable temporary
//! folder) the same bytes are kept in memory.
//!
//! Invariant: what is read back from a [`TempStore`] equals what was written to its
//! [`TempSink`], at the same offsets.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where bytes are written.
pub enum TempSink {
    /// An unnamed temporary file.
    File(BufWriter<File>),
    /// Memory.
    Memory(Vec<u8>),
}

/// The bytes written, to be read back.
pub enum TempStore {
    /// An unnamed temporary file.
    File(File),
    /// Memory.
    Memory(Vec<u8>),
}

/// Numbers the temporary files of one process.
static FILES: AtomicUsize = AtomicUsize::new(0);

/// A new file in the temporary folder named for `what`, already unlinked where the system
/// allows it (on a system without positioned reads, none: the bytes stay in memory).
fn unnamed_file(what: &str) -> io::Result<File> {
    if cfg!(not(unix)) {
        return Err(io::Error::other("no positioned reads"));
    }
    let n = FILES.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("cachalot-{}-{n}.{what}", std::process::id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    let _ = std::fs::remove_file(&path);
    Ok(file)
}

impl TempSink {
    /// A sink to a temporary file named for `what`, or to memory where none can be made.
    pub fn new(what: &str) -> TempSink {
        match unnamed_file(what) {
            Ok(f) => TempSink::File(BufWriter::with_capacity(1 << 16, f)),
            Err(_) => TempSink::Memory(Vec::new()),
        }
    }

    /// Appends `bytes`; in memory, an allocation that fails is an error, not an abort.
    pub fn write(&mut self, bytes: &[u8], what: &str) -> io::Result<()> {
        match self {
            TempSink::File(f) => f.write_all(bytes),
            TempSink::Memory(m) => m
                .try_reserve(bytes.len())
                .map(|()| m.extend_from_slice(bytes))
                .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, format!("no memory left to keep {what}"))),
        }
    }

    /// The bytes written, ready to be read.
    pub fn finish(self) -> io::Result<TempStore> {
        Ok(match self {
            TempSink::File(f) => TempStore::File(f.into_inner().map_err(|e| e.into_error())?),
            TempSink::Memory(m) => TempStore::Memory(m),
        })
    }
}

/// Reads a file from `offset` on without moving the file's own position, so that threads
/// (`advise` replays configs side by side) read one store at once.
struct ReadAt<'a> {
    file: &'a File,
    offset: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::read_at(self.file, buf, self.offset)?;
        #[cfg(not(unix))]
        let n = {
            let _ = buf;
            return Err(io::Error::other("kept in a file on a system without positioned reads"));
        };
        self.offset += n as u64;
        Ok(n)
    }
}

impl TempStore {
    /// Whether the bytes are in a temporary file rather than in memory.
    pub fn on_disk(&self) -> bool {
        matches!(self, TempStore::File(_))
    }

    /// The bytes from `offset` on.
    pub fn reader(&self, offset: u64) -> Box<dyn Read + '_> {
        match self {
            TempStore::File(file) => Box::new(ReadAt { file, offset }),
            TempStore::Memory(m) => {
                Box::new(m.get(usize::try_from(offset).unwrap_or(usize::MAX)..).unwrap_or_default())
            }
        }
    }
}
