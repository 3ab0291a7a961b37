//! A gzip stream of one or more members (as `gzip -d` reads concatenated files), read as it
//! comes: what decompresses is never held here, so a reader downstream decides how much to
//! take.
//!
//! Invariants: bytes after the last member that do not start another member are an error
//! that counts them (something appended to the file) without holding them; a broken member
//! is the decoder's own error.

use std::io::{self, BufRead, Read};

use cachalot_core::trace::GZIP_MAGIC;
use flate2::bufread::GzDecoder;

/// The decompressed bytes of the gzip members read from `R`.
pub struct Members<R: BufRead> {
    member: Option<GzDecoder<R>>,
}

impl<R: BufRead> Members<R> {
    /// Decompresses `input`, which starts with a gzip member.
    pub fn new(input: R) -> Members<R> {
        Members { member: Some(GzDecoder::new(input)) }
    }
}

impl<R: BufRead> Read for Members<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(member) = self.member.as_mut() else { return Ok(0) };
            let n = member.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let mut rest = self.member.take().map(GzDecoder::into_inner).expect("a member is being read");
            let next = rest.fill_buf()?;
            if next.is_empty() {
                return Ok(0);
            }
            // Another member starts with the magic's first byte (a broken one is the decoder's
            // error); anything else was appended.
            if next[0] != GZIP_MAGIC[0] {
                let mut count = 0u64;
                loop {
                    let n = rest.fill_buf()?.len();
                    if n == 0 {
                        break;
                    }
                    rest.consume(n);
                    count += n as u64;
                }
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{count} bytes after the end of the gzip data are not gzip (something appended to the file?)"
                    ),
                ));
            }
            self.member = Some(GzDecoder::new(rest));
        }
    }
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

    fn read_all(bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        Members::new(bytes).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn members_are_one_stream_and_appended_bytes_are_counted() {
        let joined = [gzip(b"ab"), gzip(b"cd")].concat();
        assert_eq!(read_all(&joined).unwrap(), b"abcd");
        let appended = [joined.clone(), b"junk".to_vec()].concat();
        let e = read_all(&appended).unwrap_err().to_string();
        assert!(e.contains("4 bytes after the end of the gzip data are not gzip"), "{e}");
        let one = [joined, b"j".to_vec()].concat();
        assert!(read_all(&one).unwrap_err().to_string().contains("1 bytes after"));
    }
}
