//! libFuzzer entry for the `trace` target; the logic is `targets/trace.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::trace::run(data));
