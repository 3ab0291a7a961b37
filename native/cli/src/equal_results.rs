//! Configs whose replays give the same figures, gathered into one group each, so `advise`
//! prints one row for the many knobs that change nothing on a trace instead of a screen of
//! identical lines.
//!
//! Invariant: two candidates share a group exactly when every figure `advise` shows is equal
//! (peak reserved bytes, reserved over requested, first-pass and warm driver calls, OOMs);
//! groups keep the ranking's order, each led by its best-ranked member.

use super::search::Candidate;

/// One group: its best-ranked member's rank (1-based), that member, and the others.
pub struct EqualResults<'a> {
    pub rank: usize,
    pub first: &'a Candidate,
    pub others: Vec<&'a Candidate>,
}

fn figures(c: &Candidate) -> (u64, u64, u64, u64, (u64, u64)) {
    (
        c.peak_reserved_bytes,
        c.reserved_over_requested.to_bits(),
        c.device_calls,
        c.warm_device_calls.to_bits(),
        c.failures(),
    )
}

/// `ranked` (best first) gathered into groups of equal figures, in rank order.
pub fn group(ranked: &[Candidate]) -> Vec<EqualResults<'_>> {
    let mut groups: Vec<EqualResults> = Vec::new();
    for (i, c) in ranked.iter().enumerate() {
        match groups.iter_mut().find(|g| figures(g.first) == figures(c)) {
            Some(g) => g.others.push(c),
            None => groups.push(EqualResults { rank: i + 1, first: c, others: Vec::new() }),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(config: &str, peak: u64, warm: f64) -> Candidate {
        Candidate {
            config: config.into(),
            policy: "pytorch".into(),
            peak_reserved_bytes: peak,
            peak_requested_bytes: 100,
            reserved_over_requested: peak as f64 / 100.0,
            device_calls: 10,
            ooms: 0,
            warm_pass_ooms: 0,
            warm_device_calls: warm,
            peak_reserved_bytes_all_passes: peak,
        }
    }

    #[test]
    fn equal_figures_share_a_group_even_apart_in_the_ranking() {
        let ranked =
            [candidate("a", 100, 0.0), candidate("b", 100, 5.0), candidate("c", 100, 0.0), candidate("d", 200, 0.0)];
        let groups = group(&ranked);
        let shape: Vec<(usize, &str, Vec<&str>)> = groups
            .iter()
            .map(|g| (g.rank, g.first.config.as_str(), g.others.iter().map(|c| c.config.as_str()).collect()))
            .collect();
        assert_eq!(shape, vec![(1, "a", vec!["c"]), (2, "b", vec![]), (4, "d", vec![])]);
    }
}
