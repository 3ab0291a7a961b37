//! The `memo` target: the decision memo on against off. A [`Scenario`]'s first operations
//! form one step of a loop, repeated, on two allocators that differ only in
//! `decision_memo`; every answer, every statistic, every device call and (at each step's
//! end) every segment and block must be the same. The memo needs a loop to replay, so the
//! step repeats [`REPEATS`] times or more (a short one more) and frees what it allocated at its end, as a training step
//! does; faults, held streams, uses on other streams, limits and reads happen inside the
//! step like any operation.
//!
//! A crash is any difference, a panic, or a broken invariant of the memo's allocator.

use cachalot_core::{AllocError, Allocator, Config, SimDevice};

use super::scenario::{Op, Scenario};

/// Most operations of one step.
pub const STEP_OPS: usize = 48;
/// Operations the loop runs in all, at least: the memo needs 64 mallocs to repeat before it
/// records, so a short step repeats more often.
pub const LOOP_OPS: usize = 400;
/// Times the step runs, at least and at most.
pub const REPEATS: (usize, usize) = (24, 120);

/// Runs one input; panics on a crash.
pub fn run(data: &[u8]) {
    let s = Scenario::decode(data);
    if let Err(e) = execute(&s) {
        panic!("{e}\nscenario: {} on {} bytes (virtual memory: {})", s.config, s.capacity, s.virtual_memory);
    }
}

/// Runs a decoded scenario as a loop on both allocators; the error describes the first
/// difference. Returns whether the memo replayed any period, for the corpus test.
pub fn execute(s: &Scenario) -> Result<bool, String> {
    let make = |memo: bool| -> Result<Allocator<SimDevice>, String> {
        let conf = format!("{},decision_memo:{}", s.config, if memo { "True" } else { "False" });
        let config = Config::parse(conf.trim_start_matches(',')).map_err(|e| format!("scenario config: {e}"))?;
        let device =
            if s.virtual_memory { SimDevice::new(s.capacity) } else { SimDevice::without_virtual_memory(s.capacity) };
        Ok(Allocator::new(device, config))
    };
    let (mut memo, mut without) = (make(true)?, make(false)?);
    let step = &s.ops[..s.ops.len().min(STEP_OPS)];
    let repeats = (LOOP_OPS / step.len().max(1)).clamp(REPEATS.0, REPEATS.1);
    for repeat in 0..repeats {
        let mut live: Vec<u64> = Vec::new();
        for (i, op) in step.iter().enumerate() {
            let at = || format!("step {repeat}, op {i} {op:?}");
            let got = apply(&mut memo, op, &live);
            let want = apply(&mut without, op, &live);
            if got != want {
                return Err(format!("{}: the memo answered {got:?}, without it {want:?}", at()));
            }
            same_counts(&memo, &without).map_err(|e| format!("{}: {e}", at()))?;
            memo.check_invariants().map_err(|e| format!("{}: {e}", at()))?;
            track(op, &got, &mut live);
        }
        for addr in live {
            let (got, want) = (memo.free(addr), without.free(addr));
            if got != want {
                return Err(format!("step {repeat}, freeing {addr:#x}: {got:?} against {want:?}"));
            }
        }
        same_counts(&memo, &without).map_err(|e| format!("end of step {repeat}: {e}"))?;
        let segments = |a: &Allocator<SimDevice>| {
            let mut all = a.segments(0);
            all.sort_by_key(|s| s.address);
            all
        };
        if segments(&memo) != segments(&without) {
            return Err(format!("end of step {repeat}: the memo changed a segment or a block"));
        }
    }
    Ok(memo.memo_counts().periods_replayed > 0)
}

/// The statistics and the device's calls are the same on both.
fn same_counts(memo: &Allocator<SimDevice>, without: &Allocator<SimDevice>) -> Result<(), String> {
    if memo.stats() != without.stats() {
        return Err(format!("statistics differ:\n{:?}\n{:?}", memo.stats(), without.stats()));
    }
    let (m, w) = (memo.device().calls(), without.device().calls());
    if m != w {
        return Err(format!("device calls differ:\n{m:?}\n{w:?}"));
    }
    Ok(())
}

/// What a call answered, as a value to compare.
#[derive(Debug, PartialEq)]
enum Answer {
    Address(Result<u64, AllocError>),
    Done(Result<(), AllocError>),
    Text(String),
    Nothing,
}

/// The live allocation `pick` names (0 the latest), if any.
fn pick(live: &[u64], pick: usize) -> Option<u64> {
    (!live.is_empty()).then(|| live[live.len() - 1 - pick % live.len()])
}

/// Runs one operation on one allocator.
fn apply(a: &mut Allocator<SimDevice>, op: &Op, live: &[u64]) -> Answer {
    match *op {
        Op::Malloc { size, stream } => Answer::Address(a.malloc(size, stream)),
        Op::Free { pick: p } => match pick(live, p) {
            Some(addr) => Answer::Done(a.free(addr)),
            None => Answer::Nothing,
        },
        Op::BadFree { pick: p, kind } => {
            let addr = match (kind, pick(live, p)) {
                (0, Some(addr)) => addr + 512,
                _ => 0x1000 + p as u64 * 512,
            };
            Answer::Done(a.free(addr))
        }
        Op::RecordStream { pick: p, stream } => match pick(live, p) {
            Some(addr) => Answer::Done(a.record_stream(addr, stream)),
            None => Answer::Nothing,
        },
        Op::HoldStream(s) => {
            a.device_mut().hold_stream(s);
            Answer::Nothing
        }
        Op::FinishStream(s) => {
            a.device_mut().finish_stream(s);
            Answer::Nothing
        }
        Op::EmptyCache => Answer::Done(a.empty_cache()),
        Op::SetFraction(f) => Answer::Done(a.set_memory_fraction(f)),
        Op::Fail { site, after } => {
            let call = a.device().next_call(site) + after;
            a.device_mut().fail_call(site, call);
            Answer::Nothing
        }
        Op::Inspect(what) => match what % 4 {
            0 => Answer::Text(a.memory_summary(0, what & 4 != 0)),
            1 => Answer::Text(a.snapshot_json(0)),
            2 => {
                a.set_explain(what & 4 != 0);
                Answer::Text(format!("{:?}", a.take_decisions()))
            }
            _ => {
                a.reset_peak_stats();
                Answer::Nothing
            }
        },
    }
}

/// Keeps the step's live allocations as the answers change them.
fn track(op: &Op, answer: &Answer, live: &mut Vec<u64>) {
    match (op, answer) {
        (Op::Malloc { .. }, Answer::Address(Ok(addr))) => live.push(*addr),
        (Op::Free { pick: p }, Answer::Done(Ok(()))) => {
            let at = live.len() - 1 - p % live.len();
            live.remove(at);
        }
        _ => {}
    }
}
