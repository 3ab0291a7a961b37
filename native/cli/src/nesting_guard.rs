//! JSON text checked for nesting as it is read, so that a snapshot is parsed as its bytes come
//! and its text is never held whole: arrays and objects nested deeper than the limit stop the
//! reading with [`TooDeep`] before the parser sees the bracket past it, as the core's
//! `nests_deeper` would have refused the whole text.
//!
//! Invariant: the levels are counted as `cachalot_core::trace::nests_deeper` counts them
//! (brackets inside strings not counted, a `\"` inside a string not its end); the bytes pass
//! through unchanged.

use std::io::{self, Read};

/// Why reading stopped: the text nests deeper than the limit.
#[derive(Debug)]
pub struct TooDeep;

impl std::fmt::Display for TooDeep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("nested past the limit")
    }
}
impl std::error::Error for TooDeep {}

/// True when `e` is the one a [`NestingGuard`] stops with.
pub fn too_deep(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|e| e.is::<TooDeep>())
}

/// A reader of JSON text that fails with [`TooDeep`] past `depth` levels.
pub struct NestingGuard<R> {
    inner: R,
    depth: usize,
    level: usize,
    in_string: bool,
    escaped: bool,
}

impl<R: Read> NestingGuard<R> {
    /// Text from `inner`, refused past `depth` levels.
    pub fn new(inner: R, depth: usize) -> NestingGuard<R> {
        NestingGuard { inner, depth, level: 0, in_string: false, escaped: false }
    }
}

impl<R: Read> Read for NestingGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'[' | b'{' => {
                    self.level += 1;
                    if self.level > self.depth {
                        return Err(io::Error::other(TooDeep));
                    }
                }
                b']' | b'}' => self.level = self.level.saturating_sub(1),
                _ => {}
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_core::trace::nests_deeper;

    /// The guard and the core's check agree, whatever the read sizes.
    #[test]
    fn levels_are_counted_as_the_core_counts_them() {
        for (text, depth) in [
            (r#"{"a": [[1]], "b": "[[[[[[\"[[["}"#, 3),
            (r#"{"a": [[1]]}"#, 2),
            ("[][][]", 1),
            (r#"["\\", [[[]]]]"#, 3),
        ] {
            let mut out = Vec::new();
            let guarded = NestingGuard::new(text.as_bytes(), depth).read_to_end(&mut out);
            assert_eq!(guarded.as_ref().is_err_and(too_deep), nests_deeper(text, depth), "{text}");
            if guarded.is_ok() {
                assert_eq!(out, text.as_bytes());
            }
        }
    }
}
