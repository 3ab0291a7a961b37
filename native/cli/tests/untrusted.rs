//! Files and command lines from someone else, end to end through the `cachalot` binary: what
//! issue 41 found a new user could do to the tool, each now a clear error with exit status 1
//! (2 for a command line), never a panic, an abort or a silently ignored value. The memory
//! each takes is checked against the release build by `native/cli/tests/bombs.sh`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output};

use crate::scratch::Scratch;

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

/// Runs `cachalot replay FILE` on `bytes` under a 2 GiB address-space limit, so that a reader
/// that takes memory in proportion to what the file expands to aborts instead of passing.
fn replay_bytes(name: &str, bytes: &[u8], extra: &[&str]) -> Output {
    let dir = Scratch::new("untrusted");
    let path = dir.file(name, bytes);
    Command::new("sh")
        .args(["-c", r#"ulimit -v 2097152; exec "$@""#, "sh", env!("CARGO_BIN_EXE_cachalot"), "replay"])
        .arg(&path)
        .args(extra)
        .env_remove("CACHALOT_ALLOC_CONF")
        .output()
        .expect("run cachalot")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn a_deeply_nested_pickle_is_refused_not_a_stack_overflow() {
    let deep = [&b"\x80\x02"[..], &b"]".repeat(10_000), &b"a".repeat(9_999), b"."].concat();
    refused(
        &replay_bytes("d.pickle", &deep, &[]),
        1,
        "d.pickle: the pickle nests values deeper than 64 (the limit on nesting); raise the limit with --max-depth N",
    );
}

#[test]
fn pickles_that_share_values_are_refused_before_they_expand() {
    let doubled = [&b"\x80\x02X"[..], &1024u32.to_le_bytes(), &[b'B'; 1024], &b"2\x86".repeat(40), b"."].concat();
    let mib = 1u32 << 20;
    let text = [&b"X"[..], &mib.to_le_bytes(), &vec![b'm'; mib as usize], b"q\x00"].concat();
    let memo = [&b"\x80\x02]("[..], &text, &b"h\x00".repeat(2999), b"e."].concat();
    for (name, bytes) in [("doubled.pickle", doubled), ("memo.pickle", memo)] {
        let out = replay_bytes(name, &bytes, &[]);
        refused(&out, 1, "values come to more than 1073741824 bytes written out");
        refused(&out, 1, "raise the limit with --max-bytes SIZE");
    }
}

/// Text without line breaks, and more text than the limit, stop where the limit is met.
#[test]
fn endless_lines_and_text_past_the_limit_are_refused() {
    let zeros = gzip(&vec![0u8; 16 << 20]);
    refused(&replay_bytes("zeros.csv.gz", &zeros, &[]), 1, "a line longer than 65536 bytes");
    let newlines = gzip(&vec![b'\n'; 3 << 20]);
    let out = replay_bytes("newlines.csv.gz", &newlines, &["--max-bytes", "2MiB"]);
    refused(
        &out,
        1,
        "more than 2097152 bytes of text (the limit on bytes read); raise the limit with --max-bytes SIZE",
    );
    let csv = "Time,Action,Pointer,Size\n1,allocate,0x10,512\n2,free,0x10,512\n3,allocate,0x10,512\n";
    refused(
        &replay_bytes("t.csv", csv.as_bytes(), &["--max-events", "2"]),
        1,
        "t.csv: line 4: the trace holds more than 2 rows or events",
    );
}

/// `cachalot replay /dev/zero` and `yes | cachalot replay -` grew until an allocation failed.
#[test]
fn endless_inputs_end_at_a_limit() {
    refused(
        &cachalot(&[os("replay"), os("/dev/zero")], &[]),
        1,
        "zero: line 1: the trace holds a line longer than 65536 bytes",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachalot"))
        .args(["replay", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        while stdin.write_all(&b"y\n".repeat(4096)).is_ok() {}
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    refused(&out, 1, "stdin: invalid trace, line 1: header lacks the 'Time' column");
}
