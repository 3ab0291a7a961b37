//! Files and command lines from someone else, end to end through the `cachalot` binary: what
//! issue 41 found a new user could do to the tool, each now a clear error with exit status 1
//! (2 for a command line), never a panic, an abort or a silently ignored value. The memory
//! each takes is checked against the release build by `native/cli/tests/bombs.sh`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output};

fn cachalot(args: &[&OsStr], env: &[(&str, &OsStr)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cachalot"));
    c.args(args).env_remove("CACHALOT_ALLOC_CONF");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run cachalot")
}

/// Fails unless the run exited with `code` and one error line that holds `needle`.
fn refused(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.starts_with("cachalot: error: ") && err.contains(needle), "expected '{needle}' in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error() {
    let out = cachalot(&[os("replay"), OsStr::from_bytes(b"tr\xffce.csv")], &[]);
    refused(&out, 2, r"argument 2 is not valid UTF-8: 'tr\xffce.csv'");
}

/// The library refuses a config that is not UTF-8; the tool replayed under the defaults.
#[test]
fn a_config_in_the_environment_that_is_not_utf8_is_refused_not_ignored() {
    let conf = OsStr::from_bytes(b"policy:pytorch\xff");
    for command in ["replay", "compare"] {
        let out =
            cachalot(&[os(command), os("mixed_fc_conv"), os("--passes"), os("3")], &[("CACHALOT_ALLOC_CONF", conf)]);
        refused(&out, 2, r"CACHALOT_ALLOC_CONF is not valid UTF-8: 'policy:pytorch\xff'");
    }
}
