//! A table of text for the reports: a header and rows of cells, one column of labels
//! (config strings) left-aligned and the figures right-aligned, two spaces between columns,
//! fitted to a width: a label too long for what the figures leave is wrapped after its
//! commas onto lines of its own below, so no line passes the width while a label can be
//! broken.
//!
//! Invariant: every column is as wide as its widest cell (header included, wrapped labels
//! counted by their longest line), so the rows of one table line up whatever the labels.

/// The widest a report's line is by default: a terminal of 100 columns shows it unwrapped.
pub const DEFAULT_WIDTH: usize = 100;

/// How a column's cells sit in it.
#[derive(Clone, Copy, PartialEq)]
pub enum Align {
    /// Left-aligned and wrapped after commas when too long: the table's one label column.
    Label,
    /// Right-aligned, never wrapped.
    Figure,
}

/// A table being filled in, rendered by [`Table::render`].
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns, as (header, alignment).
    pub fn new(columns: &[(&str, Align)]) -> Self {
        Table {
            header: columns.iter().map(|(h, _)| h.to_string()).collect(),
            align: columns.iter().map(|(_, a)| *a).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; cells past the header's count are dropped, missing ones left blank.
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as lines, each no wider than `width` where the labels allow (`None`: as
    /// wide as the longest label makes it).
    pub fn render(&self, width: Option<usize>) -> Vec<String> {
        let widest = |i: usize| {
            std::iter::once(&self.header[i]).chain(self.rows.iter().map(|r| &r[i])).map(|c| c.chars().count()).max()
        };
        let mut widths: Vec<usize> = (0..self.header.len()).map(|i| widest(i).unwrap_or(0)).collect();
        let label = self.align.iter().position(|a| *a == Align::Label);
        if let (Some(l), Some(width)) = (label, width) {
            let others: usize = widths.iter().enumerate().filter(|(i, _)| *i != l).map(|(_, w)| w + 2).sum();
            let room = width.saturating_sub(others).max(self.header[l].chars().count());
            widths[l] = widths[l].min(room);
        }
        let mut lines = vec![self.line(&self.header, &widths, label)];
        for row in &self.rows {
            let pieces = match label {
                Some(l) => wrap(&row[l], widths[l]),
                None => vec![String::new()],
            };
            let mut first = row.clone();
            if let Some(l) = label {
                first[l] = pieces[0].clone();
            }
            lines.push(self.line(&first, &widths, label));
            for piece in &pieces[1..] {
                let mut more = vec![String::new(); row.len()];
                more[label.unwrap_or(0)] = piece.clone();
                lines.push(self.line(&more, &widths, label).trim_end().to_string());
            }
        }
        lines
    }

    fn line(&self, cells: &[String], widths: &[usize], label: Option<usize>) -> String {
        let cells: Vec<String> = cells
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (c, w))| if Some(i) == label { format!("{c:<w$}") } else { format!("{c:>w$}") })
            .collect();
        cells.join("  ")
    }
}

/// `text` broken after commas into pieces of at most `width` characters (a piece with no
/// comma to break at is left whole).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut pieces = vec![String::new()];
    for part in text.split_inclusive(',') {
        let last = pieces.last_mut().expect("never empty");
        if !last.is_empty() && last.chars().count() + part.chars().count() > width {
            pieces.push(part.to_string());
        } else {
            last.push_str(part);
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut t = Table::new(&[("config", Align::Label), ("peak", Align::Figure)]);
        t.row(vec!["policy:pytorch,max_split_size_mb:128".into(), "1.61 GiB".into()]);
        t.row(vec!["policy:cachalot".into(), "14.14 GiB".into()]);
        t
    }

    #[test]
    fn rows_line_up_and_figures_align_right() {
        let lines = table().render(None);
        assert_eq!(lines[1], "policy:pytorch,max_split_size_mb:128   1.61 GiB");
        assert_eq!(lines[2], "policy:cachalot                       14.14 GiB");
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{lines:#?}");
    }

    #[test]
    fn a_long_label_wraps_after_a_comma_within_the_width() {
        let lines = table().render(Some(30));
        assert_eq!(lines[1], "policy:pytorch,       1.61 GiB");
        assert_eq!(lines[2], "max_split_size_mb:128");
        assert!(lines.iter().all(|l| l.len() <= 30), "{lines:#?}");
    }
}
