//! JavaScript numbers as byte counts, addresses and streams.
//!
//! Invariant: a number converts only if it is finite, a whole number, not negative and at
//! most 2^53 (the largest integer an `f64` holds exactly); anything else is an error that
//! names what the number was for.

/// The largest integer a JavaScript number holds exactly.
pub const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

/// `x` as a `u64`, or a message naming `what` it was meant to be.
pub fn to_u64(x: f64, what: &str) -> Result<u64, String> {
    if !x.is_finite() || x < 0.0 || x.fract() != 0.0 || x > MAX_EXACT {
        return Err(format!("{what} must be a whole number of at least 0 and at most 2^53, got {}", as_js_writes(x)));
    }
    Ok(x as u64)
}

use cachalot_core::sim::MAX_CAPACITY;

/// `x` as a simulated device's capacity: a whole number of bytes, 1 to [`MAX_CAPACITY`].
pub fn to_capacity(x: f64) -> Result<u64, String> {
    match to_u64(x, "capacity") {
        Ok(capacity) if capacity > 0 && capacity <= MAX_CAPACITY => Ok(capacity),
        _ => Err(format!(
            "capacity must be a whole number of bytes from 1 to 1 TiB ({MAX_CAPACITY} bytes, the simulated address \
             space), got {}",
            as_js_writes(x)
        )),
    }
}

/// `x` as a memory fraction: a number from 0 to 1 (1 lifts the limit), named in JavaScript's
/// spelling otherwise.
pub fn to_fraction(x: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("memory fraction must be a number from 0 to 1, got {}", as_js_writes(x)))
    }
}

/// `x` as JavaScript writes it: `Infinity` where Rust writes `inf`.
fn as_js_writes(x: f64) -> String {
    match x {
        f64::INFINITY => "Infinity".into(),
        f64::NEG_INFINITY => "-Infinity".into(),
        _ => format!("{x}"),
    }
}

/// `x` as a JavaScript number (exact for every value below 2^53).
pub fn to_f64(x: u64) -> f64 {
    x as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_convert_and_others_are_named() {
        assert_eq!(to_u64(4096.0, "size"), Ok(4096));
        assert_eq!(to_u64(MAX_EXACT, "size"), Ok(1 << 53));
        for bad in [-1.0, 1.5, f64::NAN, f64::INFINITY, MAX_EXACT * 2.0] {
            let e = to_u64(bad, "address").unwrap_err();
            assert!(e.starts_with("address must be"), "{e}");
        }
        assert!(to_u64(f64::NEG_INFINITY, "size").unwrap_err().ends_with("got -Infinity"));
        assert_eq!(to_f64(0x7f00_0000_0000), 139_637_976_727_552.0);
        assert_eq!(to_capacity((1u64 << 40) as f64), Ok(1 << 40));
        for bad in [0.0, (1u64 << 40) as f64 + 1.0, 2f64.powi(48), f64::NAN, -1.0, 1.5] {
            assert!(to_capacity(bad)
                .unwrap_err()
                .starts_with("capacity must be a whole number of bytes from 1 to 1 TiB"));
        }
        assert!(to_capacity(f64::INFINITY).unwrap_err().ends_with("got Infinity"));
        assert_eq!(to_fraction(0.5), Ok(0.5));
        assert_eq!(to_fraction(1.0), Ok(1.0));
        for (bad, written) in [(f64::INFINITY, "Infinity"), (-0.5, "-0.5"), (1.5, "1.5"), (f64::NAN, "NaN")] {
            assert_eq!(to_fraction(bad), Err(format!("memory fraction must be a number from 0 to 1, got {written}")));
        }
    }
}
