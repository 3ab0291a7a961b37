//! libFuzzer entry for the `file` target; the logic is `doors/file.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../doors/mod.rs"]
mod doors;

libfuzzer_sys::fuzz_target!(|data: &[u8]| doors::file::run(data));
