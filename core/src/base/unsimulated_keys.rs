//! The keys PyTorch 2.11 to 2.15 accept in `PYTORCH_CUDA_ALLOC_CONF` (and `PYTORCH_ALLOC_CONF`)
//! that change nothing a simulated device could show: the backend choice, the pinned host
//! allocator's settings, the lock around cudaMalloc, CUDA-graph capture, the virtual address
//! space reserved for each expandable segment (2.15). They are accepted,
//! with PyTorch's value rules, so that a real config can be pasted, and each has a note that
//! says why it has no effect here.
//!
//! Invariants: a value PyTorch refuses is refused (an error naming the key and what it
//! allows, never "unknown key"); every key listed has a note; the HIP spellings PyTorch takes
//! are taken too. Which release takes which key is `pytorch_version.rs`'s to say.

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
    "pinned_free_catch_all",
    "pinned_max_round_threshold_mb",
    "pinned_max_cached_size_mb",
    "expandable_segments_reserve",
    "expandable_segments_reserve_by_class",
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
        | "graph_capture_record_stream_reuse"
        | "pinned_free_catch_all" => boolean(),
        // PyTorch reads these with `std::stoull` and checks nothing more.
        "pinned_max_round_threshold_mb" | "pinned_max_cached_size_mb" => match value.parse::<u64>() {
            Ok(_) => Ok(()),
            _ => bad("expected a whole number of MiB"),
        },
        // PyTorch warns about a malformed reserve and keeps its default; so a value is taken
        // whatever it is, and the note says whether PyTorch would use it.
        "expandable_segments_reserve" => Ok(()),
        "expandable_segments_reserve_by_class" => match value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            Some(_) => Ok(()),
            None => bad("expected [class:reserve,...]"),
        },
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
        ("expandable_segments_reserve" | "expandable_segments_reserve_by_class", _) => format!(
            "{key}:{value} sets the virtual address range PyTorch 2.15 reserves for each expandable segment \
             (9/8 of device memory by default{}); it decides no placement, and cachalot's ranges are \
             not bounded by it: no effect here",
            if key == "expandable_segments_reserve" && !reserve_is_valid(value) {
                "; PyTorch would ignore this value with a warning"
            } else {
                ""
            }
        ),
        _ => format!("{key}:{value} configures PyTorch's pinned host-memory allocator, not device memory: no effect here"),
    }
}

/// A reserve PyTorch uses: a positive fraction of device memory, or GiB with a `G` suffix.
fn reserve_is_valid(value: &str) -> bool {
    let number = value.strip_suffix(['G', 'g']).unwrap_or(value);
    number.parse::<f64>().is_ok_and(|v| v.is_finite() && v > 0.0)
}

/// One note for each pair of a config string [`crate::Config::parse`] accepted (its
/// `key:value` pairs, in order) whose key has no effect on a simulated device.
pub fn notes(pairs: &[(&str, &str)], policy: &str) -> Vec<String> {
    pairs
        .iter()
        .filter(|(k, v)| UNSIMULATED_KEYS.contains(&canonical(k)) && check(k, v).is_some_and(|r| r.is_ok()))
        .map(|(k, v)| note(k, v, policy))
        .collect()
}
