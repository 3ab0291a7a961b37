//! Which PyTorch release `policy:pytorch` follows (`pytorch_version:2.11` … `2.15`), and the
//! config keys each release takes in `PYTORCH_CUDA_ALLOC_CONF`. A key is checked against the
//! named release, so a config pasted from 2.15 is refused under 2.11 with the release the key
//! first appears in, not called unknown.
//!
//! Invariants: releases are ordered; a key taken by a release is taken by every later one (no
//! key was removed between 2.11 and 2.15); [`KEYS_SINCE`] lists every PyTorch key the parser
//! takes, each with its first release. Sources: the key sets of `c10/core/AllocatorConfig`
//! and `c10/cuda/CUDAAllocatorConfig` in each release's wheel (headers, and the key strings
//! of `libc10.so` and `libc10_cuda.so`); docs/pytorch.md, "PyTorch versions", lists them.

use alloc::format;
use alloc::string::String;

/// A PyTorch release whose allocator `policy:pytorch` can follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PyTorchVersion {
    /// 2.11.0 (the release the reference figures were measured with).
    V2_11,
    /// 2.12.0: adds `throw_on_cudamalloc_oom` and `pinned_free_catch_all`.
    V2_12,
    /// 2.13.0: adds `pinned_max_round_threshold_mb` and `pinned_max_cached_size_mb`.
    V2_13,
    /// 2.14.0: no new keys.
    V2_14,
    /// 2.15.0: adds `expandable_segments_reserve` and `expandable_segments_reserve_by_class`.
    V2_15,
}

/// Every release, oldest first.
pub const VERSIONS: [PyTorchVersion; 5] =
    [PyTorchVersion::V2_11, PyTorchVersion::V2_12, PyTorchVersion::V2_13, PyTorchVersion::V2_14, PyTorchVersion::V2_15];

/// PyTorch's keys with the release that first takes each (HIP spellings included).
pub const KEYS_SINCE: &[(&str, PyTorchVersion)] = &[
    ("large_segment_size_mb", PyTorchVersion::V2_11),
    ("max_split_size_mb", PyTorchVersion::V2_11),
    ("max_non_split_rounding_mb", PyTorchVersion::V2_11),
    ("garbage_collection_threshold", PyTorchVersion::V2_11),
    ("roundup_power2_divisions", PyTorchVersion::V2_11),
    ("expandable_segments", PyTorchVersion::V2_11),
    ("pinned_use_background_threads", PyTorchVersion::V2_11),
    ("backend", PyTorchVersion::V2_11),
    ("release_lock_on_cudamalloc", PyTorchVersion::V2_11),
    ("release_lock_on_hipmalloc", PyTorchVersion::V2_11),
    ("pinned_use_cuda_host_register", PyTorchVersion::V2_11),
    ("pinned_use_hip_host_register", PyTorchVersion::V2_11),
    ("graph_capture_record_stream_reuse", PyTorchVersion::V2_11),
    ("pinned_reserve_segment_size_mb", PyTorchVersion::V2_11),
    ("pinned_num_register_threads", PyTorchVersion::V2_11),
    ("per_process_memory_fraction", PyTorchVersion::V2_11),
    ("throw_on_cudamalloc_oom", PyTorchVersion::V2_12),
    ("pinned_free_catch_all", PyTorchVersion::V2_12),
    ("pinned_max_round_threshold_mb", PyTorchVersion::V2_13),
    ("pinned_max_cached_size_mb", PyTorchVersion::V2_13),
    ("expandable_segments_reserve", PyTorchVersion::V2_15),
    ("expandable_segments_reserve_by_class", PyTorchVersion::V2_15),
];

impl Default for PyTorchVersion {
    /// The newest release.
    fn default() -> Self {
        PyTorchVersion::V2_15
    }
}

impl PyTorchVersion {
    /// The release as the `pytorch_version` key writes it ("2.11").
    pub fn name(self) -> &'static str {
        match self {
            PyTorchVersion::V2_11 => "2.11",
            PyTorchVersion::V2_12 => "2.12",
            PyTorchVersion::V2_13 => "2.13",
            PyTorchVersion::V2_14 => "2.14",
            PyTorchVersion::V2_15 => "2.15",
        }
    }

    /// Reads "2.12" (or "2.12.0"); the message names the releases there are.
    pub fn parse(value: &str) -> Result<PyTorchVersion, String> {
        let short = value.strip_suffix(".0").unwrap_or(value);
        VERSIONS.iter().copied().find(|v| v.name() == short).ok_or_else(|| {
            let names: alloc::vec::Vec<&str> = VERSIONS.iter().map(|v| v.name()).collect();
            format!("got '{value}'; supported PyTorch versions: {}", names.join(", "))
        })
    }

    /// The release that first takes PyTorch key `key`; `None` for a key no release takes.
    pub fn key_since(key: &str) -> Option<PyTorchVersion> {
        KEYS_SINCE.iter().find(|(k, _)| *k == key).map(|&(_, v)| v)
    }

    /// `Err` with a message when `key` is PyTorch's but newer than this release: it names the
    /// release whose keys were checked and the one the key comes from.
    pub fn check_key(self, key: &str) -> Result<(), String> {
        match Self::key_since(key) {
            Some(since) if since > self => Err(format!(
                "unknown key for PyTorch {} (PyTorch {}'s keys were checked; it is a key from {} on: \
                 set pytorch_version:{} or later)",
                self.name(),
                self.name(),
                since.name(),
                since.name()
            )),
            _ => Ok(()),
        }
    }

    /// Whether this release counts `num_oom_rejections` in its statistics (2.12 on).
    pub fn counts_oom_rejections(self) -> bool {
        self >= PyTorchVersion::V2_12
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_name_themselves() {
        for v in VERSIONS {
            assert_eq!(PyTorchVersion::parse(v.name()), Ok(v));
        }
        assert_eq!(PyTorchVersion::parse("2.13.0"), Ok(PyTorchVersion::V2_13));
        let e = PyTorchVersion::parse("2.10").unwrap_err();
        assert!(e.contains("2.11, 2.12, 2.13, 2.14, 2.15"), "{e}");
        assert_eq!(PyTorchVersion::default(), PyTorchVersion::V2_15);
    }

    #[test]
    fn a_newer_key_names_both_releases() {
        let e = PyTorchVersion::V2_11.check_key("throw_on_cudamalloc_oom").unwrap_err();
        assert!(e.contains("PyTorch 2.11's keys were checked") && e.contains("from 2.12 on"), "{e}");
        assert!(PyTorchVersion::V2_12.check_key("throw_on_cudamalloc_oom").is_ok());
        assert!(PyTorchVersion::V2_14.check_key("expandable_segments_reserve").is_err());
        assert!(PyTorchVersion::V2_11.check_key("large_segment_size_mb").is_ok());
        assert!(PyTorchVersion::V2_11.check_key("policy").is_ok(), "cachalot's own keys are no release's");
    }
}
