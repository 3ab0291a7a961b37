//! Prose for the reports, filled to a width: words joined with spaces and a line broken
//! before the word that would pass the width, so a sentence of variable length (a trace's
//! description, a config string) stays within the terminal the tables are fitted to.
//!
//! Invariant: no line is wider than the width unless one word alone is; the words and their
//! order are kept, and a figure stays on one line with its unit ("1.36 GiB").

/// `text`'s words in lines of at most `width` characters, the lines after the first
/// starting with `indent`.
pub fn fill(text: &str, width: usize, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in words(text) {
        let word = word.as_str();
        if !line.trim().is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line = indent.to_string();
        } else if !line.trim().is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out
}

/// A report's `key value` line filled to `width`: `value`'s words after `key`, the lines
/// after the first indented to where the value starts, so the keys stay a column. A line
/// break in `value` is kept (a phrase a reader, or a script, looks for stays whole on its line).
pub fn field(key: &str, value: &str, width: usize) -> String {
    let indent = " ".repeat(key.chars().count());
    let body_width = width.saturating_sub(indent.len()).max(20);
    let body: Vec<String> = value.lines().map(|part| fill(part, body_width, "")).collect();
    let body = body.join("\n");
    let mut out = String::from(key);
    for (i, line) in body.lines().enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(&indent);
        }
        out.push_str(line);
    }
    out
}

/// Byte units: a word that is one (with its punctuation) joins the figure before it.
const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];

/// `text`'s words, a figure and its unit as one.
fn words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let unit = UNITS.contains(&word.trim_end_matches(|c: char| c.is_ascii_punctuation()));
        let after_figure = words.last().is_some_and(|w| w.ends_with(|c: char| c.is_ascii_digit()));
        match words.last_mut() {
            Some(last) if unit && after_figure => {
                last.push(' ');
                last.push_str(word);
            }
            _ => words.push(word.to_string()),
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn a_field_s_value_wraps_under_itself() {
        let text =
            super::field("cpu cost        ", "109.7 ns/op warm (median of 5, decision memo off), 158.2 cold", 40);
        assert_eq!(text, "cpu cost        109.7 ns/op warm (median\n                of 5, decision memo\n                off), 158.2 cold");
        assert!(text.lines().all(|l| l.chars().count() <= 40), "{text}");
    }

    #[test]
    fn a_field_keeps_the_value_s_own_line_breaks() {
        let text = super::field("cpu cost  ", "9.5 ns/op warm, 80.1 cold;\nhost CPU, simulated device", 60);
        assert_eq!(text, "cpu cost  9.5 ns/op warm, 80.1 cold;\n          host CPU, simulated device");
    }

    #[test]
    fn lines_break_between_words_within_the_width() {
        let text = "69203 operations (34603 allocations, 34600 frees), 3 allocations live at the end";
        let filled = fill(text, 40, "  ");
        assert_eq!(filled, "69203 operations (34603 allocations,\n  34600 frees), 3 allocations live at\n  the end");
        assert_eq!(filled.split_whitespace().collect::<Vec<_>>(), text.split_whitespace().collect::<Vec<_>>());
    }

    #[test]
    fn a_figure_keeps_its_unit_on_its_line() {
        let filled = fill("the trace holds 1.36 GiB live at once", 20, "  ");
        assert_eq!(filled, "the trace holds\n  1.36 GiB live at\n  once");
    }
}
