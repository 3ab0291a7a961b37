//! Prose for the reports, filled to a width: words joined with spaces and a line broken
//! before the word that would pass the width, so a sentence of variable length (a trace's
//! description, a config string) stays within the terminal the tables are fitted to.
//!
//! Invariant: no line is wider than the width unless one word alone is; the words and their
//! order are kept.

/// `text`'s words in lines of at most `width` characters, the lines after the first
/// starting with `indent`.
pub fn fill(text: &str, width: usize, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
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

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn lines_break_between_words_within_the_width() {
        let text = "69203 operations (34603 allocations, 34600 frees), 3 allocations live at the end";
        let filled = fill(text, 40, "  ");
        assert_eq!(filled, "69203 operations (34603 allocations,\n  34600 frees), 3 allocations live at\n  the end");
        assert_eq!(filled.split_whitespace().collect::<Vec<_>>(), text.split_whitespace().collect::<Vec<_>>());
    }
}
