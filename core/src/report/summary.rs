//! `memory_summary`: the statistics as the table `torch.cuda.memory_summary()` prints, with
//! the same rows, column widths and unit rules (a unit is chosen per cell from the row's
//! "all" value, so a pool row reads in the same unit as its total).
//!
//! Invariant: every line is 77 characters wide, `|` at both ends.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::report::stats::{DeviceStats, Stat, StatArray};

/// `_format_size`: value scaled down while the reference value is at least 768 units.
fn format_size(mut size: i64, mut reference: f64) -> String {
    const UNITS: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if reference < 768.0 * 1024.0 {
            break;
        }
        unit = next;
        size = size.div_euclid(1024);
        reference /= 1024.0;
    }
    format!("{size:6} {unit}")
}

/// `_format_count`: counts scaled by thousands while the reference is at least 750 000.
fn format_count(mut count: i64, mut reference: f64) -> String {
    const UNITS: [&str; 3] = [" ", "K", "M"];
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if reference < 750.0 * 1000.0 {
            break;
        }
        unit = next;
        count = count.div_euclid(1000);
        reference /= 1000.0;
    }
    format!("{count:7} {unit} ")
}

type Formatter = fn(i64, f64) -> String;

fn row(lines: &mut Vec<String>, name: &str, stat: &Stat, reference: &Stat, f: Formatter) {
    lines.push(format!(
        " {name:<21} | {} | {} | {} | {} ",
        f(stat.current, reference.current as f64),
        f(stat.peak, reference.peak as f64),
        f(stat.allocated, reference.allocated as f64),
        f(stat.freed, reference.freed as f64),
    ));
}

/// The summary table for `stats` of device `device`; `abbreviated` leaves out the per-pool
/// rows.
pub fn memory_summary(stats: &DeviceStats, device: i32, abbreviated: bool) -> String {
    let rule = "-".repeat(75);
    let double = "=".repeat(75);
    let mut lines: Vec<String> = Vec::new();
    lines.push(double.clone());
    lines.push(format!(" {:16} cachalot memory summary, device ID {device:<21} ", ""));
    lines.push(rule.clone());
    lines.push(format!(
        "  {:9} CUDA OOMs: {:<12} | {:6} cudaMalloc retries: {:<8}  ",
        "", stats.num_ooms, "", stats.num_alloc_retries
    ));
    lines.push(double.clone());
    lines.push("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".into());
    let metrics: [(&str, &StatArray, Formatter); 9] = [
        ("Allocated memory", &stats.allocated_bytes, format_size),
        ("Active memory", &stats.active_bytes, format_size),
        ("Requested memory", &stats.requested_bytes, format_size),
        ("GPU reserved memory", &stats.reserved_bytes, format_size),
        ("Non-releasable memory", &stats.inactive_split_bytes, format_size),
        ("Allocations", &stats.allocation, format_count),
        ("Active allocs", &stats.active, format_count),
        ("GPU reserved segments", &stats.segment, format_count),
        ("Non-releasable allocs", &stats.inactive_split, format_count),
    ];
    for (name, array, f) in metrics {
        lines.push(rule.clone());
        row(&mut lines, name, &array.all, &array.all, f);
        if !abbreviated {
            row(&mut lines, "      from large pool", &array.large_pool, &array.all, f);
            row(&mut lines, "      from small pool", &array.small_pool, &array.all, f);
        }
    }
    for (name, stat) in
        [("Oversize allocations", &stats.oversize_allocations), ("Oversize GPU segments", &stats.oversize_segments)]
    {
        lines.push(rule.clone());
        row(&mut lines, name, stat, stat, format_count);
    }
    lines.push(double);
    let mut out = String::new();
    for line in lines {
        out.push('|');
        out.push_str(&line);
        out.push_str("|\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::size::Pool;

    #[test]
    fn units_follow_the_reference_value() {
        assert_eq!(format_size(512, 512.0), "   512 B  ");
        assert_eq!(format_size(8 << 20, (8 << 20) as f64), "  8192 KiB");
        assert_eq!(format_size(0, (8 << 20) as f64), "     0 KiB");
        assert_eq!(format_size(3 << 30, (3u64 << 30) as f64), "  3072 MiB");
        assert_eq!(format_count(5, 5.0), "      5   ");
        assert_eq!(format_count(2_000_000, 2e6), "   2000 K ");
    }

    #[test]
    fn table_has_pytorch_layout() {
        let mut st: DeviceStats = DeviceStats::default();
        st.allocated_bytes.increase(Pool::Small, 8 << 20);
        st.allocation.increase(Pool::Small, 1);
        let s = memory_summary(&st, 0, false);
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines.iter().all(|l| l.chars().count() == 77), "{s}");
        assert_eq!(lines.len(), 6 + 9 * 4 + 2 * 2 + 1);
        assert!(s.contains("| Allocated memory      |   8192 KiB |   8192 KiB |   8192 KiB |      0 B   |"), "{s}");
        assert!(s.contains("|       from small pool |   8192 KiB |"), "{s}");
        assert!(s.contains("| Allocations           |       1    |"), "{s}");
    }
}
