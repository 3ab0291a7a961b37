//! `Scenario`: what the `ops` target reads from its input — an allocator configuration (every
//! policy, with the options that change decisions), a device (a capacity, with or without
//! virtual memory) and up to [`MAX_OPS`] operations, faults to inject among them.
//!
//! Layout: byte 0 picks the policy and device kind, byte 1 the options, byte 2 the capacity;
//! then each operation is an opcode byte and its arguments. Every byte string decodes (see
//! `bytes.rs`), so the fuzzer never wastes an input on a parse error.

use cachalot_core::sim::FaultSite;
use cachalot_core::size::{MAX_REQUEST, MIB};

use super::bytes::Bytes;

/// Most operations one input runs: enough for deep states, few enough for fast executions.
pub const MAX_OPS: usize = 300;
/// Streams the operations use (numbered from 0).
pub const STREAMS: u64 = 4;

/// One step of a scenario.
#[derive(Clone, Debug)]
pub enum Op {
    /// Allocate `size` bytes on `stream`.
    Malloc { size: u64, stream: u64 },
    /// Free the live allocation chosen by `pick`.
    Free { pick: usize },
    /// Free a pointer the allocator must refuse: inside a live allocation (`kind` 0), freed
    /// before (1), or never handed out (2).
    BadFree { pick: usize, kind: u8 },
    /// Mark the live allocation chosen by `pick` as used on `stream`.
    RecordStream { pick: usize, stream: u64 },
    /// Keep `stream` busy: its events stay not ready.
    HoldStream(u64),
    /// Let `stream`'s work complete.
    FinishStream(u64),
    /// Return cached memory to the device.
    EmptyCache,
    /// Set the memory fraction (values above 1 must be refused).
    SetFraction(f64),
    /// Make the device call of kind `site` after the next `after` ones fail.
    Fail { site: FaultSite, after: u64 },
    /// Read-only views and switches: summary, snapshot, explanations, peak resets.
    Inspect(u8),
}

/// A decoded input.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The config string (always valid).
    pub config: String,
    /// Whether the device has virtual memory.
    pub virtual_memory: bool,
    /// Device capacity in bytes.
    pub capacity: u64,
    /// The operations, in order.
    pub ops: Vec<Op>,
}

const POLICIES: [(&str, bool); 6] = [
    ("policy:pytorch", true),
    ("policy:pytorch,expandable_segments:True", true),
    ("policy:cachalot", true),
    ("policy:cachalot", false),
    ("policy:pytorch,expandable_segments:True", false),
    ("", true),
];
const MAX_SPLIT: [&str; 4] = ["", ",max_split_size_mb:20", ",max_split_size_mb:40", ",max_split_size_mb:128"];
const ROUNDUP: [&str; 4] =
    ["", ",roundup_power2_divisions:2", ",roundup_power2_divisions:4", ",roundup_power2_divisions:[1:1,2:8,64:2,>:4]"];
const LIMITS: [&str; 4] = [
    "",
    ",garbage_collection_threshold:0.6,per_process_memory_fraction:0.8",
    ",per_process_memory_fraction:0.5",
    ",garbage_collection_threshold:0.3",
];
const CAPACITIES: [u64; 8] = [3 * MIB, 24 * MIB, 64 * MIB, 100 * MIB, 256 * MIB, 1 << 30, 4 << 30, 16 << 30];
const SPECIAL_SIZES: [u64; 12] = [
    512,
    MIB,
    MIB + 512,
    2 * MIB,
    2 * MIB - 512,
    10 * MIB,
    20 * MIB,
    20 * MIB + 1,
    0,
    MAX_REQUEST,
    MAX_REQUEST + 1,
    u64::MAX,
];

impl Scenario {
    /// Decodes an input.
    pub fn decode(data: &[u8]) -> Scenario {
        let mut b = Bytes::new(data);
        let (policy, virtual_memory) = POLICIES[b.u8() as usize % POLICIES.len()];
        let o = b.u8() as usize;
        let mut config = String::from(policy);
        config.push_str(MAX_SPLIT[o & 3]);
        if o & 4 != 0 {
            config.push_str(",max_non_split_rounding_mb:30");
        }
        config.push_str(ROUNDUP[(o >> 3) & 3]);
        config.push_str(LIMITS[(o >> 5) & 3]);
        if o & 128 != 0 {
            config.push_str(",record_history:64");
        }
        let config = config.trim_start_matches(',').to_string();
        let capacity = CAPACITIES[b.u8() as usize % CAPACITIES.len()];
        let mut ops = Vec::new();
        while !b.is_empty() && ops.len() < MAX_OPS {
            ops.push(decode_op(&mut b));
        }
        Scenario { config, virtual_memory, capacity, ops }
    }
}

/// How many of [`FaultSite::ALL`] (the first ones) an input can name.
const CORPUS_SITES: usize = 5;

fn decode_op(b: &mut Bytes) -> Op {
    match b.u8() % 20 {
        0..=6 => Op::Malloc { size: size(b), stream: b.u8() as u64 % STREAMS },
        7..=11 => Op::Free { pick: b.uint(2) as usize },
        12 => Op::RecordStream { pick: b.uint(2) as usize, stream: b.u8() as u64 % STREAMS },
        13 => Op::HoldStream(b.u8() as u64 % STREAMS),
        14 => Op::FinishStream(b.u8() as u64 % STREAMS),
        15 => Op::EmptyCache,
        16 => Op::SetFraction(b.u8() as f64 / 200.0),
        17 => {
            // The five sites known when the corpus was gathered, so that every saved input
            // keeps its meaning (every byte value is used by some input); faults in page
            // destruction, added later, are swept by core/tests/faults.rs instead.
            let site = FaultSite::ALL[b.u8() as usize % CORPUS_SITES];
            Op::Fail { site, after: b.u8() as u64 % 4 }
        }
        18 => Op::BadFree { pick: b.uint(2) as usize, kind: b.u8() % 3 },
        _ => Op::Inspect(b.u8()),
    }
}

/// A request size: mostly small and medium, sometimes large, sometimes a boundary value.
fn size(b: &mut Bytes) -> u64 {
    match b.u8() % 6 {
        0 => b.in_range(1, 4096),
        1 => b.in_range(4097, MIB),
        2 => b.in_range(MIB + 1, 32 * MIB),
        3 => b.in_range(32 * MIB, 1 << 30),
        4 => SPECIAL_SIZES[b.u8() as usize % SPECIAL_SIZES.len()],
        _ => b.in_range(1, 131_072) * 512,
    }
}
