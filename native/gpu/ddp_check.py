"""The two-GPU check's plan: torchrun launches of ddp_gpt2.py (data-parallel gpt2_train on NPROC
GPUs), PyTorch's allocator and cachalot alternating, inside a time budget; then the report
(ddp_report.py), printed last.

usage: python3 native/gpu/ddp_check.py OUTDIR                        (ddp_check.sh calls it)
       python3 native/gpu/ddp_check.py --report RESULTS.json OUTDIR  (the report again, from the
                                                                      results.json of a run)

Order: an untimed warm-up launch (native, 2 steps: disk cache, driver, NCCL and cuBLAS set-up
paid once, not by the first timed run), then rounds 1..REPS of one native and one cachalot
launch each, the order alternating (native first in odd rounds), one launch at a time. Round 1
always runs; a later round runs whole or not at all, and only when its two launches, at the
slowest launch seen so far, still end inside BUDGET_S; what is skipped is said. No launch runs
past BUDGET_S + 30 s: it is stopped (its process group killed) and reported as failed.

Every launch: TORCHRUN --standalone --nproc_per_node NPROC native/gpu/ddp_gpt2.py ALLOCATOR
--out DIR --lib target/release/libcachalot.so --steps STEPS, with NCCL_NVLS_ENABLE=0 unless the
machine sets it, and TORCH_SYMM_MEM_DISABLE_MULTICAST=1. A launch counts when it exits 0 and
every rank wrote its result.

Environment: BUDGET_S (default 450), REPS (default 3), NPROC (default 2), STEPS (default 24),
WARMUP (default 1; 0 skips it), TORCHRUN (default "python3 -m torch.distributed.run", i.e.
torchrun; split on spaces).
"""
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import ddp_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LIB = os.path.join(ROOT, "target", "release", "libcachalot.so")
RUNNER = os.path.join(HERE, "ddp_gpt2.py")
FIRST_GUESS = 60.0  # seconds per launch before one has been timed


def settings():
    env = os.environ
    return dict(budget=float(env.get("BUDGET_S", 450)), reps=int(env.get("REPS", 3)), nproc=int(env.get("NPROC", 2)),
                steps=int(env.get("STEPS", 24)), warmup=env.get("WARMUP", "1") != "0",
                torchrun=shlex.split(env.get("TORCHRUN", f"{sys.executable} -m torch.distributed.run")))


def command(cfg, allocator, out, steps):
    """The launch command line of one run."""
    return cfg["torchrun"] + ["--standalone", "--nproc_per_node", str(cfg["nproc"]), RUNNER, allocator,
                              "--out", out, "--lib", LIB, "--steps", str(steps)]


def launch_env():
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # as the machine sets it, if it does
    env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    for k in ("CACHALOT_LIB", "CACHALOT_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        env.pop(k, None)
    return env


class Check:
    def __init__(self, out, cfg):
        self.out, self.cfg = out, cfg
        self.hard = cfg["budget"] + 30
        self.start = time.monotonic()
        self.slowest = 0.0
        self.work = tempfile.mkdtemp(prefix="cachalot-ddp-")
        self.log = open(os.path.join(out, "ddp_check.log"), "a")

    def elapsed(self):
        return time.monotonic() - self.start

    def say(self, msg, quiet=False):
        self.log.write(msg + "\n")
        self.log.flush()
        if not quiet:
            print(msg, flush=True)

    def run(self, kind, rnd):
        """One launch, waited for; its record: kind, round, rc, seconds, the ranks' results."""
        allocator = "native" if kind == "warmup" else kind
        steps = 2 if kind == "warmup" else self.cfg["steps"]
        out = os.path.join(self.work, f"{kind}.r{rnd}")
        cmd = command(self.cfg, allocator, out, steps)
        self.say(f"$ {shlex.join(cmd)}", quiet=True)
        t0 = time.monotonic()
        with open(out + ".log", "w+") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=launch_env(),
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=max(10.0, self.hard - self.elapsed()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = "timeout"
            fh.seek(0)
            output = fh.read()
        secs = round(time.monotonic() - t0, 1)
        self.say(f"--- output of {kind} r{rnd}:\n{output}", quiet=True)
        ranks = []
        for path in sorted(glob.glob(os.path.join(out, "rank*.json"))):
            with open(path) as f:
                ranks.append(json.load(f))
        ok = rc == 0 and len(ranks) == self.cfg["nproc"]
        run = dict(kind=kind, round=rnd, rc=rc, proc_s=secs, ranks=ranks if ok else None)
        head = f"[{self.elapsed():5.0f}s] {kind:<8} r{rnd}"
        if not ok:
            lines = [x for x in output.strip().splitlines() if x.strip()]
            run["error"] = f"exit {rc}, {len(ranks)} of {self.cfg['nproc']} ranks reported" + (
                f": {lines[-1][:300]}" if lines else "")
            self.say(f"{head} FAILED after {secs} s: {run['error']}")
        else:
            r0 = ddp_report.rank(run, 0)
            peaks = ", ".join(f"{ddp_report.gib(ddp_report.peak(run, r))}" for r in ddp_report.ranks_of([run]))
            self.say(f"{head} {ddp_report.wall(run):7.2f} s (launch {secs:.0f} s), loss rank 0 {r0['final_loss']:.6f}, "
                     f"mean {r0['mean_loss']:.6f}, peak reserved per rank {peaks}")
        if kind != "warmup":
            self.slowest = max(self.slowest, secs)
        return run

    def plan(self):
        runs, skipped = [], []
        cfg = self.cfg
        self.say(f"=== cachalot two-GPU check: {cfg['nproc']} ranks, {cfg['steps']} steps, {cfg['reps']} rounds, "
                 f"budget {cfg['budget']:.0f} s ===")
        if cfg["warmup"]:
            warm = self.run("warmup", 0)
            if not warm.get("ranks"):
                self.say("the warm-up launch failed: see ddp_check.log; going on with the timed rounds")
        for rnd in range(1, cfg["reps"] + 1):
            order = ("native", "cachalot") if rnd % 2 else ("cachalot", "native")
            need = 2 * (self.slowest or FIRST_GUESS)
            if rnd > 1 and self.elapsed() + need > cfg["budget"]:
                skipped.append(f"round {rnd} ({' then '.join(order)}): needs ~{need:.0f} s, "
                               f"{max(0, cfg['budget'] - self.elapsed()):.0f} s left")
                self.say(f"skipped {skipped[-1]}")
                continue
            runs += [self.run(kind, rnd) for kind in order]
        return runs, skipped

    def close(self):
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)


def main(argv):
    if len(argv) == 3 and argv[0] == "--report":
        with open(argv[1]) as fh:
            saved = json.load(fh)
        verdict = ddp_report.report(saved["runs"], saved.get("skipped", []), argv[2], print, saved.get("nproc", 2))
        return 0 if verdict == "PASS" else 1
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = argv[0]
    os.makedirs(out, exist_ok=True)
    check = Check(out, settings())
    try:
        runs, skipped = check.plan()
        check.say(f"\n=== done in {check.elapsed():.0f} s; summary follows ===\n")
        verdict = ddp_report.report(runs, skipped, out, check.say, check.cfg["nproc"])
    finally:
        check.close()
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
