//! The allocator's configuration and its parser for PyTorch's `PYTORCH_CUDA_ALLOC_CONF`
//! syntax (`key:value,key:value`), with PyTorch's keys and value rules plus cachalot's own.
//!
//! Invariants: a [`Config`] that exists is valid — every value passed the same checks
//! PyTorch makes; an unknown key or bad value is a [`ConfigError`] naming the key and what
//! it allows, never a silent default.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::base::pytorch_version::PyTorchVersion;
use crate::base::size::{LARGE_BUFFER, MIB, POWER2_INTERVALS};

/// Whose decisions the allocator makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// PyTorch's native caching allocator, decision for decision, as the release named by
    /// `pytorch_version` (2.11 to 2.15, the newest by default) makes them.
    PyTorch,
    /// cachalot's own policy: virtual memory mapped page by page, idle pages moved to where
    /// they are needed (PyTorch's decisions on devices without virtual memory).
    Cachalot,
}

impl Policy {
    /// The value the `policy` key takes for this policy.
    pub fn name(self) -> &'static str {
        match self {
            Policy::PyTorch => "pytorch",
            Policy::Cachalot => "cachalot",
        }
    }
}

/// A validated allocator configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Whose decisions to make.
    pub policy: Policy,
    /// The PyTorch release whose keys the config is checked against and whose decisions
    /// `policy:pytorch` makes (`pytorch_version`; the newest, 2.15, by default).
    pub pytorch_version: PyTorchVersion,
    /// Segment size for large-pool requests below 10 MiB, and the large pool's page under
    /// expandable segments (`large_segment_size_mb`, more than 10; 20 MiB by default). It is
    /// also the least `max_split_size_mb` and `max_non_split_rounding_mb` take, and the
    /// latter's default.
    pub large_segment_size: u64,
    /// PyTorch 2.12 on (`throw_on_cudamalloc_oom`): with a memory fraction set, a new segment
    /// that would pass it is refused at once as out of memory, counted in
    /// `num_oom_rejections`, without releasing the cache and retrying.
    pub throw_on_cudamalloc_oom: bool,
    /// Blocks at least this large are never split (`max_split_size_mb`); `u64::MAX` = off.
    pub max_split_size: u64,
    /// An oversize request may take a cached block at most this much larger.
    pub max_non_split_rounding: u64,
    /// Divisions per power-of-two interval (`roundup_power2_divisions`); 0 or 1 = off.
    pub roundup_power2_divisions: [u32; POWER2_INTERVALS],
    /// Fraction of the allowed memory above which cached blocks are reclaimed; 0 = off.
    pub garbage_collection_threshold: f64,
    /// One growing virtual range per stream and pool instead of fixed segments (PyTorch's
    /// policy; cachalot's policy always uses virtual memory when the device has it).
    pub expandable_segments: bool,
    /// Fraction of device memory this allocator may reserve, if limited.
    pub per_process_memory_fraction: Option<f64>,
    /// Entries kept in the action history for snapshots (`record_history`); 0 = off.
    pub history_entries: usize,
    /// One allocator and one lock per stream (`lock_per_stream`), so threads allocating on
    /// different streams never wait for each other. The native library reads it; a core
    /// allocator is always one such shard and ignores it.
    pub lock_per_stream: bool,
    /// cachalot's policy: the fraction of the most pages ever in use that it may hold beyond
    /// them, earned as it moves pages (`page_slack`), so a workload whose memory keeps moving
    /// buys pages instead; 0 = never beyond the peak in use. [`DEFAULT_PAGE_SLACK`] under
    /// cachalot's policy unless the config string sets it; always 0 under PyTorch's.
    pub page_slack: f64,
    /// cachalot's policy: once a whole period of requests is seen to repeat, place each where
    /// a layout planned from that period puts it (`learn_layout`, on by default), so that
    /// memory stops moving; always off under PyTorch's policy.
    pub learn_layout: bool,
    /// cachalot's policy: give a stream found regrowing tensors by copy (a KV cache grown by
    /// concatenation) a region of its own, where its misses go and freed holes keep their
    /// pages while the device can make new ones (`regrow_region`, on by default: it ends the
    /// moves of such a stream and fits it on a smaller device; off, its pages move for each
    /// tensor). Always off under PyTorch's policy.
    pub regrow_region: bool,
    /// Once a period of mallocs and frees repeats and leaves the blocks as it found them,
    /// answer the next periods' operations with the blocks chosen for the recorded one,
    /// without searching the free index (`decision_memo:True`; off by default: it helps only
    /// a loop that has repeated exactly several times, which a benchmark's replay does more
    /// often than a program). The same decisions, device calls and statistics: a period that
    /// touched the device is never replayed. Only where malloc and free run their plain copy:
    /// PyTorch's policy with classic segments, no garbage collection, nothing explained or
    /// recorded.
    pub decision_memo: bool,
}

/// cachalot's policy's page slack when the config string does not set one. Without slack,
/// a training loop's moves never stop and its memory creeps: over 300 passes gpt2_train went
/// to 1.0291x its peak requested, moving pages every pass, and mixed_fc_conv to 1.0818x; with
/// 1% it stops moving after ten passes at 1.0122x, and mixed_fc_conv holds 1.0689x
/// (docs/design.md gives the values tried).
pub const DEFAULT_PAGE_SLACK: f64 = 0.01;

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: Policy::Cachalot,
            pytorch_version: PyTorchVersion::default(),
            large_segment_size: LARGE_BUFFER,
            throw_on_cudamalloc_oom: false,
            max_split_size: u64::MAX,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: [0; POWER2_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            per_process_memory_fraction: None,
            history_entries: 0,
            lock_per_stream: false,
            page_slack: DEFAULT_PAGE_SLACK,
            learn_layout: true,
            regrow_region: true,
            decision_memo: false,
        }
    }
}

/// A config string that cannot be used: which key, and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The key the problem is with (empty when the string is malformed before any key).
    pub key: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "invalid allocator config: {}", self.message)
        } else {
            write!(f, "invalid allocator config key '{}': {}", self.key, self.message)
        }
    }
}

/// Every key the parser accepts, listed in messages about unknown keys.
pub const KEYS: &[&str] = &[
    "policy",
    "pytorch_version",
    "large_segment_size_mb",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "roundup_power2_divisions",
    "garbage_collection_threshold",
    "expandable_segments",
    "per_process_memory_fraction",
    "throw_on_cudamalloc_oom",
    "record_history",
    "lock_per_stream",
    "page_slack",
    "learn_layout",
    "regrow_region",
    "decision_memo",
];

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { key: key.to_string(), message: message.into() }
}

impl Config {
    /// `max_split_size` as the statistics report it: the bytes cast to `i64` as PyTorch
    /// casts them (`static_cast<int64_t>`), so -1 when off and negative past 2^63 bytes
    /// (measured on an H200 with PyTorch 2.11: `max_split_size_mb:8796093022208` reads
    /// `i64::MIN`).
    pub fn max_split_size_stat(&self) -> i64 {
        self.max_split_size as i64
    }

    /// Parses a config string; the empty string gives the defaults.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let pairs = split_pairs(text)?;
        // Read before the rest wherever they stand: the release decides which keys are taken,
        // and PyTorch reads `large_segment_size_mb` first, since it is the least the two
        // split sizes take and the default of `max_non_split_rounding_mb`.
        for &(key, value) in &pairs {
            if key == "pytorch_version" {
                config.pytorch_version = PyTorchVersion::parse(value).map_err(|m| err(key, m))?;
            }
        }
        for &(key, value) in &pairs {
            if key == "large_segment_size_mb" {
                config.large_segment_size = parse_large_segment(key, value)?;
            }
        }
        config.max_non_split_rounding = config.large_segment_size;
        let (mut slack_set, mut learn_set, mut region_set) = (false, false, false);
        for (key, value) in pairs {
            config.pytorch_version.check_key(key).map_err(|m| err(key, m))?;
            config.apply(key, value)?;
            slack_set |= key == "page_slack";
            learn_set |= key == "learn_layout";
            region_set |= key == "regrow_region";
        }
        if config.policy != Policy::Cachalot {
            if slack_set && config.page_slack > 0.0 {
                return Err(err("page_slack", "applies to policy:cachalot only (PyTorch's policies never move pages)"));
            }
            if learn_set && config.learn_layout {
                return Err(err(
                    "learn_layout",
                    "applies to policy:cachalot only (PyTorch's policies place by size alone)",
                ));
            }
            if region_set && config.regrow_region {
                return Err(err(
                    "regrow_region",
                    "applies to policy:cachalot only (PyTorch's policies never move pages)",
                ));
            }
            config.page_slack = 0.0;
            config.learn_layout = false;
            config.regrow_region = false;
        }
        Ok(config)
    }

    /// A config that makes PyTorch's decisions with PyTorch's defaults.
    pub fn pytorch() -> Config {
        Config {
            policy: Policy::PyTorch,
            page_slack: 0.0,
            learn_layout: false,
            regrow_region: false,
            ..Config::default()
        }
    }

    fn apply(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "policy" => {
                self.policy = match value {
                    "pytorch" => Policy::PyTorch,
                    "cachalot" => Policy::Cachalot,
                    _ => return Err(err(key, alloc::format!("got '{value}'; allowed: pytorch, cachalot"))),
                }
            }
            "pytorch_version" | "large_segment_size_mb" => {} // read first, in `parse`
            "max_split_size_mb" => self.max_split_size = parse_mb(key, value, self.large_segment_size)?,
            "max_non_split_rounding_mb" => self.max_non_split_rounding = parse_mb(key, value, self.large_segment_size)?,
            "throw_on_cudamalloc_oom" => self.throw_on_cudamalloc_oom = parse_bool(key, value)?,
            "roundup_power2_divisions" => self.roundup_power2_divisions = parse_divisions(key, value)?,
            "garbage_collection_threshold" => {
                let v = parse_f64(key, value)?;
                if !(v > 0.0 && v < 1.0) {
                    return Err(err(key, alloc::format!("got {value}; must be in (0.0, 1.0)")));
                }
                self.garbage_collection_threshold = v;
            }
            "expandable_segments" => self.expandable_segments = parse_bool(key, value)?,
            "lock_per_stream" => self.lock_per_stream = parse_bool(key, value)?,
            "learn_layout" => self.learn_layout = parse_bool(key, value)?,
            "regrow_region" => self.regrow_region = parse_bool(key, value)?,
            "decision_memo" => self.decision_memo = parse_bool(key, value)?,
            "per_process_memory_fraction" => {
                let v = parse_f64(key, value)?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(err(key, alloc::format!("got {value}; must be in [0.0, 1.0]")));
                }
                self.per_process_memory_fraction = Some(v);
            }
            "page_slack" => {
                let v = parse_f64(key, value)?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(err(key, alloc::format!("got {value}; must be in [0.0, 1.0]")));
                }
                self.page_slack = v;
            }
            "record_history" => {
                self.history_entries = value
                    .parse()
                    .map_err(|_| err(key, alloc::format!("got '{value}'; expected a number of entries (0 = off)")))?
            }
            _ => match crate::base::unsimulated_keys::check(key, value) {
                Some(checked) => checked.map_err(|m| err(key, m))?,
                // PyTorch's other keys stay out of this list: the C ABI's last-error buffer holds
                // the message whole only while it is this short.
                None => {
                    return Err(err(
                        key,
                        alloc::format!(
                            "unknown key; allowed keys: {} (and PyTorch {}'s other keys)",
                            KEYS.join(", "),
                            self.pytorch_version.name()
                        ),
                    ))
                }
            },
        }
        Ok(())
    }

    /// The keys this config sets that have no effect under cachalot's policy on a device with
    /// virtual memory, where it maps pages: every block may be split there, and it keeps no
    /// expandable segments. On a device without virtual memory the policy falls back to
    /// PyTorch's rules over classic segments, and they apply. Empty under PyTorch's policy.
    pub fn keys_moot_under_paging(&self) -> Vec<&'static str> {
        if self.policy != Policy::Cachalot {
            return Vec::new();
        }
        let set = [
            ("max_split_size_mb", self.max_split_size != u64::MAX),
            ("max_non_split_rounding_mb", self.max_non_split_rounding != self.large_segment_size),
            ("expandable_segments", self.expandable_segments),
        ];
        set.iter().filter(|(_, on)| *on).map(|(key, _)| *key).collect()
    }

    /// One sentence for each of [`Config::keys_moot_under_paging`]: that it does nothing, and
    /// what to write instead.
    pub fn moot_key_notes(&self) -> Vec<String> {
        let note = |key| {
            alloc::format!(
                "{key} has no effect under policy:cachalot, which maps pages (it applies where a device lacks \
                 virtual memory); add policy:pytorch for PyTorch's rules"
            )
        };
        self.keys_moot_under_paging().into_iter().map(note).collect()
    }

    /// One note for each key of `text` that PyTorch takes but that changes nothing on a
    /// simulated device (`backend`, the pinned host allocator's keys, ...): why it has no
    /// effect. `text` is a string [`Config::parse`] accepted.
    pub fn unsimulated_key_notes(text: &str) -> Vec<String> {
        let policy = Config::parse(text).map(|c| c.policy.name()).unwrap_or("cachalot");
        crate::base::unsimulated_keys::notes(&split_pairs(text).unwrap_or_default(), policy)
    }

    /// The config as a string this parser reads back to an equal config.
    pub fn to_config_string(&self) -> String {
        use core::fmt::Write;
        let mut s = String::new();
        let _ = write!(s, "policy:{}", self.policy.name());
        if self.pytorch_version != PyTorchVersion::default() {
            let _ = write!(s, ",pytorch_version:{}", self.pytorch_version.name());
        }
        if self.large_segment_size != LARGE_BUFFER {
            let _ = write!(s, ",large_segment_size_mb:{}", self.large_segment_size / MIB);
        }
        if self.max_split_size != u64::MAX {
            let _ = write!(s, ",max_split_size_mb:{}", self.max_split_size / MIB);
        }
        if self.max_non_split_rounding != self.large_segment_size {
            let _ = write!(s, ",max_non_split_rounding_mb:{}", self.max_non_split_rounding / MIB);
        }
        if self.roundup_power2_divisions.iter().any(|&d| d != 0) {
            s.push_str(",roundup_power2_divisions:[");
            for (i, d) in self.roundup_power2_divisions.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(s, "{}:{}", 1u64 << i, d);
            }
            s.push(']');
        }
        if self.garbage_collection_threshold > 0.0 {
            let _ = write!(s, ",garbage_collection_threshold:{}", self.garbage_collection_threshold);
        }
        if self.expandable_segments {
            s.push_str(",expandable_segments:True");
        }
        if let Some(f) = self.per_process_memory_fraction {
            let _ = write!(s, ",per_process_memory_fraction:{f}");
        }
        if self.throw_on_cudamalloc_oom {
            s.push_str(",throw_on_cudamalloc_oom:True");
        }
        if self.history_entries > 0 {
            let _ = write!(s, ",record_history:{}", self.history_entries);
        }
        if self.lock_per_stream {
            s.push_str(",lock_per_stream:True");
        }
        if self.policy == Policy::Cachalot && self.page_slack != DEFAULT_PAGE_SLACK {
            let _ = write!(s, ",page_slack:{}", self.page_slack);
        }
        if self.policy == Policy::Cachalot && !self.learn_layout {
            s.push_str(",learn_layout:False");
        }
        if self.policy == Policy::Cachalot && !self.regrow_region {
            s.push_str(",regrow_region:False");
        }
        if self.decision_memo {
            s.push_str(",decision_memo:True");
        }
        s
    }
}

/// Splits `k:v,k:[a:b,c:d],k:v` into pairs, keeping brackets whole.
fn split_pairs(text: &str) -> Result<Vec<(&str, &str)>, ConfigError> {
    let mut pairs = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let colon = rest.find(':').ok_or_else(|| {
            let key = rest.split(',').next().unwrap_or(rest).trim();
            err(key, "expected 'key:value'")
        })?;
        let key = rest[..colon].trim();
        if key.is_empty() {
            return Err(err("", alloc::format!("missing key before ':' in '{text}'")));
        }
        let after = rest[colon + 1..].trim_start();
        let (value, tail) = if let Some(inner) = after.strip_prefix('[') {
            let close = inner.find(']').ok_or_else(|| err(key, "missing ']'"))?;
            (&after[..close + 2], &inner[close + 1..])
        } else {
            match after.find(',') {
                Some(comma) => (&after[..comma], &after[comma..]),
                None => (after, ""),
            }
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(err(key, "missing value"));
        }
        pairs.push((key, value));
        let tail = tail.trim_start();
        rest = match tail.strip_prefix(',') {
            Some(t) => t.trim_start(),
            None if tail.is_empty() => tail,
            None => return Err(err(key, alloc::format!("expected ',' before '{tail}'"))),
        };
    }
    Ok(pairs)
}

fn parse_u64(key: &str, value: &str) -> Result<u64, ConfigError> {
    value.parse::<u64>().map_err(|_| err(key, alloc::format!("got '{value}'; expected a non-negative integer")))
}

fn parse_f64(key: &str, value: &str) -> Result<f64, ConfigError> {
    value
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| err(key, alloc::format!("got '{value}'; expected a number")))
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "True" | "true" => Ok(true),
        "False" | "false" => Ok(false),
        _ => Err(err(key, alloc::format!("got '{value}'; allowed: True, False"))),
    }
}

/// A size in MiB that must be at least the large-segment size (20 MiB unless
/// `large_segment_size_mb` says otherwise).
fn parse_mb(key: &str, value: &str, large_segment_size: u64) -> Result<u64, ConfigError> {
    let mb = parse_u64(key, value)?;
    let min = large_segment_size / MIB;
    if mb < min {
        return Err(err(key, alloc::format!("got {mb}; must be >= {min}")));
    }
    Ok(mb.min(u64::MAX / MIB) * MIB)
}

/// `large_segment_size_mb`: more than 10 (the largest request a large segment is shared by),
/// clamped as PyTorch clamps it.
fn parse_large_segment(key: &str, value: &str) -> Result<u64, ConfigError> {
    let mb = parse_u64(key, value)?;
    let min = crate::base::size::MIN_LARGE_ALLOC / MIB;
    if mb <= min {
        return Err(err(key, alloc::format!("got {mb}; must be > {min}")));
    }
    Ok(mb.min(u64::MAX / MIB) * MIB)
}

/// `N` (a power of two for every interval) or `[MB:N,...,>:N]`.
fn parse_divisions(key: &str, value: &str) -> Result<[u32; POWER2_INTERVALS], ConfigError> {
    let mut out = [0u32; POWER2_INTERVALS];
    let division = |v: &str, allow_zero: bool| -> Result<u32, ConfigError> {
        let n = parse_u64(key, v)?;
        if (n == 0 && allow_zero) || n.is_power_of_two() {
            u32::try_from(n).map_err(|_| err(key, alloc::format!("division {n} is too large")))
        } else {
            let zero = if allow_zero { " or 0" } else { "" };
            Err(err(key, alloc::format!("division {n} must be a power of two{zero}")))
        }
    };
    let Some(list) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
        out.fill(division(value, false)?);
        return Ok(out);
    };
    let mut first = true;
    let mut last_index = 0usize;
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (interval, n) = item
            .split_once(':')
            .ok_or_else(|| err(key, alloc::format!("expected 'MB:divisions' or '>:divisions', got '{item}'")))?;
        let n = division(n.trim(), true)?;
        let interval = interval.trim();
        if interval == ">" {
            out[(last_index + 1).min(POWER2_INTERVALS)..].fill(n);
            continue;
        }
        let mb = parse_u64(key, interval)?;
        if !mb.is_power_of_two() {
            return Err(err(key, alloc::format!("interval {mb} MB must be a power of two")));
        }
        let index = (mb.trailing_zeros() as usize).min(POWER2_INTERVALS - 1);
        if first {
            out[..index].fill(n);
            first = false;
        }
        out[index] = n;
        last_index = index;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_string_gives_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn pytorch_keys_parse() {
        let c = Config::parse(
            "policy:pytorch,max_split_size_mb:128, garbage_collection_threshold:0.6,per_process_memory_fraction:0.5",
        )
        .unwrap();
        assert_eq!(c.policy, Policy::PyTorch);
        assert_eq!(c.max_split_size, 128 * MIB);
        assert_eq!(c.garbage_collection_threshold, 0.6);
        assert_eq!(c.per_process_memory_fraction, Some(0.5));
    }

    #[test]
    fn divisions_single_value_fills_every_interval() {
        let c = Config::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(c.roundup_power2_divisions, [4; POWER2_INTERVALS]);
        assert!(Config::parse("roundup_power2_divisions:3").is_err());
    }

    #[test]
    fn divisions_list_syntax() {
        let c = Config::parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]").unwrap();
        let d = c.roundup_power2_divisions;
        assert_eq!(&d[..8], &[1; 8]); // below 256 MB: the first value
        assert_eq!(d[8], 1);
        assert_eq!(d[9], 2);
        assert_eq!(d[10], 4);
        assert_eq!(&d[11..], &[8; 5]);
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::parse("max_split_size_mb:10").unwrap_err();
        assert_eq!(e.key, "max_split_size_mb");
        assert!(e.to_string().contains(">= 20"), "{e}");
        let e = Config::parse("bogus:1").unwrap_err();
        assert_eq!(e.key, "bogus");
        assert!(e.message.contains("max_split_size_mb"));
        let e = Config::parse("garbage_collection_threshold:1.5").unwrap_err();
        assert_eq!(e.key, "garbage_collection_threshold");
        let e = Config::parse("expandable_segments:maybe").unwrap_err();
        assert!(e.message.contains("True, False"));
        let e = Config::parse("lock_per_stream:yes").unwrap_err();
        assert_eq!(e.key, "lock_per_stream");
        let e = Config::parse("page_slack:2").unwrap_err();
        assert_eq!(e.key, "page_slack");
        assert!(e.message.contains("[0.0, 1.0]"), "{e}");
        let e = Config::parse("page_slack:0.1,policy:pytorch").unwrap_err();
        assert_eq!(e.key, "page_slack");
        assert!(e.message.contains("policy:cachalot"), "{e}");
        let e = Config::parse("policy").unwrap_err();
        assert_eq!(e.key, "policy");
        assert!(Config::parse("max_split_size_mb:").is_err());
        assert!(Config::parse("roundup_power2_divisions:[1:2").is_err());
    }

    #[test]
    fn pytorchs_split_keys_are_named_moot_under_cachalots_policy() {
        let moot = |s: &str| Config::parse(s).unwrap().keys_moot_under_paging();
        assert_eq!(
            moot("max_split_size_mb:128,expandable_segments:True"),
            ["max_split_size_mb", "expandable_segments"]
        );
        assert_eq!(
            moot("max_non_split_rounding_mb:64,garbage_collection_threshold:0.5"),
            ["max_non_split_rounding_mb"]
        );
        assert!(moot("roundup_power2_divisions:4,expandable_segments:False").is_empty());
        assert!(moot("policy:pytorch,max_split_size_mb:128,expandable_segments:True").is_empty());
    }

    #[test]
    fn decision_memo_is_off_by_default_and_round_trips_when_on() {
        assert!(!Config::parse("").unwrap().decision_memo && !Config::pytorch().decision_memo);
        let on = Config::parse("policy:pytorch,decision_memo:True").unwrap();
        assert!(on.decision_memo);
        assert_eq!(on.to_config_string(), "policy:pytorch,decision_memo:True");
        assert_eq!(Config::parse(&on.to_config_string()).unwrap(), on);
        assert_eq!(Config::parse("decision_memo:sometimes").unwrap_err().key, "decision_memo");
    }

    #[test]
    fn regrow_region_is_on_under_cachalots_policy_only() {
        assert!(Config::parse("").unwrap().regrow_region);
        assert!(!Config::pytorch().regrow_region);
        let off = Config::parse("regrow_region:False").unwrap();
        assert!(!off.regrow_region);
        assert_eq!(off.to_config_string(), "policy:cachalot,regrow_region:False");
        assert_eq!(Config::parse(&off.to_config_string()).unwrap(), off);
        assert_eq!(Config::parse("regrow_region:True,policy:pytorch").unwrap_err().key, "regrow_region");
        assert_eq!(Config::parse("policy:pytorch,regrow_region:False").unwrap(), Config::pytorch());
        assert_eq!(Config::parse("regrow_region:maybe").unwrap_err().key, "regrow_region");
    }

    #[test]
    fn learn_layout_is_on_under_cachalots_policy_only() {
        assert!(Config::parse("").unwrap().learn_layout);
        assert!(!Config::parse("policy:pytorch").unwrap().learn_layout);
        assert!(!Config::pytorch().learn_layout);
        assert_eq!(Config::parse("policy:pytorch,learn_layout:False").unwrap(), Config::pytorch());
        let e = Config::parse("learn_layout:True,policy:pytorch").unwrap_err();
        assert_eq!(e.key, "learn_layout");
        let off = Config::parse("learn_layout:False").unwrap();
        assert!(!off.learn_layout);
        assert_eq!(off.to_config_string(), "policy:cachalot,learn_layout:False");
        assert_eq!(Config::parse(&off.to_config_string()).unwrap(), off);
        assert_eq!(Config::parse("learn_layout:maybe").unwrap_err().key, "learn_layout");
    }

    #[test]
    fn page_slack_defaults_to_one_percent_under_cachalots_policy_only() {
        assert_eq!(Config::parse("").unwrap().page_slack, DEFAULT_PAGE_SLACK);
        assert_eq!(Config::default().page_slack, 0.01);
        assert_eq!(Config::parse("page_slack:0").unwrap().page_slack, 0.0);
        assert_eq!(Config::parse("policy:pytorch").unwrap().page_slack, 0.0);
        assert_eq!(Config::parse("page_slack:0,policy:pytorch").unwrap(), Config::pytorch());
        assert_eq!(Config::pytorch().page_slack, 0.0);
        assert_eq!(Config::parse("").unwrap().to_config_string(), "policy:cachalot");
        assert_eq!(Config::parse("page_slack:0").unwrap().to_config_string(), "policy:cachalot,page_slack:0");
    }

    #[test]
    fn config_string_round_trips() {
        for text in [
            "policy:pytorch,max_split_size_mb:128",
            "roundup_power2_divisions:[256:1,512:2,>:4],garbage_collection_threshold:0.5",
            "per_process_memory_fraction:0.25,record_history:100",
            "policy:pytorch,lock_per_stream:True",
            "page_slack:0.05",
            "page_slack:0",
            "policy:pytorch,page_slack:0",
        ] {
            let c = Config::parse(text).unwrap();
            assert_eq!(Config::parse(&c.to_config_string()).unwrap(), c, "{text}");
        }
    }

    /// Every key PyTorch 2.11 takes is accepted; those a simulated device cannot show get a
    /// note, and a value PyTorch refuses is a bad value of that key, not an unknown key.
    #[test]
    fn pytorchs_other_keys_are_accepted_with_a_note_and_their_values_checked() {
        let text = "backend:cudaMallocAsync,pinned_use_cuda_host_register:True,release_lock_on_cudamalloc:True,\
                    pinned_num_register_threads:8,pinned_use_background_threads:False,\
                    pinned_reserve_segment_size_mb:64,graph_capture_record_stream_reuse:True,policy:pytorch";
        assert_eq!(Config::parse(text).unwrap(), Config::pytorch(), "they change no decision");
        let notes = Config::unsimulated_key_notes(text);
        assert_eq!(notes.len(), 7, "{notes:?}");
        assert!(notes[0].contains("does not simulate: this run replays policy:pytorch"), "{}", notes[0]);
        assert!(Config::unsimulated_key_notes("backend:native")[0].contains("policy:pytorch reproduces it"));
        assert!(Config::parse("release_lock_on_hipmalloc:False,pinned_use_hip_host_register:True").is_ok());
        assert!(Config::unsimulated_key_notes("max_split_size_mb:128").is_empty());
        for (bad, key) in [
            ("backend:jemalloc", "backend"),
            ("pinned_num_register_threads:3", "pinned_num_register_threads"),
            ("pinned_num_register_threads:256", "pinned_num_register_threads"),
            ("pinned_reserve_segment_size_mb:0", "pinned_reserve_segment_size_mb"),
            ("release_lock_on_cudamalloc:yes", "release_lock_on_cudamalloc"),
        ] {
            let e = Config::parse(bad).unwrap_err();
            assert_eq!(e.key, key, "{bad}");
            assert!(e.message.starts_with("bad value") && !e.message.contains("unknown key"), "{bad}: {e}");
        }
    }
}
