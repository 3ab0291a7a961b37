//! `advise`, explained out-of-memory and plots, end to end.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::scratch::Scratch;

use cachalot_core::replay::Step;
use cachalot_core::{parse_trace, AllocError, Allocator, Config, Replayer, SimDevice};

fn cachalot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cachalot")).args(args).output().expect("run cachalot")
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The report of a replay that ran out of memory: `replay` exits 3 after it.
fn stdout_after_oom(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn traces() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces")
}

fn load(name: &str) -> cachalot_core::Trace {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&std::fs::read(traces().join(name)).unwrap()[..]).read_to_string(&mut text).unwrap();
    parse_trace(&text).unwrap()
}

fn best_pytorch_reference(trace: &str) -> u64 {
    let text = std::fs::read_to_string(traces().join("pytorch_reference.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["trace"] == trace)
        .map(|v| v["peak_reserved"].as_u64().unwrap())
        .min()
        .unwrap()
}

#[test]
fn advise_finds_a_config_at_least_as_good_as_pytorchs_best() {
    for name in ["gpt2_train", "resnet50_train", "mixed_fc_conv"] {
        let ranked: serde_json::Value = serde_json::from_str(&stdout(&cachalot(&["advise", name, "--json"]))).unwrap();
        let best = &ranked[0];
        let want = best_pytorch_reference(&format!("{name}.csv.gz"));
        assert!(best["peak_reserved_bytes"].as_u64().unwrap() <= want, "{name}: {best} vs PyTorch's best {want}");
        assert_eq!(best["ooms"], 0);
        let text = stdout(&cachalot(&["advise", name]));
        assert!(text.contains("PYTORCH_CUDA_ALLOC_CONF=") && text.contains("CACHALOT_ALLOC_CONF="), "{text}");
        // Training loops make a few times more calls in their first pass under cachalot's
        // policy than under expandable segments (resnet50_train 1,974 against 492): not the
        // order of magnitude that names a config for it.
        assert!(!text.contains("fewer driver calls in the first pass"), "{name}: {text}");
    }
}

#[test]
fn advise_shows_the_learned_layout_settling_where_pages_kept_moving() {
    // Without a learned layout mixed_fc_conv moves pages on every warm pass under cachalot's
    // policy; learning it, the last warm pass makes no driver call at all, so advise has no
    // quieter config to name (page slack only traded memory for fewer moves).
    let ranked: serde_json::Value =
        serde_json::from_str(&stdout(&cachalot(&["advise", "mixed_fc_conv", "--json"]))).unwrap();
    let find = |config: &str| ranked.as_array().unwrap().iter().find(|c| c["config"] == config).unwrap().clone();
    let (plain, unlearned) = (find("policy:cachalot"), find("policy:cachalot,learn_layout:False"));
    let warm = |c: &serde_json::Value| c["warm_device_calls"].as_f64().unwrap();
    assert_eq!(warm(&plain), 0.0, "{plain}");
    assert!(warm(&unlearned) > 100.0, "{unlearned}");
    assert!(plain["peak_reserved_bytes_all_passes"].as_u64() < unlearned["peak_reserved_bytes_all_passes"].as_u64());
    let text = stdout(&cachalot(&["advise", "mixed_fc_conv"]));
    assert!(text.lines().any(|l| l == "CACHALOT_ALLOC_CONF=policy:cachalot"), "{text}");
    assert!(!text.contains("fewer driver calls once warm"), "{text}");
}

/// Replays until the first out-of-memory and returns its report and the allocator then.
fn first_oom(conf: &str, capacity: u64) -> (Box<cachalot_core::OomReport>, Allocator<SimDevice>) {
    let trace = load("gpt2_train.csv.gz");
    let mut a = Allocator::new(SimDevice::new(capacity), Config::parse(conf).unwrap());
    let mut r = Replayer::new(trace.slots);
    for op in &trace.ops {
        if let Step::OutOfMemory(report) = r.step(&mut a, op).unwrap() {
            return (report, a);
        }
    }
    panic!("no out of memory at {capacity} bytes");
}

#[test]
fn out_of_memory_explanation_figures_match_the_blocks() {
    let capacity = 15 << 30;
    let (report, a) = first_oom("policy:pytorch", capacity);
    let segments = a.segments(0);
    let inactive = |pool: &str| -> u64 {
        segments
            .iter()
            .filter(|s| s.segment_type == pool)
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == "inactive")
            .map(|b| b.size)
            .sum()
    };
    assert_eq!(report.cached_by_pool, [inactive("small"), inactive("large")]);
    let largest = segments.iter().flat_map(|s| &s.blocks).filter(|b| b.state == "inactive").map(|b| b.size).max();
    assert_eq!(Some(report.largest_free_block()), largest);
    let spot = report.largest_free.as_ref().unwrap();
    let seg = segments.iter().find(|s| s.address == spot.segment_addr).expect("segment named by the report");
    assert!(seg.blocks.iter().any(|b| b.address == spot.addr && b.size == spot.size));
    let pinned: Vec<_> = segments.iter().filter(|s| s.active_size > 0 && s.total_size > s.active_size).collect();
    assert_eq!(report.pinned_segments, pinned.len() as u64);
    assert_eq!(report.pinned_bytes, pinned.iter().map(|s| s.total_size - s.active_size).sum::<u64>());
    assert_eq!(report.reserved, a.reserved_bytes());
    assert!(report.rounded > report.largest_free_block(), "it did not fit in the largest cached block");
    let text = AllocError::OutOfMemory(report.clone()).to_string();
    assert!(text.contains("Why nothing fit") && text.contains("pinned"), "{text}");
}

#[test]
fn the_suggested_config_avoids_the_out_of_memory() {
    let text = stdout_after_oom(&cachalot(&[
        "replay",
        "gpt2_train",
        "--config",
        "policy:pytorch",
        "--capacity",
        "15GiB",
        "--passes",
        "3",
    ]));
    assert!(text.contains("first OOM       operation"), "{text}");
    let line = text.lines().find(|l| l.starts_with("avoided by")).expect("a suggestion");
    let config = line.split_whitespace().nth(2).expect("a config on the line");
    let v: serde_json::Value = serde_json::from_str(&stdout(&cachalot(&[
        "replay",
        "gpt2_train",
        "--config",
        config,
        "--capacity",
        "15GiB",
        "--json",
        "--passes",
        "3",
    ])))
    .unwrap();
    assert_eq!(v["ooms"], 0, "{config} was suggested but ran out of memory");
}

fn svg_with_text(path: &std::path::Path, needles: &[String]) {
    let svg = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let text: String = doc.descendants().filter_map(|n| n.text()).collect::<Vec<_>>().join("\n");
    for n in needles {
        assert!(text.contains(n.as_str()), "'{n}' not in the plot's text");
    }
}

fn human(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[test]
fn plots_are_valid_svg_with_the_peak() {
    let dir = Scratch::new("plot");
    let one = dir.join("replay.svg");
    let v: serde_json::Value = serde_json::from_str(&stdout(&cachalot(&[
        "replay",
        "resnet50_train",
        "--config",
        "policy:pytorch",
        "--json",
        "--passes",
        "3",
        "--plot",
        one.to_str().unwrap(),
    ])))
    .unwrap();
    svg_with_text(&one, &[format!("peak reserved {}", human(v["peak_reserved_bytes"].as_u64().unwrap()))]);
    let many = dir.join("compare.svg");
    let rows: serde_json::Value = serde_json::from_str(&stdout(&cachalot(&[
        "compare",
        "resnet50_train",
        "--json",
        "--passes",
        "3",
        "--plot",
        many.to_str().unwrap(),
    ])))
    .unwrap();
    let peaks: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!("{} (peak {})", r["config"].as_str().unwrap(), human(r["peak_reserved_bytes"].as_u64().unwrap()))
        })
        .collect();
    svg_with_text(&many, &peaks);
    let oom = dir.join("oom.svg");
    stdout_after_oom(&cachalot(&[
        "replay",
        "gpt2_train",
        "--config",
        "policy:pytorch",
        "--capacity",
        "15GiB",
        "--passes",
        "3",
        "--plot",
        oom.to_str().unwrap(),
    ]));
    svg_with_text(&oom, &["1 out-of-memory events".to_string()]);
}

#[test]
fn overlaid_peak_labels_do_not_overlap() {
    // On gpt2_train, expandable segments and cachalot's policy peak 1 GiB apart at the same
    // operation: their labels would sit on top of each other unless moved apart.
    let dir = Scratch::new("labels");
    let path = dir.join("labels.svg");
    stdout(&cachalot(&["compare", "gpt2_train", "--passes", "3", "--plot", path.to_str().unwrap()]));
    let svg = std::fs::read_to_string(&path).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let mut ys: Vec<f64> = doc
        .descendants()
        .filter(|n| n.is_element() && n.text().is_some_and(|t| t.starts_with("peak reserved")))
        .map(|n| n.attribute("y").unwrap().parse().unwrap())
        .collect();
    assert_eq!(ys.len(), 4, "one peak label per config");
    ys.sort_by(f64::total_cmp);
    for pair in ys.windows(2) {
        assert!(pair[1] - pair[0] >= 12.0, "peak labels {pair:?} overlap");
    }
}

/// The speed issue's bound on host memory: at most 64 bytes of block metadata a live block,
/// on every reference trace under both policies (`replay --json`'s
/// `metadata_bytes_per_block`, peaks over a cold and a warm pass). A cache of emptied class
/// vectors once took mixed_fc_conv to 67.8 under PyTorch's policy; this fails for such a
/// change.
#[test]
fn block_metadata_stays_within_64_bytes_a_live_block() {
    for name in ["gpt2_train", "resnet50_train", "mixed_fc_conv"] {
        for config in ["policy:pytorch", "policy:cachalot"] {
            let out: serde_json::Value =
                serde_json::from_str(&stdout(&cachalot(&["replay", name, "--config", config, "--json"]))).unwrap();
            let per_block = out["metadata_bytes_per_block"].as_f64().unwrap();
            assert!(per_block <= 64.0, "{name} under {config}: {per_block} bytes a block");
            // Counted in full: more than a block's 40-byte slab record, with its entry in the
            // address table or the free index.
            assert!(per_block > 40.0, "{name} under {config}: {per_block} bytes a block");
        }
    }
}
