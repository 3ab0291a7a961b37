//! PyTorch 2.11 to 2.15 (`pytorch_version`): every key each release takes is taken, with its
//! value rules; a newer release's key under an older release names both; and the rules the
//! keys change (`large_segment_size_mb`, `throw_on_cudamalloc_oom`), one test each, as a
//! program using the allocator sees them.

use cachalot_core::pytorch_version::{KEYS_SINCE, VERSIONS};
use cachalot_core::{AllocError, Allocator, Config, PyTorchVersion, SimDevice};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn alloc_with(conf: &str, capacity: u64) -> Allocator<SimDevice> {
    Allocator::new(SimDevice::new(capacity), Config::parse(&format!("policy:pytorch,{conf}")).unwrap())
}

fn reserved(a: &Allocator<SimDevice>) -> u64 {
    a.stats().reserved_bytes.all.current as u64
}

/// A value PyTorch takes for each key.
fn sample(key: &str) -> &'static str {
    match key {
        "large_segment_size_mb" | "max_split_size_mb" | "max_non_split_rounding_mb" => "64",
        "garbage_collection_threshold" | "per_process_memory_fraction" | "expandable_segments_reserve" => "0.5",
        "roundup_power2_divisions" => "[256:1,>:4]",
        "backend" => "native",
        "pinned_num_register_threads" => "8",
        "pinned_reserve_segment_size_mb" | "pinned_max_round_threshold_mb" | "pinned_max_cached_size_mb" => "16",
        "expandable_segments_reserve_by_class" => "[capture:0.25,workspace:40G]",
        _ => "True",
    }
}

#[test]
fn every_key_of_each_release_is_taken_and_a_newer_one_names_both_releases() {
    for version in VERSIONS {
        for &(key, since) in KEYS_SINCE {
            let text = format!("pytorch_version:{},{key}:{}", version.name(), sample(key));
            match Config::parse(&text) {
                Ok(c) => {
                    assert!(since <= version, "{text}: taken though it is a key from {}", since.name());
                    assert_eq!(c.pytorch_version, version);
                }
                Err(e) => {
                    assert!(since > version, "{text}: {e}");
                    assert_eq!(e.key, key);
                    let checked = format!("PyTorch {}'s keys were checked", version.name());
                    assert!(e.message.contains(&checked), "{e}");
                    assert!(e.message.contains(&format!("from {} on", since.name())), "{e}");
                }
            }
        }
    }
    // The release is read first, wherever it stands.
    assert!(Config::parse("throw_on_cudamalloc_oom:True,pytorch_version:2.11").is_err());
    assert!(Config::parse("throw_on_cudamalloc_oom:True,pytorch_version:2.12").is_ok());
}

#[test]
fn the_newest_release_is_the_default_and_others_are_named_with_the_supported_ones() {
    assert_eq!(Config::parse("").unwrap().pytorch_version, PyTorchVersion::V2_15);
    assert!(Config::parse("expandable_segments_reserve_by_class:[capture:0.25]").is_ok());
    for bad in ["2.10", "2.16", "3", "latest"] {
        let e = Config::parse(&format!("pytorch_version:{bad}")).unwrap_err();
        assert_eq!(e.key, "pytorch_version");
        assert!(e.message.contains("2.11, 2.12, 2.13, 2.14, 2.15"), "{e}");
    }
    let c = Config::parse("policy:pytorch,pytorch_version:2.13").unwrap();
    assert_eq!(c.to_config_string(), "policy:pytorch,pytorch_version:2.13");
    assert_eq!(Config::parse(&c.to_config_string()).unwrap(), c);
    // A key no release takes is still an unknown key, with the keys allowed and the release.
    let e = Config::parse("pytorch_version:2.12,bogus_key:1").unwrap_err();
    assert!(e.message.starts_with("unknown key; allowed keys: policy, pytorch_version"), "{e}");
    assert!(e.message.contains("PyTorch 2.12's other keys"), "{e}");
}

#[test]
fn values_the_new_keys_refuse_are_refused_naming_the_key() {
    for (bad, key, says) in [
        ("large_segment_size_mb:10", "large_segment_size_mb", "> 10"),
        ("large_segment_size_mb:forty", "large_segment_size_mb", "integer"),
        ("large_segment_size_mb:40,max_split_size_mb:30", "max_split_size_mb", ">= 40"),
        ("max_split_size_mb:30,large_segment_size_mb:40", "max_split_size_mb", ">= 40"),
        ("large_segment_size_mb:40,max_non_split_rounding_mb:39", "max_non_split_rounding_mb", ">= 40"),
        ("throw_on_cudamalloc_oom:1", "throw_on_cudamalloc_oom", "True, False"),
        ("pinned_free_catch_all:yes", "pinned_free_catch_all", "True, False"),
        ("pinned_max_cached_size_mb:-1", "pinned_max_cached_size_mb", "MiB"),
        ("pinned_max_round_threshold_mb:big", "pinned_max_round_threshold_mb", "MiB"),
        ("expandable_segments_reserve_by_class:0.5", "expandable_segments_reserve_by_class", "[class:reserve"),
    ] {
        let e = Config::parse(bad).unwrap_err();
        assert_eq!(e.key, key, "{bad}");
        assert!(e.message.contains(says) && !e.message.contains("unknown key"), "{bad}: {e}");
    }
    assert!(Config::parse("large_segment_size_mb:11,max_split_size_mb:11").is_ok());
}

#[test]
fn the_keys_that_change_nothing_here_get_a_note() {
    let text = "pinned_free_catch_all:True,pinned_max_round_threshold_mb:4,pinned_max_cached_size_mb:64,\
                expandable_segments_reserve:40G,expandable_segments_reserve_by_class:[capture:0.25,x:1G],policy:pytorch";
    assert_eq!(Config::parse(text).unwrap(), Config::pytorch(), "they change no decision");
    let notes = Config::unsimulated_key_notes(text);
    assert_eq!(notes.len(), 5, "{notes:?}");
    assert!(notes[0].contains("pinned host-memory allocator"), "{}", notes[0]);
    assert!(notes[4].contains("virtual address range") && notes[4].contains("[capture:0.25,x:1G]"), "{}", notes[4]);
    // PyTorch keeps its default, with a warning, for a reserve it cannot read.
    let odd = Config::unsimulated_key_notes("expandable_segments_reserve:lots");
    assert!(odd[0].contains("PyTorch would ignore this value"), "{odd:?}");
}

#[test]
fn large_segment_size_is_the_segment_of_requests_between_1_and_10_mib() {
    let mut a = alloc_with("large_segment_size_mb:40", 80 * GIB);
    a.malloc(3 * MIB, 0).unwrap();
    assert_eq!(reserved(&a), 40 * MIB, "a 3 MiB request gets a 40 MiB segment");
    a.malloc(30 * MIB, 0).unwrap();
    assert_eq!(reserved(&a), 40 * MIB, "which later requests share");
    a.malloc(12 * MIB, 0).unwrap();
    assert_eq!(reserved(&a), 52 * MIB, "10 MiB and up: a segment of the request's size");
    a.malloc(MIB, 0).unwrap();
    assert_eq!(reserved(&a), 54 * MIB, "the small pool's segments stay 2 MiB");
    let mut d = alloc_with("", 80 * GIB);
    d.malloc(3 * MIB, 0).unwrap();
    assert_eq!(reserved(&d), 20 * MIB, "20 MiB by default");
    a.check_invariants().unwrap();
}

#[test]
fn large_segment_size_is_the_default_rounding_an_oversize_request_may_take() {
    // max_split_size 100 MiB: a 170 MiB request may take a cached block below 170 MiB plus
    // max_non_split_rounding, which defaults to the large-segment size.
    let reuse = |conf: &str| {
        let mut a = alloc_with(conf, 80 * GIB);
        let p = a.malloc(200 * MIB, 0).unwrap();
        a.free(p).unwrap();
        a.malloc(170 * MIB, 0).unwrap();
        reserved(&a)
    };
    assert_eq!(reuse("max_split_size_mb:100,large_segment_size_mb:40"), 200 * MIB, "200 < 170 + 40: reused");
    assert_eq!(reuse("max_split_size_mb:100"), 370 * MIB, "200 >= 170 + 20: a new segment");
    assert_eq!(reuse("max_split_size_mb:100,large_segment_size_mb:40,max_non_split_rounding_mb:40"), 200 * MIB);
}

#[test]
fn large_segment_size_is_the_large_pools_page_under_expandable_segments() {
    let mut a = alloc_with("expandable_segments:True,large_segment_size_mb:40", 80 * GIB);
    a.malloc(3 * MIB, 0).unwrap();
    assert_eq!(reserved(&a), 40 * MIB);
    a.malloc(50 * MIB, 0).unwrap();
    assert_eq!(reserved(&a), 80 * MIB, "mapped in 40 MiB pages");
    let mut d = alloc_with("expandable_segments:True", 80 * GIB);
    d.malloc(3 * MIB, 0).unwrap();
    assert_eq!(reserved(&d), 20 * MIB);
    a.check_invariants().unwrap();
}

/// 1 GiB device, half of it allowed; 300 MiB cached, then a 400 MiB request.
fn cached_then_over_the_fraction(conf: &str) -> (Allocator<SimDevice>, Result<u64, AllocError>) {
    let mut a = alloc_with(&format!("per_process_memory_fraction:0.5,{conf}"), GIB);
    let p = a.malloc(300 * MIB, 0).unwrap();
    a.free(p).unwrap();
    let got = a.malloc(400 * MIB, 0);
    (a, got)
}

#[test]
fn throw_on_cudamalloc_oom_refuses_a_segment_past_the_fraction_without_releasing_and_retrying() {
    // Without it: the segment is refused, the cache released, and the retry succeeds.
    let (a, got) = cached_then_over_the_fraction("pytorch_version:2.12");
    assert!(got.is_ok());
    let s = a.stats();
    assert_eq!((s.num_alloc_retries, s.num_ooms, s.num_oom_rejections), (1, 0, Some(0)));
    assert_eq!(reserved(&a), 400 * MIB);
    // With it (2.12 on): out of memory at once, the cache untouched, counted as a rejection.
    for version in ["2.12", "2.15"] {
        let (a, got) =
            cached_then_over_the_fraction(&format!("pytorch_version:{version},throw_on_cudamalloc_oom:True"));
        assert!(matches!(got, Err(AllocError::OutOfMemory(_))), "{version}: {got:?}");
        let s = a.stats();
        assert_eq!((s.num_alloc_retries, s.num_ooms, s.num_oom_rejections), (0, 1, Some(1)), "{version}");
        assert_eq!(reserved(&a), 300 * MIB, "{version}: nothing released");
        let flat = s.flat();
        assert!(flat.contains(&("num_oom_rejections".to_string(), 1)), "{version}");
        a.check_invariants().unwrap();
    }
    // A request that fits under the fraction is served as before.
    let mut a = alloc_with("per_process_memory_fraction:0.5,throw_on_cudamalloc_oom:True", GIB);
    a.malloc(500 * MIB, 0).unwrap();
    assert_eq!(a.stats().num_oom_rejections, Some(0));
}

#[test]
fn only_releases_from_2_12_report_num_oom_rejections() {
    for version in VERSIONS {
        let a = alloc_with(&format!("pytorch_version:{}", version.name()), GIB);
        let has = a.stats().flat().iter().any(|(k, _)| k == "num_oom_rejections");
        assert_eq!(has, version >= PyTorchVersion::V2_12, "{}", version.name());
    }
}
