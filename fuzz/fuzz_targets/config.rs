//! libFuzzer entry for the `config` target; the logic is `targets/config.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::config::run(data));
