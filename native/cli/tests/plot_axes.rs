//! The plots' axes and lines, read back from the SVG: round tick values on both axes, the
//! capacity as a dashed line when one is given, requested bytes drawn over allocated, and
//! the file written said on stderr.

use std::process::Command;

use crate::scratch::Scratch;

/// Runs cachalot with `--plot` into a fresh file; returns the SVG and stderr.
fn plot(name: &str, args: &[&str]) -> (String, String) {
    let dir = Scratch::new("axes");
    let path = dir.join(format!("{name}.svg"));
    let out = Command::new(env!("CARGO_BIN_EXE_cachalot"))
        .args(args)
        .args(["--passes", "3", "--plot", path.to_str().unwrap()])
        .output()
        .expect("run cachalot");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {err}");
    assert!(err.contains(&format!("cachalot: wrote {}", path.display())), "{err}");
    (std::fs::read_to_string(&path).unwrap(), err)
}

/// The values of the ticks of class `class`, in the unit of their labels.
fn ticks(doc: &roxmltree::Document, class: &str) -> Vec<(f64, f64)> {
    doc.descendants()
        .filter(|n| n.attribute("class") == Some(class))
        .map(|n| {
            let label = n.text().unwrap();
            let value = label.split(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("tick '{label}'"));
            (value, n.attribute("y").unwrap().parse().unwrap())
        })
        .collect()
}

/// Ticks from 0 in equal steps of 1, 2 or 5 times a power of ten.
fn assert_round(values: &[f64], axis: &str) {
    assert!(values.len() >= 3, "{axis}: {values:?}");
    assert_eq!(values[0], 0.0, "{axis}: {values:?}");
    let step = values[1];
    let mantissa = step / 10f64.powf(step.log10().floor());
    assert!([1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9), "{axis}: step {step} in {values:?}");
    for (i, v) in values.iter().enumerate() {
        assert!((v - i as f64 * step).abs() < 1e-9 * step.max(1.0), "{axis}: {values:?}");
    }
}

#[test]
fn ticks_are_round_and_the_capacity_is_a_dashed_line() {
    for (name, args) in [
        ("replay", &["replay", "mixed_fc_conv", "--capacity", "1.75GiB"][..]),
        ("compare", &["compare", "mixed_fc_conv", "--capacity", "1.75GiB"]),
    ] {
        let (svg, _) = plot(name, args);
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let y = ticks(&doc, "tick-y");
        let labels: Vec<&str> =
            doc.descendants().filter(|n| n.attribute("class") == Some("tick-y")).filter_map(|n| n.text()).collect();
        assert!(labels.iter().skip(1).all(|l| l.ends_with(" GiB")), "{name}: {labels:?}");
        assert_round(&y.iter().map(|t| t.0).collect::<Vec<_>>(), name);
        assert_round(&ticks(&doc, "tick-x").iter().map(|t| t.0).collect::<Vec<_>>(), name);
        // The capacity line: dashed, at 1.75 GiB on the scale the 0 and 1 GiB grid lines
        // (label y - 4) set.
        let lines: Vec<_> = doc.descendants().filter(|n| n.attribute("class") == Some("capacity")).collect();
        assert_eq!(lines.len(), 1, "{name}: one capacity line");
        assert!(lines[0].attribute("stroke-dasharray").is_some(), "{name}: not dashed");
        let at: f64 = lines[0].attribute("y1").unwrap().parse().unwrap();
        let grid = |v: f64| y.iter().find(|t| t.0 == v).map(|t| t.1 - 4.0).unwrap();
        let want = grid(0.0) + (grid(1.0) - grid(0.0)) * 1.75;
        assert!((at - want).abs() < 0.5, "{name}: capacity at {at}, not {want}; ticks {y:?}");
        assert!(svg.contains("capacity 1.75 GiB (dashed)"), "{name}: no legend for the capacity");
    }
    let (svg, _) = plot("no-capacity", &["replay", "mixed_fc_conv"]);
    assert!(!svg.contains(r#"class="capacity""#), "a capacity line nobody asked for");
}

#[test]
fn requested_is_drawn_over_allocated() {
    let (svg, _) = plot("layers", &["replay", "mixed_fc_conv", "--config", "policy:pytorch"]);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let strokes: Vec<&str> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "polyline")
        .map(|n| n.attribute("stroke").unwrap())
        .collect();
    let at = |colour: &str| strokes.iter().position(|s| *s == colour).unwrap_or_else(|| panic!("{strokes:?}"));
    assert!(at("#2ca02c") > at("#1f77b4"), "requested (green) drawn before allocated (blue): {strokes:?}");
}
