//! libFuzzer entry for the `ops` target; the logic is `targets/ops.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::ops::run(data));
