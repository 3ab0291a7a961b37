//! Fuzz targets at the doors where untrusted bytes or calls come in from outside the core: the
//! tool's whole file reader (`file`), the browser's file reader (`browser.rs`) and sequences
//! of C ABI calls (`abi.rs`). Apart from `targets/` because they need crates beyond the core.
//! Each door's replay test includes only its own file, so that it needs only its own crate:
//! `native/cli/tests/fuzz_doors.rs` (`file`, through this module), `wasm/tests/fuzz_door.rs`
//! (`browser.rs`) and `native/tests/fuzz_abi.rs` (`abi.rs`), all on stable Rust.

pub mod file;
