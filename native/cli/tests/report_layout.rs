//! How `compare` and `advise` lay their reports out, end to end: within 100 columns unless
//! `--wide`, configs of equal figures in one row, and a config recommended only when it beats
//! the default by the margin `advise` states.

use std::process::Command;

fn report(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cachalot")).args(args).output().expect("run cachalot");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&report(args)).expect("JSON")
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn compare_and_advise_fit_100_columns_unless_wide() {
    for args in [
        &["compare", "--passes", "3"][..],
        &["compare", "mixed_fc_conv", "--passes", "3"],
        &["advise", "mixed_fc_conv"],
        &["advise", "gpt2_train"],
    ] {
        let text = report(args);
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{args:?}: {} columns:\n{line}", line.chars().count());
        }
        // The limit bites: the same report unwrapped is wider.
        let wide = report(&[args, &["--wide"]].concat());
        assert!(widest(&wide) > 100, "{args:?} --wide fits anyway:\n{wide}");
    }
}

#[test]
fn configs_of_equal_figures_share_one_row() {
    let ranked = json(&["advise", "mixed_fc_conv", "--json"]);
    let ranked = ranked.as_array().unwrap();
    let figures = |c: &serde_json::Value| {
        ["peak_reserved_bytes", "reserved_over_requested", "device_calls", "warm_device_calls", "ooms"]
            .map(|k| c[k].to_string())
    };
    let default = ranked.iter().find(|c| c["config"] == "policy:pytorch").unwrap();
    let equal = ranked.iter().filter(|c| figures(c) == figures(default)).count() - 1;
    assert!(equal > 1, "nothing to collapse: {default}");
    let text = report(&["advise", "mixed_fc_conv"]);
    assert!(text.contains(&format!(" policy:pytorch (+{equal} equal) ")), "{text}");
    let rows = |t: &str| t.lines().filter(|l| l.contains(" policy:")).count();
    let all = report(&["advise", "mixed_fc_conv", "--all"]);
    assert_eq!(rows(&all), ranked.len(), "{all}");
    assert!(rows(&text) <= ranked.len() - equal, "{text}");
    assert!(!all.contains("equal)"), "{all}");
}

/// gpt2_train's best config by memory, page_slack:0, saves 0.14% of the default's peak for
/// more driver calls: advise keeps the default, and says why.
#[test]
fn a_config_better_by_less_than_the_margin_is_not_recommended() {
    let ranked = json(&["advise", "gpt2_train", "--json"]);
    let ranked = ranked.as_array().unwrap();
    let peak = |conf: &str| {
        ranked.iter().find(|c| c["config"] == conf).unwrap()["peak_reserved_bytes"].as_u64().unwrap() as f64
    };
    assert_eq!(ranked[0]["config"], "policy:cachalot,page_slack:0");
    let saved = 1.0 - peak("policy:cachalot,page_slack:0") / peak("policy:cachalot");
    assert!(saved > 0.0 && saved < 0.01, "saves {saved}");
    let text = report(&["advise", "gpt2_train"]);
    assert!(text.lines().any(|l| l == "CACHALOT_ALLOC_CONF=policy:cachalot"), "{text}");
    assert!(!text.contains("CACHALOT_ALLOC_CONF=policy:cachalot,page_slack:0"), "{text}");
    assert!(text.contains("no config tried beats the default by the margin"), "{text}");
    let rule = "at least 1% less peak reserved memory with at most 10% more driver calls in the first pass";
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat(&text).contains(rule), "{text}");
    assert!(flat(&report(&["advise", "--help"])).contains(rule), "the help does not state the rule");
}

/// A config that beats the default by the margin is recommended: on mixed_fc_conv
/// expandable_segments:True saves PyTorch 6% of its default's peak, which is worth its extra
/// first-pass driver calls (the rule's 5% clause).
#[test]
fn a_config_better_by_the_margin_is_recommended() {
    let text = report(&["advise", "mixed_fc_conv"]);
    assert!(text.lines().any(|l| l == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"), "{text}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("or at least 5% less peak reserved memory whatever its driver calls"), "{text}");
}
