//! Why a replay stopped following a recorded run's segment placements ([`PlacementAbandoned`],
//! [`AbandonReason`]): what the report and `--json` say when a run's figure is not reached
//! exactly.
//!
//! Invariant: a device gives up its placements at most once, at the first segment that could
//! not follow; the value names that segment and the placement it would have taken.

/// Why a replay stopped following a recorded run's placements: the first segment it asked
/// for that the next placement could not give.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlacementAbandoned {
    /// The segment allocation (numbered from 0 among this device's allocations) that could
    /// not follow.
    pub segment: u64,
    /// How many placements had been followed before it.
    pub followed: usize,
    /// The placement it would have taken: (address, size).
    pub placement: (u64, u64),
    /// The size the replay asked for.
    pub size: u64,
    /// Why it could not.
    pub reason: AbandonReason,
}

/// Why a placement could not be followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbandonReason {
    /// The replay asked for a segment of another size than the run made there: its
    /// decisions differ from the run's (another config, or a rule that differs).
    SizeDiffers,
    /// The range is taken by a live segment or a reserved range of the replay.
    AddressTaken,
    /// The address is 0, not 512-aligned, or past what the device can hold.
    AddressRefused,
}

impl core::fmt::Display for PlacementAbandoned {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (addr, len) = self.placement;
        write!(
            f,
            "segment {} asked for {} bytes where the run made {len} bytes at {addr:#x}: ",
            self.segment, self.size
        )?;
        f.write_str(match self.reason {
            AbandonReason::SizeDiffers => "the replay's decisions differ from the run's there (another config or rule)",
            AbandonReason::AddressTaken => "that range is taken in the replay",
            AbandonReason::AddressRefused => "that address is null, unaligned or past the device's addresses",
        })
    }
}
