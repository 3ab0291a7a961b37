//! `cachalot advise`: replays a trace under a search of configs (PyTorch's knobs and
//! cachalot's policy) and prints them ranked, with the config strings to paste into
//! `PYTORCH_CUDA_ALLOC_CONF` and `CACHALOT_ALLOC_CONF`, and, where one exists, a config that
//! gives up a little memory for fewer driver calls once the loop is warm, and one that makes
//! several times fewer in the first pass.
//!
//! Invariant: a config is never recommended as a fit while it runs out of memory, in its first
//! pass or in the passes after it (a loop runs the trace again on what the last run left
//! cached): when every config tried does, advise says so instead of recommending one, and a
//! PyTorch line that still runs out says how often.

use super::byte_size::human;
use super::command_line::AdviseArgs;
use super::margin::{better_than, RULE};
use super::output::Out;
use super::paragraph::fill;
use super::search::{
    as_pytorch_conf, candidates, quieter_first_pass, quieter_than, search, why_none_fits, Candidate, WARM_PASSES,
};
use super::table::{Align, Table, DEFAULT_WIDTH};
use super::{equal_results, input, run, Failure};

/// How much more peak reserved memory than the best a config may take to be named for
/// making fewer driver calls once warm.
const QUIETER_MARGIN: f64 = 0.01;

/// How many times fewer driver calls a config must make in the first pass (within
/// [`QUIETER_MARGIN`] of the memory) to be named for it: a difference of that order is what a
/// program that generates text once per process pays in time (each map or unmap costs a GPU
/// tens of microseconds), not the few calls either way between configs that place alike.
const FIRST_PASS_FACTOR: u64 = 10;

pub fn run(args: &AdviseArgs, out: Out) -> Result<(), Failure> {
    let json = args.trace.json;
    let capacity = args.device.capacity.unwrap_or(run::DEFAULT_CAPACITY);
    let mut trace = input::load(args.trace.trace.as_deref(), args.trace.device, &args.trace.limits.limits())?;
    input::check_skipped(&trace, args.trace.strict)?;
    if args.trace.no_follow_addresses {
        trace.trace.segment_placements.clear();
    }
    let start = std::time::Instant::now();
    let ranked = search(&trace, &candidates(), capacity)?;
    let secs = start.elapsed().as_secs_f64();
    if json {
        serde_json::to_writer(&mut *out, &ranked).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    let width = (!args.wide).then_some(DEFAULT_WIDTH);
    let fit = |text: &str| fill(text, width.unwrap_or(usize::MAX), "  ");
    writeln!(
        out,
        "{}",
        fit(&format!("trace {}: {}; simulated device of {}", trace.label(), trace.trace.describe(), human(capacity)))
    )?;
    let groups = equal_results::group(&ranked);
    let shown = if args.all { ranked.len() } else { groups.len() };
    let collapsed = if shown < ranked.len() { ", configs of equal figures in one row (--all shows each)" } else { "" };
    writeln!(out, "{}\n", fit(&format!("{} configs replayed in {secs:.2} s, best first{collapsed}:", ranked.len())))?;
    let mut table = Table::new(&[
        ("#", Align::Figure),
        ("config", Align::Label),
        ("peak resv", Align::Figure),
        ("resv/req", Align::Figure),
        ("drv calls", Align::Figure),
        ("warm", Align::Figure),
        ("OOMs", Align::Figure),
    ]);
    let mut row = |rank: usize, c: &Candidate, label: String| {
        table.row(vec![
            rank.to_string(),
            label,
            human(c.peak_reserved_bytes),
            format!("{:.3}", c.reserved_over_requested),
            c.device_calls.to_string(),
            format!("{:.0}", c.warm_device_calls),
            match c.warm_pass_ooms {
                0 => c.ooms.to_string(),
                warm => format!("{}+{warm}", c.ooms),
            },
        ])
    };
    if args.all {
        ranked.iter().enumerate().for_each(|(i, c)| row(i + 1, c, c.config.clone()));
    } else {
        for g in &groups {
            let label = match g.others.len() {
                0 => g.first.config.clone(),
                n => format!("{} (+{n} equal)", g.first.config),
            };
            row(g.rank, g.first, label);
        }
    }
    for line in table.render(width) {
        writeln!(out, "{line}")?;
    }
    writeln!(
        out,
        "\n{}\n",
        fit(&format!(
            "peak resv and drv calls (driver calls: memory alloc, free, create, map, unmap and release \
             calls): the first pass on an empty allocator; warm: the driver calls of the last of \
             {WARM_PASSES} passes after it, on the same allocator; OOMs: the first pass's out-of-memory \
             events, +N those of the passes after it. {}{}.",
            RULE[..1].to_uppercase(),
            &RULE[1..]
        ))
    )?;
    match ranked.first() {
        Some(best) if best.ooms > 0 => no_fit(out, best, trace.peak_requested(), capacity)?,
        Some(best) if best.warm_pass_ooms > 0 => no_fit_again(out, best)?,
        Some(best) => recommend(out, &ranked, best)?,
        None => {}
    }
    Ok(())
}

/// Says that every config tried ran out of memory, and why, instead of recommending one.
fn no_fit(out: Out, best: &Candidate, peak_requested: u64, capacity: u64) -> Result<(), Failure> {
    let why = why_none_fits(peak_requested, capacity);
    let text = format!(
        "no config tried avoids out of memory: {why}; the fewest out-of-memory events, {}, under {}",
        best.ooms, best.config
    );
    writeln!(out, "{}", fill(&text, DEFAULT_WIDTH, "  "))?;
    Ok(())
}

/// Says that every config tried whose first pass fits runs out of memory when the trace runs
/// again, as a loop runs it, instead of recommending one.
fn no_fit_again(out: Out, best: &Candidate) -> Result<(), Failure> {
    let text = format!(
        "no config tried holds the trace run again: those whose first pass fits run out of memory in the \
         {WARM_PASSES} passes after it, as a loop repeating the trace would; the fewest out-of-memory events \
         there, {}, under {}. `cachalot fit TRACE --runs N` finds the device a loop of N runs needs",
        best.warm_pass_ooms, best.config
    );
    writeln!(out, "{}", fill(&text, DEFAULT_WIDTH, "  "))?;
    Ok(())
}

/// The lines to paste: a PyTorch config and a cachalot one, each only where it beats the
/// default by the margin (see [`super::margin`]), and a quieter one. Each is said on a line
/// of its own above the line to paste, which stays whole.
fn recommend(out: Out, ranked: &[Candidate], best: &Candidate) -> Result<(), Failure> {
    if ranked.iter().any(|c| c.policy == "pytorch") {
        match better_than(ranked, "policy:pytorch", |c| c.policy == "pytorch") {
            Some(p) => {
                let still = match p.failures() {
                    (0, 0) => String::new(),
                    (first, 0) => format!("; still {first} out-of-memory events: no PyTorch config tried fits"),
                    (0, again) => format!(
                        "; still {again} out-of-memory events in the passes after the first: no PyTorch config \
                         tried holds the trace run again"
                    ),
                    (first, again) => format!(
                        "; still {first} out-of-memory events, and {again} in the passes after: no PyTorch config \
                         tried holds the trace run again"
                    ),
                };
                let line = format!(
                    "PyTorch, peak reserved {}{}{still}:",
                    human(p.peak_reserved_bytes),
                    less(ranked, p, "policy:pytorch")
                );
                writeln!(out, "{}", fill(&line, DEFAULT_WIDTH, "  "))?;
                writeln!(out, "PYTORCH_CUDA_ALLOC_CONF={}", as_pytorch_conf(&p.config).unwrap_or_default())?;
            }
            None => {
                writeln!(out, "PyTorch: no PyTorch config tried beats its default by the margin; leave unset:")?;
                writeln!(out, "PYTORCH_CUDA_ALLOC_CONF=")?;
            }
        }
    }
    let chosen = match better_than(ranked, "policy:cachalot", |_| true) {
        Some(c) => {
            let line = format!(
                "cachalot, peak reserved {}{}:",
                human(c.peak_reserved_bytes),
                less(ranked, c, "policy:cachalot")
            );
            writeln!(out, "{}", fill(&line, DEFAULT_WIDTH, "  "))?;
            c
        }
        None => {
            let default = ranked.iter().find(|c| c.config == "policy:cachalot").unwrap_or(best);
            writeln!(
                out,
                "cachalot: no config tried beats the default by the margin; keep it (peak reserved {}):",
                human(default.peak_reserved_bytes)
            )?;
            default
        }
    };
    writeln!(out, "CACHALOT_ALLOC_CONF={}", chosen.config)?;
    let warm = quieter_than(chosen, ranked, QUIETER_MARGIN);
    let first = quieter_first_pass(chosen, ranked, QUIETER_MARGIN, FIRST_PASS_FACTOR);
    let first_pass = |q: &Candidate| format!("{} instead of {}", q.device_calls, chosen.device_calls);
    let warm_pass =
        |q: &Candidate| format!("{:.0} a warm pass instead of {:.0}", q.warm_device_calls, chosen.warm_device_calls);
    // One line where one config is quieter both ways.
    let lines = match (warm, first) {
        (Some(w), Some(f)) if w.config == f.config => {
            vec![(w, format!("in the first pass and once warm, {} and {}", first_pass(f), warm_pass(w)))]
        }
        _ => warm
            .map(|w| (w, format!("once warm, {}", warm_pass(w))))
            .into_iter()
            .chain(first.map(|f| (f, format!("in the first pass, {}", first_pass(f)))))
            .collect(),
    };
    for (q, what) in lines {
        writeln!(out, "fewer driver calls {what}, peak reserved {}:", human(q.peak_reserved_bytes))?;
        writeln!(out, "CACHALOT_ALLOC_CONF={}", q.config)?;
    }
    Ok(())
}

/// ", N% less than the default's" for `c` against the candidate of config `baseline`.
fn less(ranked: &[Candidate], c: &Candidate, baseline: &str) -> String {
    match ranked.iter().find(|b| b.config == baseline) {
        // Recommended for running out of memory less: what the default's runs lacked.
        Some(b) if b.failures() != c.failures() => {
            let (first, again) = b.failures();
            match (first, again) {
                (0, _) => format!(
                    "; the default's first pass fits too, but the passes after it run out of memory {again} times"
                ),
                _ => format!("; the default runs out of memory {first} times in the first pass"),
            }
        }
        Some(b) if b.peak_reserved_bytes > 0 => {
            let saved = 1.0 - c.peak_reserved_bytes as f64 / b.peak_reserved_bytes as f64;
            format!(", {:.1}% less than the default's", saved * 100.0)
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(config: &str, peak: u64, calls: u64, warm: f64) -> Candidate {
        Candidate {
            config: config.into(),
            policy: "cachalot".into(),
            peak_reserved_bytes: peak,
            peak_requested_bytes: 1000,
            reserved_over_requested: peak as f64 / 1000.0,
            device_calls: calls,
            ooms: 0,
            warm_pass_ooms: 0,
            warm_device_calls: warm,
            peak_reserved_bytes_all_passes: peak,
        }
    }

    fn advice(ranked: &[Candidate]) -> String {
        let mut out = Vec::new();
        assert!(recommend(&mut out, ranked, &ranked[0]).is_ok());
        String::from_utf8(out).unwrap()
    }

    /// A config quieter in the first pass and once warm gets one line; two configs, one each.
    #[test]
    fn quieter_configs_are_named_once_each() {
        let both = [candidate("policy:cachalot", 1000, 40_000, 300.0), candidate("quiet", 1005, 400, 0.0)];
        let text = advice(&both);
        assert!(
            text.contains("fewer driver calls in the first pass and once warm, 400 instead of 40000 and 0 a warm pass instead of 300"),
            "{text}"
        );
        assert_eq!(text.matches("CACHALOT_ALLOC_CONF=quiet").count(), 1, "{text}");
        let apart = [
            candidate("policy:cachalot", 1000, 40_000, 300.0),
            candidate("settled", 1002, 39_000, 0.0),
            candidate("cold", 1005, 400, 100.0),
        ];
        let text = advice(&apart);
        assert!(text.contains("fewer driver calls once warm, 0 a warm pass instead of 300"), "{text}");
        assert!(text.contains("fewer driver calls in the first pass, 400 instead of 40000"), "{text}");
        assert!(text.contains("CACHALOT_ALLOC_CONF=settled") && text.contains("CACHALOT_ALLOC_CONF=cold"), "{text}");
    }
}
