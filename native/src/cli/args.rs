//! A small command-line parser: positionals, `--flag`, `--key value` and `--key=value`,
//! with every unknown or malformed option reported by name.
//!
//! Invariant: after `finish`, every argument given was consumed by the command, or the
//! command failed with a message naming the first one it did not understand.

use std::collections::VecDeque;

/// Arguments of one subcommand, consumed as the command reads them.
pub struct Args {
    items: VecDeque<String>,
    positionals: Vec<String>,
}

impl Args {
    /// Wraps the arguments after the subcommand name.
    pub fn new(items: impl IntoIterator<Item = String>) -> Args {
        Args { items: items.into_iter().collect(), positionals: Vec::new() }
    }

    /// True if `--name` is present (removing it).
    pub fn flag(&mut self, name: &str) -> bool {
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

    /// The last value of `--name`, if given.
    pub fn value(&mut self, name: &str) -> Result<Option<String>, String> {
        Ok(self.values(name)?.pop())
    }

    /// Finishes option parsing: anything left that starts with `--` is unknown; the rest
    /// are positionals, at most `max` of them.
    pub fn finish(&mut self, max: usize) -> Result<(), String> {
        for a in self.items.drain(..) {
            if a.starts_with("--") {
                return Err(format!("unknown option {a}"));
            }
            self.positionals.push(a);
        }
        if self.positionals.len() > max {
            return Err(format!("unexpected argument '{}'", self.positionals[max]));
        }
        Ok(())
    }

    /// The `i`th positional, if given.
    pub fn positional(&self, i: usize) -> Option<&str> {
        self.positionals.get(i).map(String::as_str)
    }
}

/// Parses a byte count with an optional unit: `80GiB`, `141GB`, `512MiB`, `4096`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.parse().map_err(|_| format!("'{text}' is not a size (try 80GiB or 512MiB)"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1048576.0,
        "g" | "gb" => 1e9,
        "gib" => 1073741824.0,
        "t" | "tb" => 1e12,
        "tib" => 1099511627776.0,
        other => {
            return Err(format!("unknown size unit '{other}' in '{text}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"))
        }
    };
    let bytes = n * scale;
    if !(1.0..=1.8e19).contains(&bytes) {
        return Err(format!("size '{text}' is out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Args {
        Args::new(s.split_whitespace().map(String::from))
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
    fn unknown_options_are_named() {
        let mut a = args("--jsn");
        assert_eq!(a.finish(1).unwrap_err(), "unknown option --jsn");
        let mut a = args("--config");
        assert!(a.values("config").unwrap_err().contains("needs a value"));
        let mut a = args("x y");
        assert!(a.finish(1).unwrap_err().contains("'y'"));
    }

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_size("1.5 GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12 parsecs").unwrap_err().contains("unit"));
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("0").is_err());
    }
}
