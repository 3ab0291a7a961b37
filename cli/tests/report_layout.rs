//! How `compare` lays its report out, end to end: within 100 columns unless `--wide`.

use std::process::Command;

fn report(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cachalot")).args(args).output().expect("run cachalot");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn compare_fits_100_columns_unless_wide() {
    for args in [&["compare", "--passes", "3"][..], &["compare", "mixed_fc_conv", "--passes", "3"]] {
        let text = report(args);
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{args:?}: {} columns:\n{line}", line.chars().count());
        }
        // The limit bites: the same report unwrapped is wider.
        let wide = report(&[args, &["--wide"]].concat());
        assert!(widest(&wide) > 100, "{args:?} --wide fits anyway:\n{wide}");
    }
}
