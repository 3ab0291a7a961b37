//! libFuzzer entry for the `abi` target; the logic is `doors/abi.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../doors/abi.rs"]
mod abi;

libfuzzer_sys::fuzz_target!(|data: &[u8]| abi::run(data));
