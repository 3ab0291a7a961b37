"""The PyTorch check's plan: which runs of pytorch_run.py to make, in what order, inside a time
budget; then the report (pytorch_report.py), printed last.

usage: python3 native/gpu/pytorch_check.py OUTDIR   (pytorch_check.sh calls it)

Order, most important first, slowest workload last in each phase so a short budget still
completes the others:
  1. round 1: per workload, PyTorch's allocator then cachalot (default config: policy:cachalot);
  2. traces: cachalot with record_history, then the agreement checks of its stats, summary and
     snapshot against `cachalot replay` of the recorded history — the three workloads side by
     side (these runs are not timed, and cachalot's decisions do not depend on what else uses
     the GPU: free memory is read only to report an out-of-memory);
  3. rounds 2 and 3 (REPS in all), alternating which allocator goes first, one run at a time;
  4. policy:pytorch: cachalot with PyTorch's decisions (history recorded too), side by side.
A round's pair of runs is made whole or not at all, and only when the workload's slowest run
so far (a guess before the first) still ends inside BUDGET_S (inside BUDGET_S + 30 s for the
first two phases, which the requirements cannot do without); everything skipped is said.
No run goes past BUDGET_S + 30 s (it is stopped, and reported as such).

Environment: BUDGET_S (default 470), REPS (default 3), HISTORY (record_history entries,
default 2000000), EXTRA_CONFIG (keys added to every cachalot config, e.g. lock_per_stream:True).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytorch_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LIB = os.path.join(ROOT, "target", "release", "libcachalot.so")
CLI = os.path.join(ROOT, "target", "release", "cachalot")
WORKLOADS = os.environ.get("WORKLOADS", "mixed_fc_conv resnet50_train gpt2_train").split()
FIRST_GUESS = dict(mixed_fc_conv=35, resnet50_train=45, gpt2_train=70)  # seconds per process
BUDGET = float(os.environ.get("BUDGET_S", 470))
HARD = BUDGET + 30
REPS = int(os.environ.get("REPS", 3))
HISTORY = int(os.environ.get("HISTORY", 2_000_000))
EXTRA_CONFIG = os.environ.get("EXTRA_CONFIG", "")

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "pytorch_check.log"), "a")
WORK = tempfile.mkdtemp(prefix="cachalot-pytorch-")  # run outputs and snapshots (large): never under OUT
START = time.monotonic()
slowest = {}  # workload -> longest process seen (s)


def elapsed():
    return time.monotonic() - START


def say(msg, quiet=False):
    LOG.write(msg + "\n")
    LOG.flush()
    if not quiet:
        print(msg, flush=True)


def estimate(group, side_by_side):
    """Seconds a group should take: the slowest timed process so far per workload (a guess
    before the first); recorded runs add the replays, and side by side they share the GPU."""
    each = [slowest.get(r["workload"], FIRST_GUESS[r["workload"]]) * (1.3 if r["record"] else 1) +
            (15 if r["record"] else 0) for r in group]
    return max(each) * 1.5 if side_by_side else sum(each)


def make(workload, kind, rnd):
    record = kind in ("trace", "pytorch")
    config = {"native": "", "cachalot": "", "trace": f"record_history:{HISTORY}",
              "pytorch": f"policy:pytorch,record_history:{HISTORY}"}[kind]
    if kind != "native" and EXTRA_CONFIG:
        config = ",".join(c for c in (config, EXTRA_CONFIG) if c)
    label = {"native": "native", "cachalot": "cachalot", "trace": "cachalot+history",
             "pytorch": "cachalot policy:pytorch"}[kind]
    return dict(workload=workload, kind=kind, label=label, round=rnd, record=record, config=config,
                allocator="native" if kind == "native" else "cachalot")


def launch(run):
    """Starts pytorch_run.py for `run`, its output into files (runs may go side by side)."""
    cmd = [sys.executable, os.path.join(HERE, "pytorch_run.py"), run["workload"], run["allocator"],
           "--config", run["config"], "--lib", LIB, "--cli", CLI]
    base = os.path.join(WORK, f"{run['workload']}.{run['kind']}.r{run['round']}")
    if run["record"]:
        cmd += ["--record", base + ".snapshot.json"]
    say(f"$ {' '.join(cmd)}", quiet=True)
    files = open(base + ".stdout", "w+"), open(base + ".stderr", "w+")
    return dict(run=run, proc=subprocess.Popen(cmd, stdout=files[0], stderr=files[1], cwd=ROOT),
                files=files, t0=time.monotonic())


def finish(job):
    """Waits for a launched run (stopping it at the hard limit) and records what it printed."""
    run, proc = job["run"], job["proc"]
    try:
        rc = proc.wait(timeout=max(10.0, HARD - elapsed()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = "timeout"
    run["proc_s"] = round(time.monotonic() - job["t0"], 1)
    run["rc"] = rc
    stdout, stderr = [(f.seek(0), f.read(), f.close())[1] for f in job["files"]]
    say(f"--- output of {run['workload']} {run['label']} r{run['round']}:\n{stdout}{stderr}", quiet=True)
    results = [line[len("RESULT "):] for line in stdout.splitlines() if line.startswith("RESULT ")]
    run["result"] = json.loads(results[-1]) if results and rc == 0 else None
    r = run["result"]
    head = f"[{elapsed():5.0f}s] {run['workload']:<15} {run['label']:<24} r{run['round']}"
    if r is None:
        run["error"] = (stderr.strip().splitlines() or [f"exit {rc}"])[-1][:300]
        say(f"{head} FAILED ({rc}) after {run['proc_s']} s: {run['error']}")
        return
    checks = r.get("checks") or []
    agree = f", agreement {sum(c['ok'] for c in checks)}/{len(checks)}" if checks else ""
    say(f"{head} {r['secs']:7.2f} s (process {run['proc_s']:.0f} s), loss {r['final_loss']:.6f}, "
        f"peak reserved {r['stats']['reserved_bytes.all.peak'] / 2**30:.3f} GiB{agree}")


def execute(group, side_by_side):
    """Runs a group: one after another (timed rounds), or all at once (untimed recorded runs)."""
    if side_by_side:
        jobs = [launch(r) for r in group]
        for job in jobs:
            finish(job)
    else:
        for r in group:
            finish(launch(r))
    for r in group:
        if r["kind"] != "trace" and r["kind"] != "pytorch":
            slowest[r["workload"]] = max(slowest.get(r["workload"], 0), r["proc_s"])


ESSENTIAL = ("round 1", "traces")
SIDE_BY_SIDE = ("traces", "policy:pytorch")  # untimed: the three workloads at once
phases = [("round 1", [[make(w, "native", 1), make(w, "cachalot", 1)] for w in WORKLOADS]),
          ("traces", [[make(w, "trace", 1) for w in WORKLOADS]])]
for rnd in range(2, REPS + 1):
    order = ("cachalot", "native") if rnd % 2 == 0 else ("native", "cachalot")
    phases.append((f"round {rnd}", [[make(w, k, rnd) for k in order] for w in WORKLOADS]))
    if rnd == min(REPS, 3):
        phases.append(("policy:pytorch", [[make(w, "pytorch", 1) for w in WORKLOADS]]))
if REPS < 2:
    phases.append(("policy:pytorch", [[make(w, "pytorch", 1) for w in WORKLOADS]]))

say(f"=== cachalot PyTorch check: budget {BUDGET:.0f} s, {REPS} rounds, workloads {', '.join(WORKLOADS)} ===")
runs, skipped = [], []
for name, groups in phases:
    say(f"--- {name} ({elapsed():.0f}s in)")
    for group in groups:
        side_by_side = name in SIDE_BY_SIDE
        limit = HARD if name in ESSENTIAL else BUDGET
        while group and elapsed() + estimate(group, side_by_side) > limit:
            # A pair goes whole; side by side, the slowest workload is left out first.
            drop = group if not side_by_side else [max(group, key=lambda r: estimate([r], False))]
            need = estimate(drop, side_by_side)
            what = f"{name}: {' + '.join(r['workload'] + ' ' + r['label'] for r in drop)}"
            skipped.append(f"{what}: needs ~{need:.0f} s, {max(0, limit - elapsed()):.0f} s left")
            say(f"skipped {skipped[-1]}")
            group = [r for r in group if r not in drop]
        if group:
            execute(group, side_by_side)
            runs += group

say(f"\n=== done in {elapsed():.0f} s; summary follows ===\n")
verdict = pytorch_report.report(runs, skipped, OUT, say)
LOG.close()
shutil.rmtree(WORK, ignore_errors=True)
sys.exit(0 if verdict == "PASS" else 1)
