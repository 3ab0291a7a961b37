//! The ticks of a plot's axes: round values, steps of 1, 2 or 5 times a power of ten (of the
//! byte unit the axis is labelled in, for bytes), from 0 up to the axis' end, so a reader
//! reads a plot's levels off its labels without arithmetic.
//!
//! Invariant: ticks start at 0, are evenly spaced by a 1-2-5 step, never pass the axis'
//! end, and number at most the count asked for plus one (the 0).

const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];

/// The smallest step of 1, 2 or 5 times a power of ten that divides `end` into at most
/// `most` steps (`most` at least 1).
pub fn step(end: f64, most: usize) -> f64 {
    let raw = end.max(f64::MIN_POSITIVE) / most.max(1) as f64;
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|s| *s >= raw * (1.0 - 1e-9)).unwrap_or(10.0 * power)
}

/// 0, s, 2s, … up to `end`, for the step `s`.
fn multiples(end: f64, s: f64) -> Vec<f64> {
    (0..).map(|i| i as f64 * s).take_while(|v| *v <= end * (1.0 + 1e-9)).collect()
}

/// `v` with the decimals a step `s` needs (none for a step of 1 or more).
fn number(v: f64, s: f64) -> String {
    let decimals = (-s.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

/// Ticks of a byte axis from 0 to `end` bytes, at most `most` steps: each tick's bytes and
/// its label, in the largest binary unit `end` holds at least one of ("0", "0.5 GiB", "1.0 GiB").
pub fn bytes(end: f64, most: usize) -> Vec<(u64, String)> {
    let mut unit = 0;
    while unit < UNITS.len() - 1 && end >= 1024f64.powi(unit as i32 + 1) {
        unit += 1;
    }
    let scale = 1024f64.powi(unit as i32);
    let s = step(end / scale, most);
    let label = |v: f64| if v == 0.0 { "0".to_string() } else { format!("{} {}", number(v, s), UNITS[unit]) };
    multiples(end / scale, s).into_iter().map(|v| ((v * scale) as u64, label(v))).collect()
}

/// Ticks of a count axis (operations) from 0 to `end`, at most `most` steps, whole numbers.
pub fn counts(end: f64, most: usize) -> Vec<(f64, String)> {
    let s = step(end, most).max(1.0);
    multiples(end, s).into_iter().map(|v| (v, number(v, s))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(step(69203.0, 8), 10000.0);
        assert_eq!(step(9545.0, 8), 2000.0);
        assert_eq!(step(1.74, 5), 0.5);
        assert_eq!(step(15.3, 5), 5.0);
        assert_eq!(step(1.0, 5), 0.2);
    }

    #[test]
    fn byte_ticks_are_round_in_their_unit_and_stay_within_the_axis() {
        let gib = 1024f64 * 1024.0 * 1024.0;
        let ticks = bytes(1.74 * gib, 5);
        let labels: Vec<&str> = ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["0", "0.5 GiB", "1.0 GiB", "1.5 GiB"]);
        assert_eq!(ticks[2].0, 1 << 30);
        let labels: Vec<String> = bytes(600.0 * 1024.0 * 1024.0, 5).into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0", "200 MiB", "400 MiB", "600 MiB"]);
        let counts: Vec<String> = counts(9545.0, 8).into_iter().map(|t| t.1).collect();
        assert_eq!(counts, ["0", "2000", "4000", "6000", "8000"]);
    }
}
