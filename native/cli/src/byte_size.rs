//! Byte counts as a person writes them on a command line: `80GiB`, `141GB`, `512MiB`,
//! `1.5GiB`, `4096`.
//!
//! Invariant: a size is exact or refused: a fraction of a unit is rounded down to whole
//! bytes, a fractional count of bytes, zero, or a count past `u64` is an error naming the text.

/// Parses a byte count with an optional unit: `80GiB`, `141GB`, `512MiB`, `1.5GiB`, `4096`.
/// Exact: a fraction of a unit is rounded down to whole bytes, and a fractional count of
/// bytes is refused rather than cut. Messages name the text, not the option (callers do).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let not_a_size = || format!("'{text}' is not a size (try 80GiB or 512MiB)");
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(not_a_size());
    }
    let scale: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        other => {
            return Err(format!("unknown size unit '{other}' in '{text}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"))
        }
    };
    let out_of_range = || format!("'{text}' is out of range (at most {} bytes)", u64::MAX);
    // Digits past these lengths cannot be a device size; they would overflow the sums below.
    if whole.len() > 30 || fraction.len() > 30 {
        return Err(out_of_range());
    }
    let digits = |s: &str| if s.is_empty() { Ok(0) } else { s.parse::<u128>().map_err(|_| not_a_size()) };
    let tenths = 10u128.pow(fraction.len() as u32);
    let (whole, fraction) = (digits(whole)?, digits(fraction)?);
    // The size times 10^(fraction digits), in bytes: exact, so no fraction is lost unseen.
    let numerator = whole
        .checked_mul(tenths)
        .and_then(|w| w.checked_add(fraction))
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(out_of_range)?;
    if scale == 1 && numerator % tenths != 0 {
        return Err(format!("'{text}' is not a whole number of bytes (give a unit for a fraction: 1.5GiB)"));
    }
    let bytes = u64::try_from(numerator / tenths).map_err(|_| out_of_range())?;
    if bytes == 0 {
        return Err(format!("'{text}' is zero bytes (a size is at least 1 byte)"));
    }
    Ok(bytes)
}

/// Formats bytes in binary units with two decimals ("20.00 GiB").
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_size("1.5 GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4096.0").unwrap(), 4096);
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
        assert!(parse_size("18446744073709551616").unwrap_err().contains("out of range"));
        assert!(parse_size("1.5").unwrap_err().contains("not a whole number of bytes"));
        assert!(parse_size("12 parsecs").unwrap_err().contains("unit"));
        assert!(parse_size("GiB").is_err());
        assert!(parse_size(".").is_err());
        assert!(parse_size("1.2.3GiB").is_err());
        assert!(parse_size("0").unwrap_err().contains("zero"));
    }
}
