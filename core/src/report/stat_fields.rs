//! The one list of the statistics' fields ([`STAT_FIELDS`]): each field's name and kind, in the
//! order the C ABI's `cachalot_stats` lays them out after its `struct_size` and `version`.
//!
//! Every other spelling of the list is checked against this one: [`DeviceStats`]'s fields and
//! the keys of its `flat()` report by this file's tests; the C ABI's struct (through the header
//! cbindgen writes from it, `include/cachalot.h`), the Python module's `STATS_FIELDS`
//! (`native/python/cachalot_torch.py`) and the PyTorch extension's `add()`
//! (`native/torch/cachalot_allocator.cpp`) by `native/tests/stat_fields.rs`.
//!
//! Invariants: each name appears once; the order is the C layout's, which is only ever
//! appended to (a program built against an older header keeps reading its prefix), so a new
//! field goes at the end and raises the layout version (`CACHALOT_STATS_VERSION`).
//!
//! [`DeviceStats`]: crate::report::stats::DeviceStats

/// How a statistic is held, which fixes its keys in `torch.cuda.memory_stats()` and its type
/// in C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    /// A [`StatArray`](crate::report::stat::StatArray): current, peak, allocated and freed for
    /// all, the small pool and the large pool (`name.pool.metric`).
    PerPool,
    /// One [`Stat`](crate::report::stat::Stat) without pools (`name.metric`).
    Single,
    /// A count that only grows, until `reset_accumulated` (`name`).
    Count,
    /// A count that only some PyTorch releases keep: absent from `memory_stats()` where the
    /// release followed has none, -1 in C.
    OptionalCount,
    /// A configured value, not a figure: never added up or reset.
    Setting,
}

impl StatKind {
    /// The kind's name in the lists that spell it out (the Python module's `STATS_FIELDS`).
    pub const fn name(self) -> &'static str {
        match self {
            StatKind::PerPool => "per_pool",
            StatKind::Single => "single",
            StatKind::Count => "count",
            StatKind::OptionalCount => "optional_count",
            StatKind::Setting => "setting",
        }
    }
}

/// One field of the statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatField {
    /// Its name, the same in Rust, C, Python and PyTorch's `DeviceStats`.
    pub name: &'static str,
    /// How it is held.
    pub kind: StatKind,
}

const fn field(name: &'static str, kind: StatKind) -> StatField {
    StatField { name, kind }
}

/// The pool columns of a [`StatKind::PerPool`] field, in the C layout's order.
pub const POOL_NAMES: [&str; 3] = ["all", "small_pool", "large_pool"];

/// The figures of one statistic, in the C layout's order.
pub const METRIC_NAMES: [&str; 4] = ["current", "peak", "allocated", "freed"];

/// Every field of the statistics, in the C layout's order (version 1 ends at `max_split_size`;
/// version 2 appends `num_oom_rejections`).
pub const STAT_FIELDS: [StatField; 18] = [
    field("allocation", StatKind::PerPool),
    field("segment", StatKind::PerPool),
    field("active", StatKind::PerPool),
    field("inactive_split", StatKind::PerPool),
    field("allocated_bytes", StatKind::PerPool),
    field("reserved_bytes", StatKind::PerPool),
    field("active_bytes", StatKind::PerPool),
    field("inactive_split_bytes", StatKind::PerPool),
    field("requested_bytes", StatKind::PerPool),
    field("num_alloc_retries", StatKind::Count),
    field("num_ooms", StatKind::Count),
    field("num_sync_all_streams", StatKind::Count),
    field("num_device_alloc", StatKind::Count),
    field("num_device_free", StatKind::Count),
    field("oversize_allocations", StatKind::Single),
    field("oversize_segments", StatKind::Single),
    field("max_split_size", StatKind::Setting),
    field("num_oom_rejections", StatKind::OptionalCount),
];

impl StatField {
    /// The keys this field gives in `torch.cuda.memory_stats()`'s flat report (unsorted).
    pub fn flat_keys(&self) -> alloc::vec::Vec<alloc::string::String> {
        use alloc::format;
        let name = self.name;
        match self.kind {
            StatKind::PerPool => POOL_NAMES
                .iter()
                .flat_map(|pool| METRIC_NAMES.iter().map(move |metric| format!("{name}.{pool}.{metric}")))
                .collect(),
            StatKind::Single => METRIC_NAMES.iter().map(|metric| format!("{name}.{metric}")).collect(),
            StatKind::Count | StatKind::OptionalCount | StatKind::Setting => alloc::vec![name.into()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::stats::{DeviceStats, StatArray, ARRAY_NAMES};
    use alloc::string::String;
    use alloc::vec::Vec;
    use serde_json::Value;

    /// The kind a serialized field has: the struct's own spelling of its fields.
    fn kind_of(name: &str, value: &Value) -> StatKind {
        match value {
            Value::Object(o) if o.contains_key("small_pool") => StatKind::PerPool,
            Value::Object(_) => StatKind::Single,
            Value::Null => StatKind::OptionalCount,
            _ if name == "max_split_size" => StatKind::Setting,
            _ => StatKind::Count,
        }
    }

    #[test]
    fn the_list_holds_every_field_of_device_stats_once_with_its_kind() {
        let Value::Object(fields) = serde_json::to_value(DeviceStats::<StatArray>::default()).unwrap() else {
            panic!("DeviceStats serializes as an object");
        };
        let mut listed: Vec<(&str, StatKind)> = STAT_FIELDS.iter().map(|f| (f.name, f.kind)).collect();
        let mut declared: Vec<(&str, StatKind)> =
            fields.iter().map(|(name, value)| (name.as_str(), kind_of(name, value))).collect();
        listed.sort_by_key(|(name, _)| *name);
        declared.sort_by_key(|(name, _)| *name);
        assert_eq!(listed, declared, "STAT_FIELDS and DeviceStats's fields differ");
    }

    #[test]
    fn the_per_pool_fields_are_the_stat_arrays_in_pytorchs_order() {
        let per_pool: Vec<&str> = STAT_FIELDS.iter().filter(|f| f.kind == StatKind::PerPool).map(|f| f.name).collect();
        assert_eq!(per_pool, ARRAY_NAMES);
        let arrays: Vec<&str> = DeviceStats::default().arrays().iter().map(|(name, _)| *name).collect();
        assert_eq!(arrays, ARRAY_NAMES);
    }

    #[test]
    fn the_flat_report_has_the_keys_the_list_gives() {
        let keys = |stats: &DeviceStats| -> Vec<String> { stats.flat().into_iter().map(|(k, _)| k).collect() };
        let listed = |with_optional: bool| -> Vec<String> {
            let mut all: Vec<String> = STAT_FIELDS
                .iter()
                .filter(|f| with_optional || f.kind != StatKind::OptionalCount)
                .flat_map(StatField::flat_keys)
                .collect();
            all.sort();
            all
        };
        assert_eq!(keys(&DeviceStats::default()), listed(false), "a count not kept gives no key");
        let kept = DeviceStats { num_oom_rejections: Some(0), ..DeviceStats::default() };
        assert_eq!(keys(&kept), listed(true));
    }
}
