//! Fuzz targets at the doors where untrusted bytes come in from outside the core: the tool's
//! whole file reader (`file`). Apart from `targets/` because they need crates beyond the core
//! (cachalot-cli); `native/cli/tests/fuzz_doors.rs` replays their committed inputs on stable.

pub mod file;
