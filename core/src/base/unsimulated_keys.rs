//! The keys PyTorch 2.11 accepts in `PYTORCH_CUDA_ALLOC_CONF` (and `PYTORCH_ALLOC_CONF`) that
//! change nothing a simulated device could show: the backend choice, the pinned host
//! allocator's settings, the lock around cudaMalloc, CUDA-graph capture. They are accepted,
//! with PyTorch's value rules, so that a real config can be pasted, and each has a note that
//! says why it has no effect here.
//!
//! Invariants: a value PyTorch refuses is refused (an error naming the key and what it
//! allows, never "unknown key"); every key listed has a note; the HIP spellings PyTorch takes
//! are taken too.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// The keys, in PyTorch's order (c10/core/AllocatorConfig.h, c10/cuda/CUDAAllocatorConfig.cpp).
pub const UNSIMULATED_KEYS: &[&str] = &[
    "backend",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_use_background_threads",
    "pinned_reserve_segment_size_mb",
    "graph_capture_record_stream_reuse",
];

/// `key` with PyTorch's HIP spelling read as the CUDA one.
fn canonical(key: &str) -> &str {
    match key {
        "release_lock_on_hipmalloc" => "release_lock_on_cudamalloc",
        "pinned_use_hip_host_register" => "pinned_use_cuda_host_register",
        other => other,
    }
}

/// `None` when `key` is not one of these keys; else whether `value` is one PyTorch takes (the
/// message says what is allowed; the config names the key).
pub fn check(key: &str, value: &str) -> Option<Result<(), String>> {
    let bad = |allowed: &str| Err(format!("bad value '{value}'; {allowed}"));
    let boolean = || if matches!(value, "True" | "False") { Ok(()) } else { bad("allowed: True, False") };
    Some(match canonical(key) {
        "backend" => match value {
            "native" | "cudaMallocAsync" | "hipMallocAsync" => Ok(()),
            _ => bad("allowed: native, cudaMallocAsync"),
        },
        "release_lock_on_cudamalloc"
        | "pinned_use_cuda_host_register"
        | "pinned_use_background_threads"
        | "graph_capture_record_stream_reuse" => boolean(),
        "pinned_num_register_threads" => match value.parse::<u64>() {
            Ok(n) if n.is_power_of_two() && n <= 128 => Ok(()),
            _ => bad("expected a power of two, at most 128"),
        },
        "pinned_reserve_segment_size_mb" => match value.parse::<u64>() {
            Ok(n) if n > 0 => Ok(()),
            _ => bad("expected a whole number of MiB, more than 0"),
        },
        _ => return None,
    })
}

/// Why `key:value` (a key of [`UNSIMULATED_KEYS`], checked) has no effect on a replay over a
/// simulated device running `policy`.
fn note(key: &str, value: &str, policy: &str) -> String {
    let key_name = canonical(key);
    match (key_name, value) {
        ("backend", "native") => format!(
            "backend:native is PyTorch's caching allocator, the default; policy:pytorch reproduces it (this run: policy:{policy})"
        ),
        ("backend", _) => format!(
            "backend:{value} hands allocation to the CUDA driver's stream-ordered pool, which cachalot does not \
             simulate: this run replays policy:{policy}; compare shows PyTorch's measured {value} row for the \
             built-in traces"
        ),
        ("release_lock_on_cudamalloc", _) => format!(
            "{key}:{value} only changes whether PyTorch holds its lock during cudaMalloc: no effect on a simulated device"
        ),
        ("graph_capture_record_stream_reuse", _) => {
            format!("{key}:{value} applies during CUDA graph capture, which a trace does not record: no effect here")
        }
        _ => format!("{key}:{value} configures PyTorch's pinned host-memory allocator, not device memory: no effect here"),
    }
}

/// One note for each key of `text` (a config string [`crate::Config::parse`] accepted) that
/// has no effect on a simulated device, in order.
pub fn notes(text: &str, policy: &str) -> Vec<String> {
    text.split(',')
        .filter_map(|pair| pair.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .filter(|(k, v)| UNSIMULATED_KEYS.contains(&canonical(k)) && check(k, v).is_some_and(|r| r.is_ok()))
        .map(|(k, v)| note(k, v, policy))
        .collect()
}
