//! Decisions, explained: when explaining is on, the allocator notes each decision it takes
//! during `malloc` and `free` — rounding, pool, best-fit candidate, split or not and why,
//! new segment, the out-of-memory path, merges — so a person can follow it step by step.
//!
//! Invariants: explaining never changes a decision; when it is off, noting costs one branch;
//! at most [`MAX_DECISIONS`] wait to be taken, the latest ones.

/// The most decisions kept between two `take_decisions` calls. A caller that never takes
/// them (stepping through a whole trace with explaining on) would otherwise hold a few
/// dozen bytes for every decision of every call; past the bound the older half goes, so
/// the latest calls' decisions are always there. One call takes a few dozen at most.
pub const MAX_DECISIONS: usize = 1 << 16;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::Serialize;

use crate::base::size::format_size;

/// One decision the allocator took.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Decision {
    /// The request was rounded.
    Rounded {
        /// Bytes asked for.
        requested: u64,
        /// Bytes the block will have.
        rounded: u64,
        /// Which rule rounded it.
        rule: &'static str,
    },
    /// The pool that serves the request, and the segment size a new segment would get.
    Pool {
        /// `small` or `large`.
        pool: &'static str,
        /// Size of a new segment for this request.
        segment_size: u64,
        /// With virtual memory, the page size the pool's memory is mapped in (segments are
        /// then address ranges, and `segment_size` does not apply); 0 with classic segments.
        page: u64,
    },
    /// Pending frees whose events completed were cached first.
    EventsCompleted {
        /// Blocks that became reusable.
        blocks: u64,
    },
    /// The best-fitting cached block (smallest of the stream that fits, lowest address).
    BestFit {
        /// Its address, if one fits.
        addr: Option<u64>,
        /// Its size.
        size: u64,
        /// Cached blocks in the pool.
        cached_blocks: u64,
    },
    /// The best fit was not taken.
    Rejected {
        /// Its address.
        addr: u64,
        /// Its size.
        size: u64,
        /// Why not.
        reason: &'static str,
    },
    /// Paged policy: the request takes the back of the cached block, next to the live block
    /// after it; the front stays cached.
    TookBack {
        /// Address handed out.
        addr: u64,
        /// Size of the cached block before the decision.
        block_size: u64,
    },
    /// The block was split, or kept whole.
    Split {
        /// Address of the block handed out.
        addr: u64,
        /// Size of the block before the decision.
        block_size: u64,
        /// Bytes left over.
        remainder: u64,
        /// True if the remainder became a cached block of its own.
        split: bool,
        /// Why.
        reason: &'static str,
    },
    /// Garbage collection returned old cached segments.
    GarbageCollected {
        /// Bytes returned to the device.
        bytes: u64,
    },
    /// A new segment came from the device.
    NewSegment {
        /// Its address.
        addr: u64,
        /// Its size.
        size: u64,
    },
    /// The device or the memory fraction refused a new segment.
    SegmentRefused {
        /// Size asked for.
        size: u64,
        /// Why.
        reason: &'static str,
    },
    /// Virtual memory: physical pages were mapped under free address space for the request.
    MappedPages {
        /// Where the mapping starts.
        addr: u64,
        /// Bytes mapped.
        size: u64,
        /// Of them, bytes new from the device; the rest was reserved already (idle pages
        /// moved here, or pages kept from earlier moves).
        new_bytes: u64,
    },
    /// cachalot's policy: idle pages (mapped wholly inside cached blocks elsewhere, under no
    /// allocation) were taken away to be mapped under this request.
    MovedPages {
        /// Pages moved.
        pages: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// cachalot's policy: the stream's misses keep asking for a block just longer than one it
    /// freed (tensors regrown by copy), so from now on they go to its region, the top of its
    /// range, where freed holes keep their pages while the device can make new ones.
    RegionForRegrowth {
        /// The stream.
        stream: u64,
        /// Where its region starts.
        from: u64,
    },
    /// cachalot's policy, for a stream with a region: the cached block the free index chose
    /// lies behind free memory of its hole, so the request goes to the hole's front instead,
    /// placed as a miss is; further in, it would leave a gap in front of it.
    ToFrontOfHole {
        /// The cached block passed over.
        block: u64,
    },
    /// The hole's front lacked pages that neither the device nor idle memory could give: the
    /// cached block serves after all, and nothing is released.
    FrontLackedPages {
        /// The cached block that serves.
        block: u64,
    },
    /// Cached segments (under virtual memory: idle pages, and address ranges left empty)
    /// were returned to the device to make room.
    Released {
        /// Segments returned (under virtual memory: address ranges released).
        segments: u64,
        /// Bytes returned.
        bytes: u64,
        /// Which step of the recovery path.
        step: &'static str,
        /// The allocator maps pages into address ranges.
        virtual_memory: bool,
    },
    /// Expandable segments: mapping pages for the request was refused.
    PagesRefused {
        /// Bytes of pages asked for.
        size: u64,
        /// Why.
        reason: &'static str,
    },
    /// Nothing worked: out of memory.
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
    },
    /// A freed block merged with a free neighbour.
    Merged {
        /// `previous` or `next`.
        side: &'static str,
        /// Bytes the neighbour added.
        bytes: u64,
    },
    /// A freed block is cached for reuse.
    Cached {
        /// Its address after merging.
        addr: u64,
        /// Its size after merging.
        size: u64,
        /// True if it is a whole segment (empty_cache could return it).
        whole_segment: bool,
    },
    /// A freed block waits for work on other streams.
    Pending {
        /// Events recorded.
        events: u64,
    },
    /// A freed block used on other streams waits for the CUDA graph captures underway to end
    /// before its events are recorded.
    DeferredByCapture,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sz = format_size;
        match self {
            Decision::Rounded { requested, rounded, rule } => {
                // The exact bytes always: "1.00 MiB" would hide the 512 bytes that put a
                // request just over 1 MiB into the large pool.
                let human = sz(*rounded);
                if human == alloc::format!("{rounded} bytes") {
                    write!(f, "Round {requested} bytes up to {human} ({rule}).")
                } else {
                    write!(f, "Round {requested} bytes up to {rounded} bytes, {human} ({rule}).")
                }
            }
            Decision::Pool { pool, segment_size, page } => {
                let which = if *pool == "small" { "requests of at most 1 MiB" } else { "requests above 1 MiB" };
                if *page > 0 {
                    write!(f, "Use the {pool} pool ({which}); its memory is mapped in pages of {}.", sz(*page))
                } else {
                    write!(f, "Use the {pool} pool ({which}); a new segment for it would be {}.", sz(*segment_size))
                }
            }
            Decision::EventsCompleted { blocks } => {
                write!(f, "{blocks} block(s) freed earlier on other streams are now reusable.")
            }
            Decision::BestFit { addr: Some(a), size, cached_blocks } => write!(
                f,
                "Best fit among {cached_blocks} cached block(s): the {} block at {a:#x} (smallest that fits).",
                sz(*size)
            ),
            Decision::BestFit { addr: None, cached_blocks, .. } => {
                write!(f, "No cached block of this stream is large enough ({cached_blocks} cached in the pool).")
            }
            Decision::Rejected { addr, size, reason } => {
                write!(f, "Do not take the {} block at {addr:#x}: {reason}.", sz(*size))
            }
            Decision::Split { addr, block_size, remainder, split: true, reason } => write!(
                f,
                "Split the {} block: hand out the front at {addr:#x} and keep {} cached behind it ({reason}).",
                sz(*block_size),
                sz(*remainder)
            ),
            Decision::Split { block_size, remainder, split: false, reason, .. } => write!(
                f,
                "Hand out the whole {} block{} ({reason}).",
                sz(*block_size),
                if *remainder > 0 { alloc::format!(", wasting {}", sz(*remainder)) } else { String::new() }
            ),
            Decision::TookBack { addr, block_size } => write!(
                f,
                "Take the back of the {} block, at {addr:#x}, against the allocation after it; the front stays cached and its idle pages free to move.",
                sz(*block_size)
            ),
            Decision::GarbageCollected { bytes } => {
                write!(f, "Garbage collection returned {} of cached memory to the device.", sz(*bytes))
            }
            Decision::NewSegment { addr, size } => write!(f, "Allocate a new {} segment at {addr:#x}.", sz(*size)),
            Decision::MappedPages { addr, size, new_bytes } if new_bytes == size => {
                write!(f, "Map {} of new pages at {addr:#x}, under free address space.", sz(*size))
            }
            Decision::MappedPages { addr, size, new_bytes: 0 } => write!(
                f,
                "Map {} of pages at {addr:#x}, all of them memory already reserved: reserved memory does not grow.",
                sz(*size)
            ),
            Decision::MappedPages { addr, size, new_bytes } => write!(
                f,
                "Map {} of pages at {addr:#x}: {} new from the device, the rest memory already reserved.",
                sz(*size),
                sz(*new_bytes)
            ),
            Decision::MovedPages { pages, bytes } => write!(
                f,
                "Move {pages} idle page(s), {}, out of cached blocks elsewhere (mapped, but under no allocation) to serve this request.",
                sz(*bytes)
            ),
            Decision::RegionForRegrowth { stream, from } => write!(
                f,
                "Stream {stream:#x} keeps asking for a block just longer than one it freed (tensors regrown by copy): its misses go from now on above {from:#x}, where freed blocks keep their pages while the device can make new ones.",
            ),
            Decision::ToFrontOfHole { block } => write!(
                f,
                "The cached block at {block:#x} lies behind free memory of its hole: place the request at the hole's front instead, as a miss is, so that no gap is left in front of it.",
            ),
            Decision::FrontLackedPages { block } => write!(
                f,
                "The hole's front lacks pages that cannot be had: the cached block at {block:#x} serves instead, and nothing is released.",
            ),
            Decision::SegmentRefused { size, reason } => write!(f, "A new {} segment is refused: {reason}.", sz(*size)),
            Decision::Released { segments, bytes, step, virtual_memory } => {
                let mut chars = step.chars();
                let first = chars.next().map(|c| c.to_ascii_uppercase()).unwrap_or(' ');
                let step = chars.as_str();
                match (*virtual_memory, *segments) {
                    (false, _) => write!(
                        f,
                        "{first}{step}: returned {segments} cached segment(s), {}, to the device.",
                        sz(*bytes)
                    ),
                    (true, 0) => write!(f, "{first}{step}: returned {} of idle pages to the device.", sz(*bytes)),
                    (true, ranges) => write!(
                        f,
                        "{first}{step}: returned {} of idle pages to the device, and released {ranges} address range(s) left empty.",
                        sz(*bytes)
                    ),
                }
            }
            Decision::PagesRefused { size, reason } => write!(f, "Mapping {} of pages is refused: {reason}.", sz(*size)),
            Decision::OutOfMemory { requested } => {
                write!(f, "Out of memory: nothing can serve {} even after releasing the cache.", sz(*requested))
            }
            Decision::Merged { side, bytes } => write!(f, "Merge with the free {side} block ({}).", sz(*bytes)),
            Decision::Cached { addr, size, whole_segment } => write!(
                f,
                "Cache the {} block at {addr:#x}{}.",
                sz(*size),
                if *whole_segment { " (a whole segment: empty_cache can return it)" } else { "" }
            ),
            Decision::Pending { events } => write!(
                f,
                "The block was used on other streams: it waits for {events} event(s) before it can be reused."
            ),
            Decision::DeferredByCapture => write!(
                f,
                "The block was used on other streams during a CUDA graph capture: no event can be recorded \
                 until the capture ends, so it waits for that, then for its events, before it can be reused."
            ),
        }
    }
}

/// The decisions of the calls made since explaining was turned on or last taken.
#[derive(Clone, Debug, Default)]
pub struct Explainer {
    pub(crate) decisions: Option<Vec<Decision>>,
}

impl Explainer {
    /// Notes a decision if explaining is on.
    #[inline]
    pub(crate) fn note(&mut self, decision: impl FnOnce() -> Decision) {
        if self.decisions.is_some() {
            self.push(decision());
        }
    }

    /// [`Explainer::note`], unless `PLAIN` says explaining is off (the allocator's hot path
    /// knows it once per call, see `Allocator::plain`).
    #[inline(always)]
    pub(crate) fn note_if<const PLAIN: bool>(&mut self, decision: impl FnOnce() -> Decision) {
        if !PLAIN {
            self.note(decision);
        }
    }

    /// Out of line: the push (and its growth) would otherwise be inlined into every caller,
    /// the allocator's hot path among them, where it costs even when explaining is off.
    #[cold]
    #[inline(never)]
    fn push(&mut self, decision: Decision) {
        if let Some(d) = &mut self.decisions {
            if d.len() >= MAX_DECISIONS {
                d.drain(..MAX_DECISIONS / 2);
            }
            d.push(decision);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Allocator, Config, SimDevice};

    /// Stepping through a long trace with explaining on and never taking the decisions held
    /// memory for every one of them (600,000 operations exhausted the browser's).
    #[test]
    fn decisions_left_untaken_stay_bounded_and_keep_the_latest() {
        let mut a = Allocator::new(SimDevice::new(1 << 30), Config::pytorch());
        a.set_explain(true);
        let pair = |a: &mut Allocator<SimDevice>| {
            let addr = a.malloc(1000, 0).unwrap();
            a.free(addr).unwrap();
        };
        pair(&mut a); // the segment it makes stays cached: later pairs decide alike
        a.take_decisions();
        pair(&mut a);
        let one_pair = a.take_decisions();
        for _ in 0..3 * MAX_DECISIONS / one_pair.len() {
            pair(&mut a);
        }
        let kept = a.take_decisions();
        assert!(kept.len() <= MAX_DECISIONS && kept.len() >= MAX_DECISIONS / 2, "{} kept", kept.len());
        assert_eq!(kept[kept.len() - one_pair.len()..], one_pair[..], "the latest call's decisions are whole");
        assert!(a.take_decisions().is_empty());
    }

    /// Twenty 5 MiB tensors fill a 100 MiB device; every other one is freed; then 8 MiB.
    fn holes_then_eight_mib(config: &str) -> (Vec<Decision>, Vec<Decision>) {
        let mut a = Allocator::new(SimDevice::new(100 << 20), Config::parse(config).unwrap());
        a.set_explain(true);
        let first = a.malloc(5 << 20, 0).unwrap();
        let first_call = a.take_decisions();
        let mut live = alloc::vec![first];
        live.extend((1..20).map(|_| a.malloc(5 << 20, 0).unwrap()));
        for addr in live.iter().step_by(2) {
            a.free(*addr).unwrap();
        }
        a.take_decisions();
        let _ = a.malloc(8 << 20, 0);
        (first_call, a.take_decisions())
    }

    /// Under expandable segments, a release that leaves a range empty says so, though the
    /// `segment` statistic (PyTorch's) counts no range (found by review).
    #[test]
    fn expandable_segments_explain_the_ranges_released() {
        let mut a =
            Allocator::new(SimDevice::new(1 << 30), Config::parse("policy:pytorch,expandable_segments:True").unwrap());
        a.set_explain(true);
        let p = a.malloc(300 << 20, 0).unwrap();
        a.free(p).unwrap();
        a.take_decisions();
        a.malloc(900 << 20, 1).unwrap(); // stream 0's range is emptied and released
        assert_eq!(a.address_ranges(), 1);
        let text: alloc::string::String = a.take_decisions().iter().map(|d| alloc::format!("{d}\n")).collect();
        assert!(text.contains("released 1 address range(s) left empty"), "{text}");
    }

    /// A request that fails explains no move: the pages it took from cached blocks went back
    /// to the kept ones (found by review: "Move 1 idle page(s) ... to serve this request",
    /// then out of memory).
    #[test]
    fn a_failed_request_explains_no_move() {
        let mut a = Allocator::new(SimDevice::new(100 << 20), Config::parse("policy:cachalot").unwrap());
        a.set_explain(true);
        let small = a.malloc(1000, 0).unwrap();
        let _large = a.malloc(90 << 20, 0).unwrap();
        a.free(small).unwrap();
        a.take_decisions();
        assert!(a.malloc(12 << 20, 0).is_err());
        let decisions = a.take_decisions();
        assert!(decisions.iter().any(|d| matches!(d, Decision::OutOfMemory { .. })), "{decisions:?}");
        assert!(!decisions.iter().any(|d| matches!(d, Decision::MovedPages { .. })), "{decisions:?}");
    }

    /// Under virtual memory the explanations speak of pages, not of segments: what was
    /// mapped, how much of it is new memory, and which idle pages moved.
    #[test]
    fn virtual_memory_decisions_name_pages() {
        let (first, eight) = holes_then_eight_mib("policy:cachalot");
        assert!(first.contains(&Decision::Pool { pool: "large", segment_size: 20 << 20, page: 2 << 20 }), "{first:?}");
        assert!(first.iter().any(|d| matches!(d, Decision::MappedPages { new_bytes, size, .. } if new_bytes == size)));
        assert!(eight.contains(&Decision::MovedPages { pages: 4, bytes: 8 << 20 }), "{eight:?}");
        assert!(eight
            .iter()
            .any(|d| matches!(d, Decision::MappedPages { size: s, new_bytes: 0, .. } if *s == 8 << 20)));
        assert!(
            !eight.iter().any(|d| matches!(d, Decision::NewSegment { .. } | Decision::Released { .. })),
            "{eight:?}"
        );
        let text = eight.iter().map(|d| alloc::format!("{d}")).collect::<Vec<_>>().join("\n");
        assert!(
            text.contains("Move 4 idle page(s), 8.00 MiB") && text.contains("reserved memory does not grow"),
            "{text}"
        );

        let step = "release every idle page and retry";
        let released = Decision::Released { segments: 0, bytes: 16 << 20, step, virtual_memory: true };
        assert_eq!(
            alloc::format!("{released}"),
            "Release every idle page and retry: returned 16.00 MiB of idle pages to the device."
        );
        let released = Decision::Released { segments: 1, bytes: 2 << 20, step, virtual_memory: true };
        let text = alloc::format!("{released}");
        assert!(text.ends_with("2.00 MiB of idle pages to the device, and released 1 address range(s) left empty."));

        let (first, eight) = holes_then_eight_mib("policy:pytorch,expandable_segments:True");
        // Expandable segments map 20 MiB pages: the holes hold none whole, so the request fails.
        assert!(eight.iter().any(|d| matches!(d, Decision::PagesRefused { .. })), "{eight:?}");
        assert!(!eight.iter().any(|d| matches!(d, Decision::SegmentRefused { .. } | Decision::NewSegment { .. })));
        assert!(first.contains(&Decision::Pool { pool: "large", segment_size: 20 << 20, page: 20 << 20 }), "{first:?}");
        assert!(first.iter().any(
            |d| matches!(d, Decision::MappedPages { size, new_bytes, .. } if *size == 20 << 20 && new_bytes == size)
        ));
        let (first, eight) = holes_then_eight_mib("policy:pytorch");
        assert!(first.contains(&Decision::Pool { pool: "large", segment_size: 20 << 20, page: 0 }), "{first:?}");
        assert!(first.iter().any(|d| matches!(d, Decision::NewSegment { .. })));
        assert!(eight.iter().any(|d| matches!(d, Decision::OutOfMemory { .. })), "{eight:?}");
    }
}
