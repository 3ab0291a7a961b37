//! The file `--plot` writes, claimed before the replay so that a path that cannot be written
//! fails at once, not after minutes of replay and a page of output.
//!
//! Invariants: the path ends in `.svg` and its file is open for writing before any replay
//! runs; a file this run created is removed again unless a plot was written into it, and an
//! existing file keeps its content until the new plot replaces it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use super::Failure;

/// An open plot file, written once the replay is done.
pub struct PlotFile {
    path: PathBuf,
    file: File,
    /// Whether this run created the file (and so removes it if no plot is written).
    created: bool,
}

impl PlotFile {
    /// Checks `path` and opens it for writing, creating it if needed.
    pub fn claim(path: &str) -> Result<PlotFile, Failure> {
        let p = PathBuf::from(path);
        if !p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg")) {
            return Err(Failure::Usage(format!("--plot {path}: the plot is an SVG image; name a file ending in .svg")));
        }
        let created = !p.exists();
        // Not truncated yet: an existing plot survives a replay that fails.
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(&p).map_err(|e| {
            let folder = p.parent().filter(|d| !d.as_os_str().is_empty());
            match folder {
                Some(d) if !d.is_dir() => format!("cannot write plot {path}: folder {} does not exist", d.display()),
                _ => format!("cannot write plot {path}: {e}"),
            }
        })?;
        Ok(PlotFile { path: p, file, created })
    }

    /// Replaces the file's content with `svg`; returns the path written.
    pub fn write(mut self, svg: &str) -> Result<String, Failure> {
        let file = &mut self.file;
        let written = file.set_len(0).and_then(|()| file.write_all(svg.as_bytes())).and_then(|()| file.flush());
        written.map_err(|e| format!("cannot write plot {}: {e}", self.path.display()))?;
        self.created = false;
        Ok(self.path.display().to_string())
    }
}

impl Drop for PlotFile {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
