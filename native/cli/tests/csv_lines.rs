//! The tool reads a CSV trace a line at a time from a stream, and counts a run of blank lines
//! at once (a file of newlines is read in runs); what it reads must be what the core reads
//! from the whole text: the same operations, times and line of each, and an error at the same
//! line, whatever the blank lines, line endings and byte-order mark around the rows.

use cachalot_cli::trace_file::parse;
use cachalot_core::trace::parse_csv;

const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream";

/// How many blank lines go before line `i` (the header is line 0), by name.
type Blanks = (&'static str, fn(usize) -> usize);

fn rows() -> Vec<String> {
    let mut rows = Vec::new();
    for i in 0..40u64 {
        rows.push(format!("0,{},allocate,{:#x},{},0x0", 10 + i, 0x1000 * (i + 1), 512 * (i + 1)));
    }
    for i in 0..40u64 {
        rows.push(format!("0,{},free,{:#x},{},0x0", 100 + i, 0x1000 * (i + 1), 512 * (i + 1)));
    }
    rows
}

/// The text with `blank(i)` blank lines before line `i` of the rows (the header first), each
/// line ended by `end`, and `lead` before it all.
fn text(lead: &str, end: &str, blank: impl Fn(usize) -> usize, rows: &[String]) -> String {
    let mut t = String::from(lead);
    for (i, line) in std::iter::once(HEADER.to_string()).chain(rows.iter().cloned()).enumerate() {
        t += &end.repeat(blank(i));
        t += &line;
        t += end;
    }
    t + &end.repeat(blank(0))
}

#[test]
fn blank_lines_read_in_runs_give_the_core_s_reading() {
    let rows = rows();
    let mut bad = rows.clone();
    bad[57] = "0,157,bogus,0x1,1,0x0".to_string();
    let shapes: [Blanks; 4] = [
        ("none", |_| 0),
        ("one each", |_| 1),
        ("uneven", |i| (i * 7) % 5),
        ("long runs", |i| if i % 9 == 0 { 70_000 } else { 0 }),
    ];
    for (shape, blank) in shapes {
        for (lead, end) in [("", "\n"), ("\u{feff}", "\n"), ("", "\r\n"), ("\n\n", "\n")] {
            for rows in [&rows, &bad] {
                let t = text(lead, end, blank, rows);
                let what = format!("{shape}, {:?} ends, {:?} first", end, lead);
                match (parse_csv(&t), parse(t.as_bytes(), "t.csv", None)) {
                    (Ok(core), Ok(tool)) => {
                        let tool = tool.trace;
                        assert_eq!(core.ops, tool.ops, "{what}");
                        assert_eq!(core.times_us, tool.times_us, "{what}");
                        assert_eq!(core.positions, tool.positions, "{what}");
                    }
                    (Err(core), Err(tool)) => {
                        assert_eq!(tool, format!("t.csv: {core}"), "{what}");
                        assert!(core.to_string().contains("line "), "{what}: {core}");
                    }
                    (core, tool) => panic!("{what}: the core read {:?}, the tool {:?}", core.err(), tool.err()),
                }
            }
        }
    }
}
