//! libFuzzer entry for the `browser` target; the logic is `doors/browser.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../doors/browser.rs"]
mod browser;

libfuzzer_sys::fuzz_target!(|data: &[u8]| browser::run(data));
