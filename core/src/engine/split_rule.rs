//! Which clause of PyTorch's split rule decided whether a block handed out keeps its
//! remainder or gives it back to the cache as a block of its own: the rule's result, carried
//! with its reason, so that explanations read the decision taken rather than work it out again.
//!
//! Invariant: `split` is the rule's decision; `exact` means nothing remained (then `split` is
//! false).

/// The clause of the split rule that applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SplitClause {
    /// Small pool: a remainder of at least 512 B is split off.
    SmallPool,
    /// Virtual memory (expandable segments, the paged policy): likewise, in either pool.
    VirtualMemory,
    /// Large pool: a remainder of more than 1 MiB is split off.
    LargePool,
    /// Large pool, a request of `max_split_size` or more: never split.
    MaxSplitSize,
}

/// The split rule's decision for one block and request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SplitRule {
    pub(crate) clause: SplitClause,
    pub(crate) split: bool,
    pub(crate) exact: bool,
}

impl SplitRule {
    /// True when the remainder becomes a block of its own.
    #[inline(always)]
    pub(crate) fn splits(self) -> bool {
        self.split
    }

    /// The decision in words.
    pub(crate) fn reason(self) -> &'static str {
        match (self.clause, self.split) {
            _ if self.exact => "it fits exactly",
            (SplitClause::VirtualMemory, true) => "virtual memory: any remainder of at least 512 bytes is kept",
            (SplitClause::VirtualMemory, false) => "less than 512 bytes would remain",
            (SplitClause::SmallPool, true) => "small pool: at least 512 bytes remain",
            (SplitClause::SmallPool, false) => "small pool: less than 512 bytes would remain",
            (SplitClause::LargePool, true) => "large pool: more than 1 MiB remains",
            (SplitClause::LargePool, false) => "large pool: a remainder of 1 MiB or less is not worth a block",
            (SplitClause::MaxSplitSize, _) => "blocks are never split for requests of max_split_size or more",
        }
    }
}
