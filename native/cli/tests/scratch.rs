//! Scratch folders for the tool's tests: each one a fresh folder of its own under the system's
//! temporary folder, named after the test's purpose, the process and a count, and removed with
//! everything in it when the value is dropped, whether the test passed or panicked, so that a
//! test run leaves nothing behind. Bind it to a name for as long as its files are used: a
//! temporary `Scratch` is removed at the end of its statement.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A folder removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new empty folder for `purpose`.
    pub fn new(purpose: &str) -> Scratch {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("cachalot-{purpose}-{}-{n}", std::process::id()));
        // A run killed before its drops may have left a folder of this name (process ids come
        // round again): it is emptied, so the folder starts empty.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Scratch(dir)
    }

    /// A file of `name` written with `bytes` in the folder; its path as text.
    pub fn file(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path.to_str().expect("a temporary path in UTF-8").to_string()
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
