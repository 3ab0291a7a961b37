//! A search over allocator configs for one trace: the candidates `advise` tries, replayed
//! in parallel, ranked by out-of-memory events, then peak reserved bytes, then driver calls,
//! all of the first pass on a fresh allocator (the figures that matter for memory). Each is
//! then replayed a few more times on the same allocator for its driver calls per warm pass,
//! the driver's share of a training loop's steady state.
//!
//! Invariant: every candidate is a valid config string; results come back in rank order
//! and the ranking is deterministic (ties broken by the config string).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

use cachalot_core::{Allocator, Config, Policy, Replayer, SimDevice};

use super::byte_size::human;
use super::input::NamedTrace;
use super::pass::{replay_pass, replay_whole_pass};
use super::run::driver_calls;

/// One candidate's figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Candidate {
    pub config: String,
    pub policy: String,
    pub peak_reserved_bytes: u64,
    pub peak_requested_bytes: u64,
    pub reserved_over_requested: f64,
    /// Driver calls of the first pass (see [`driver_calls`]).
    pub device_calls: u64,
    /// Out-of-memory events of the first pass.
    pub ooms: u64,
    /// Out-of-memory events of the warm passes, each run on what the one before left cached: a
    /// config whose first pass fits may not hold the trace run again, as a loop runs it.
    pub warm_pass_ooms: u64,
    /// Driver calls of the last of the [`WARM_PASSES`] passes that follow the first: the
    /// steady state, once the cache (and under cachalot's policy a learned layout) settled.
    pub warm_device_calls: f64,
    /// Peak reserved bytes over the first pass and the warm passes.
    pub peak_reserved_bytes_all_passes: u64,
}

impl Candidate {
    /// Its out-of-memory events as configs are ranked by them: the first pass's, then the
    /// warm passes' (a config that fits once but not again ranks after one that fits both).
    pub fn failures(&self) -> (u64, u64) {
        (self.ooms, self.warm_pass_ooms)
    }
}

/// Passes replayed after the first, on the same allocator, for the warm figures: enough for
/// cachalot's policy to learn a repeating trace's layout (recognized in the second pass, laid
/// out in the third, followed from the fourth).
pub const WARM_PASSES: u32 = 5;

/// The configs tried: PyTorch's knobs one at a time and in a few pairs, and cachalot's.
pub fn candidates() -> Vec<String> {
    let mut c: Vec<String> = vec!["policy:pytorch".into()];
    for mb in [32, 64, 128, 256, 512, 1024] {
        c.push(format!("policy:pytorch,max_split_size_mb:{mb}"));
    }
    for (mb, round) in [(128, 64), (128, 256), (512, 256), (512, 1024)] {
        c.push(format!("policy:pytorch,max_split_size_mb:{mb},max_non_split_rounding_mb:{round}"));
    }
    for d in [2, 4, 8, 16] {
        c.push(format!("policy:pytorch,roundup_power2_divisions:{d}"));
    }
    c.push("policy:pytorch,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]".into());
    c.push("policy:pytorch,roundup_power2_divisions:4,max_split_size_mb:256".into());
    for t in [0.6, 0.8] {
        // Garbage collection acts only under a limit, and a fraction of 1.0 sets none.
        c.push(format!("policy:pytorch,garbage_collection_threshold:{t},per_process_memory_fraction:0.99"));
    }
    c.push("policy:pytorch,expandable_segments:True".into());
    c.push("policy:pytorch,expandable_segments:True,roundup_power2_divisions:4".into());
    c.push("policy:cachalot".into());
    c.push("policy:cachalot,garbage_collection_threshold:0.8,per_process_memory_fraction:0.99".into());
    for slack in [0.0, 0.03, 0.1] {
        c.push(format!("policy:cachalot,page_slack:{slack}"));
    }
    c.push("policy:cachalot,learn_layout:False".into());
    c.push("policy:cachalot,regrow_region:False".into());
    c
}

/// Replays `t` under `config` on a fresh simulated device: once for the ranked figures, then
/// [`WARM_PASSES`] more times, the last for the warm one.
pub fn evaluate(t: &NamedTrace, config: &str, capacity: u64) -> Result<Candidate, String> {
    let conf = Config::parse(config).map_err(|e| e.to_string())?;
    let policy = match conf.policy {
        Policy::PyTorch => "pytorch",
        Policy::Cachalot => "cachalot",
    };
    let mut alloc = Allocator::new(SimDevice::for_replay(capacity, &t.trace), conf);
    let failed = |e: &dyn std::fmt::Display| format!("{}: {e}", t.name);
    let mut replayer = Replayer::new(t.trace.slots);
    let (out, _) = replay_pass(t, &mut replayer, &mut alloc)?;
    let c = alloc.device().calls();
    replayer.free_live(&mut alloc).map_err(|e| failed(&e))?;
    let mut before = alloc.device().calls();
    let mut warm_pass_ooms = 0;
    for _ in 1..WARM_PASSES {
        warm_pass_ooms += replay_whole_pass(t, &mut replayer, &mut alloc)?.0.ooms;
        before = alloc.device().calls();
    }
    warm_pass_ooms += replay_whole_pass(t, &mut replayer, &mut alloc)?.0.ooms;
    let warm = driver_calls(&alloc.device().calls().since(&before));
    Ok(Candidate {
        config: config.to_string(),
        policy: policy.into(),
        peak_reserved_bytes: out.peak_reserved_bytes,
        peak_requested_bytes: out.peak_requested_bytes,
        reserved_over_requested: out.peak_reserved_bytes as f64 / out.peak_requested_bytes.max(1) as f64,
        device_calls: driver_calls(&c),
        ooms: out.ooms,
        warm_pass_ooms,
        warm_device_calls: warm as f64,
        peak_reserved_bytes_all_passes: alloc.stats().reserved_bytes.all.peak as u64,
    })
}

/// Evaluates every config on all cores, ranked best first.
pub fn search(t: &NamedTrace, configs: &[String], capacity: u64) -> Result<Vec<Candidate>, String> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(configs.len().max(1));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let terminal = std::io::stderr().is_terminal();
    let results: Vec<Result<Candidate, String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(config) = configs.get(i) else { break };
                        out.push((i, evaluate(t, config, capacity)));
                        let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if terminal {
                            let _ = write!(
                                std::io::stderr(),
                                "\r\x1b[2Kreplaying {} under {d}/{} configs",
                                t.name,
                                configs.len()
                            );
                        }
                    }
                    out
                })
            })
            .collect();
        let mut all: Vec<(usize, Result<Candidate, String>)> =
            workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, r)| r).collect()
    });
    if terminal {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
    let mut ranked: Vec<Candidate> = results.into_iter().collect::<Result<_, _>>()?;
    ranked.sort_by(|a, b| {
        (a.failures(), a.peak_reserved_bytes, a.device_calls, &a.config).cmp(&(
            b.failures(),
            b.peak_reserved_bytes,
            b.device_calls,
            &b.config,
        ))
    });
    Ok(ranked)
}

/// The candidate making the fewest driver calls per warm pass among those with the best's
/// out-of-memory count and within `margin` (a fraction) of its peak reserved bytes, when that
/// is not the best itself: the trade of a little memory for a quieter steady state.
pub fn quieter_than<'a>(best: &Candidate, ranked: &'a [Candidate], margin: f64) -> Option<&'a Candidate> {
    let limit = best.peak_reserved_bytes as f64 * (1.0 + margin);
    let quietest = ranked
        .iter()
        .filter(|c| c.failures() == best.failures() && c.peak_reserved_bytes as f64 <= limit)
        .min_by(|a, b| a.warm_device_calls.total_cmp(&b.warm_device_calls))?;
    (quietest.warm_device_calls < best.warm_device_calls).then_some(quietest)
}

/// Among the candidates with `best`'s out-of-memory count, within `margin` of its peak
/// reserved bytes and making at most `1 / factor` of its driver calls in the first pass, the
/// one reserving least (then the quietest): for a program that runs its work once per
/// process (a text generation, say), where the first pass is all there is.
pub fn quieter_first_pass<'a>(
    best: &Candidate,
    ranked: &'a [Candidate],
    margin: f64,
    factor: u64,
) -> Option<&'a Candidate> {
    let limit = best.peak_reserved_bytes as f64 * (1.0 + margin);
    ranked
        .iter()
        .filter(|c| c.failures() == best.failures() && c.peak_reserved_bytes as f64 <= limit)
        .filter(|c| c.device_calls < best.device_calls && c.device_calls.saturating_mul(factor) <= best.device_calls)
        .min_by_key(|c| (c.peak_reserved_bytes, c.device_calls))
}

/// The config as PyTorch's `PYTORCH_CUDA_ALLOC_CONF` value (for `policy:pytorch` configs).
pub fn as_pytorch_conf(config: &str) -> Option<String> {
    let rest = config.strip_prefix("policy:pytorch")?;
    let rest = rest.trim_start_matches(',');
    Some(rest.to_string())
}

/// Why no config tried avoids out of memory on a trace that holds at most `peak_requested`
/// bytes live at once: it needs more than `capacity`, or it fits but no config packs it.
pub fn why_none_fits(peak_requested: u64, capacity: u64) -> String {
    if peak_requested > capacity {
        format!("the trace needs more memory than this capacity (it holds {} live at once)", human(peak_requested))
    } else {
        format!("none fits {} (the trace holds at most {} live at once)", human(capacity), human(peak_requested))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A candidate with a garbage-collection threshold must run under a limit: without one
    /// (a fraction of 1.0, as in PyTorch) it collects nothing and only repeats its policy.
    #[test]
    fn garbage_collection_candidates_run_under_a_limit() {
        let gc: Vec<String> = candidates().into_iter().filter(|c| c.contains("garbage_collection_threshold")).collect();
        assert_eq!(gc.len(), 3);
        for c in gc {
            let a = Allocator::new(SimDevice::new(1 << 30), Config::parse(&c).unwrap());
            assert!(a.allowed_bytes().is_some(), "{c} sets no limit");
        }
    }

    fn candidate(config: &str, peak: u64, warm: f64, ooms: u64) -> Candidate {
        Candidate {
            config: config.into(),
            policy: "cachalot".into(),
            peak_reserved_bytes: peak,
            peak_requested_bytes: 100,
            reserved_over_requested: peak as f64 / 100.0,
            device_calls: 0,
            ooms,
            warm_pass_ooms: 0,
            warm_device_calls: warm,
            peak_reserved_bytes_all_passes: peak,
        }
    }

    /// The quieter config named is the quietest within the margin of the best's memory, with
    /// its out-of-memory count; none when the best is already the quietest.
    #[test]
    fn a_quieter_config_is_the_quietest_within_the_margin() {
        let ranked = [
            candidate("best", 1000, 300.0, 0),
            candidate("quiet", 1009, 100.0, 0),
            candidate("quieter but larger", 1011, 10.0, 0),
            candidate("quietest but failing", 1000, 0.0, 1),
        ];
        assert_eq!(quieter_than(&ranked[0], &ranked, 0.01).map(|c| c.config.as_str()), Some("quiet"));
        let settled = [candidate("best", 1000, 0.0, 0), candidate("other", 1001, 0.0, 0)];
        assert!(quieter_than(&settled[0], &settled, 0.01).is_none());
    }

    fn first_pass(config: &str, peak: u64, calls: u64, ooms: u64) -> Candidate {
        Candidate { device_calls: calls, ..candidate(config, peak, 0.0, ooms) }
    }

    /// A config is named for its first pass only when it makes at most a tenth of the calls,
    /// within the margin of the memory and with as many out-of-memory events; the fewest win.
    #[test]
    fn a_quieter_first_pass_needs_an_order_of_magnitude_fewer_calls() {
        let name = |ranked: &[Candidate]| quieter_first_pass(&ranked[0], ranked, 0.01, 10).map(|c| c.config.clone());
        let ranked = [
            first_pass("chosen", 1000, 40_000, 0),
            first_pass("a tenth", 1010, 4_000, 0),
            first_pass("fewer", 1005, 500, 0),
            first_pass("fewest but larger", 1011, 10, 0),
            first_pass("fewest but failing", 1000, 0, 1),
        ];
        assert_eq!(name(&ranked).as_deref(), Some("fewer"));
        assert_eq!(name(&ranked[..2]).as_deref(), Some("a tenth"));
        let storm_of_four = [first_pass("chosen", 1000, 2_000, 0), first_pass("a quarter", 1000, 500, 0)];
        assert_eq!(name(&storm_of_four), None);
        assert_eq!(name(&ranked[..1]), None, "the chosen config itself is never named");
        let silent = [first_pass("chosen", 1000, 0, 0), first_pass("also silent", 1000, 0, 0)];
        assert_eq!(name(&silent), None, "no config is quieter than none");
    }
}
