//! libFuzzer entry for the `memo` target; the logic is `targets/memo.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::memo::run(data));
