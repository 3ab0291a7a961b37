//! A small command-line parser: positionals, `--flag`, `--key value` and `--key=value`,
//! with every unknown, misplaced or malformed option reported by name.
//!
//! Invariant: after `finish`, every argument given was consumed by the command, or the
//! command failed with a message naming the first one it did not understand: an option of
//! the tool the command does not take is named as such, not ignored.

use std::collections::VecDeque;

/// Arguments of one subcommand, consumed as the command reads them.
pub struct Args {
    command: String,
    /// Every option any command of the tool takes (without `--`).
    tool_options: &'static [&'static str],
    items: VecDeque<String>,
    /// Options the command read as flags (they take no value).
    flags_read: Vec<String>,
    positionals: Vec<String>,
}

impl Args {
    /// Wraps the arguments after the subcommand name; `tool_options` lists every option of
    /// the tool, so one this command does not take can be told from a typo.
    pub fn new(command: &str, tool_options: &'static [&'static str], items: impl IntoIterator<Item = String>) -> Args {
        Args {
            command: command.into(),
            tool_options,
            items: items.into_iter().collect(),
            flags_read: Vec::new(),
            positionals: Vec::new(),
        }
    }

    /// True if `-h` or `--help` is among the arguments.
    pub fn wants_help(&self) -> bool {
        self.items.iter().any(|a| a == "-h" || a == "--help")
    }

    /// True if `--name` is present (removing it).
    pub fn flag(&mut self, name: &str) -> bool {
        self.flags_read.push(name.into());
        let long = format!("--{name}");
        let before = self.items.len();
        self.items.retain(|a| a != &long);
        self.items.len() != before
    }

    /// Every value of `--name V` / `--name=V` (removing them), in order.
    pub fn values(&mut self, name: &str) -> Result<Vec<String>, String> {
        let long = format!("--{name}");
        let prefix = format!("--{name}=");
        let mut out = Vec::new();
        let mut rest = VecDeque::new();
        while let Some(a) = self.items.pop_front() {
            if a == long {
                match self.items.pop_front() {
                    Some(v) => out.push(v),
                    None => return Err(format!("option {long} needs a value")),
                }
            } else if let Some(v) = a.strip_prefix(&prefix) {
                out.push(v.to_string());
            } else {
                rest.push_back(a);
            }
        }
        self.items = rest;
        Ok(out)
    }

    /// The value of `--name`, if given; given twice, it is refused rather than one value
    /// silently winning (two `--config`s belong to `compare`, not `replay`).
    pub fn value(&mut self, name: &str) -> Result<Option<String>, String> {
        let mut values = self.values(name)?;
        if values.len() > 1 {
            let hint = if name == "config" { " (compare takes several)" } else { "" };
            return Err(format!("option --{name} is given {} times; {} takes one{hint}", values.len(), self.command));
        }
        Ok(values.pop())
    }

    /// Finishes option parsing: anything left that starts with `-` is an option the command
    /// does not take; the rest are positionals, at most `max` of them.
    pub fn finish(&mut self, max: usize) -> Result<(), String> {
        for a in std::mem::take(&mut self.items) {
            if a.starts_with('-') && a != "-" {
                return Err(self.misplaced(&a));
            }
            self.positionals.push(a);
        }
        if self.positionals.len() > max {
            return Err(format!("unexpected argument '{}'", self.positionals[max]));
        }
        Ok(())
    }

    /// Why an option argument was left over.
    fn misplaced(&self, arg: &str) -> String {
        let name = arg.trim_start_matches('-').split('=').next().unwrap_or("");
        if arg.starts_with("--") && self.flags_read.iter().any(|f| f == name) {
            format!("option --{name} takes no value (got '{arg}')")
        } else if arg.starts_with("--") && self.tool_options.contains(&name) {
            format!("option --{name} does not apply to {} (see cachalot {} --help)", self.command, self.command)
        } else {
            format!("unknown option {arg} (a trace whose name starts with '-' can be given as ./{arg})")
        }
    }

    /// The `i`th positional, if given.
    pub fn positional(&self, i: usize) -> Option<&str> {
        self.positionals.get(i).map(String::as_str)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const TOOL: &[&str] = &["json", "config", "capacity", "passes"];

    fn args(s: &str) -> Args {
        Args::new("replay", TOOL, s.split_whitespace().map(String::from))
    }

    #[test]
    fn options_and_positionals() {
        let mut a = args("t.csv --json --config a --config=b --capacity 1GiB");
        assert!(a.flag("json"));
        assert_eq!(a.values("config").unwrap(), ["a", "b"]);
        assert_eq!(a.value("capacity").unwrap().as_deref(), Some("1GiB"));
        a.finish(1).unwrap();
        assert_eq!(a.positional(0), Some("t.csv"));
    }

    #[test]
    fn unknown_and_misplaced_options_are_named() {
        let mut a = args("--jsn");
        assert!(a.finish(1).unwrap_err().starts_with("unknown option --jsn"));
        let mut a = args("-x");
        assert!(a.finish(1).unwrap_err().starts_with("unknown option -x"));
        let mut a = args("--passes 10");
        assert!(a.finish(1).unwrap_err().contains("--passes does not apply to replay"));
        let mut a = args("--json=yes");
        a.flag("json");
        assert!(a.finish(1).unwrap_err().contains("--json takes no value"));
        let mut a = args("--config");
        assert!(a.values("config").unwrap_err().contains("needs a value"));
        let mut a = args("x y");
        assert!(a.finish(1).unwrap_err().contains("'y'"));
        assert!(args("t.csv -h").wants_help() && args("--help").wants_help() && !args("t.csv").wants_help());
    }

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
