"""Dry runs of the two-GPU check without torch and without a GPU (`make gpu-dry-run`).

What they cover: ddp_check.sh refuses in one line, exit 2, with fewer than 2 GPUs (a stand-in
`torch` that sees 1) and without torch; ddp_gpt2.py's argument handling and its refusal outside
torchrun; ddp_check.py's whole plan against a stand-in torchrun that writes plausible rank
results (warm-up first, alternating rounds, the launch command and environment, the report
with its PASS lines); the report's FAIL lines for a loss beyond bf16 noise, a rank's peak above
PyTorch's, a wall time above 1.02x and a failed launch; `--report` redoing a report from a
results.json; and the budget skipping a round it cannot fit.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
PY = sys.executable

import ddp_report  # noqa: E402

# A stand-in for torchrun: checks the launch, then writes what ddp_gpt2.py would, for every rank.
FAKE_TORCHRUN = textwrap.dedent("""
    import json, os, sys
    args = sys.argv[1:]
    assert args[:3] == ["--standalone", "--nproc_per_node", args[2]], args
    nproc, script, allocator = int(args[2]), args[3], args[4]
    assert script.endswith("native/gpu/ddp_gpt2.py") and allocator in ("native", "cachalot"), args
    out = args[args.index("--out") + 1]
    steps = int(args[args.index("--steps") + 1])
    assert args[args.index("--lib") + 1].endswith("target/release/libcachalot.so")
    with open(os.environ["FAKE_LOG"], "a") as fh:
        fh.write(json.dumps(dict(allocator=allocator, steps=steps, nvls=os.environ.get("NCCL_NVLS_ENABLE"),
                                 multicast=os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST"),
                                 conf=os.environ.get("CACHALOT_ALLOC_CONF"))) + "\\n")
    if os.environ.get("FAKE_FAIL") == allocator:
        print("RuntimeError: NCCL error: unhandled system error", file=sys.stderr)
        sys.exit(1)
    os.makedirs(out, exist_ok=True)
    slow = float(os.environ.get("FAKE_SLOW", "1.0")) if allocator == "cachalot" else 1.0
    for r in range(nproc):
        peak = (9 << 30) + r * (1 << 20) - (64 << 20 if allocator == "cachalot" else 0)
        res = dict(rank=r, local_rank=r, world=nproc, allocator=allocator, steps=steps, final_loss=6.5 + r / 100,
                   mean_loss=6.505, secs=10.0 * slow, wall_secs=10.0 * slow + 0.01,
                   stats={"reserved_bytes.all.peak": peak, "allocated_bytes.all.peak": 7 << 30},
                   capacity=150 << 30, gpu="NVIDIA H200 (fake)", torch="fake", nccl="2.27.0",
                   env={"NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")})
        with open(os.path.join(out, f"rank{r}.json"), "w") as fh:
            json.dump(res, fh)
""")


def fake_run(kind, rnd, loss=6.5, secs=10.0, peaks=(9 << 30, 9 << 30), mean=6.505):
    ranks = [dict(rank=r, final_loss=loss + r / 100, mean_loss=mean, wall_secs=secs,
                  stats={"reserved_bytes.all.peak": p, "allocated_bytes.all.peak": 7 << 30}, gpu="fake",
                  capacity=1 << 37)
             for r, p in enumerate(peaks)]
    return dict(kind=kind, round=rnd, rc=0, proc_s=30.0, ranks=ranks)


def states(reqs):
    return {name.split(" (")[0] if name.startswith("final loss") else name: state for name, state, _ in reqs}


class Refusal(unittest.TestCase):
    def run_sh(self, torch_source):
        with tempfile.TemporaryDirectory() as tmp:
            if torch_source is not None:
                os.makedirs(os.path.join(tmp, "torch"))
                with open(os.path.join(tmp, "torch", "__init__.py"), "w") as fh:
                    fh.write(torch_source)
            env = dict(os.environ, PYTHONPATH=tmp, OUT=os.path.join(tmp, "out"))
            if torch_source is None:
                env["PYTHONPATH"] = os.path.join(tmp, "nothing")
                env["PYTHONNOUSERSITE"] = "1"
            return subprocess.run(["bash", os.path.join(HERE, "ddp_check.sh")], env=env, capture_output=True,
                                  text=True, timeout=60)

    def test_one_gpu_is_refused_in_one_line(self):
        p = self.run_sh("class cuda:\n    is_available = staticmethod(lambda: True)\n"
                        "    device_count = staticmethod(lambda: 1)\n")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertEqual(p.stderr, "")
        self.assertEqual(len(p.stdout.splitlines()), 1, p.stdout)
        self.assertIn("refused: 2 CUDA GPUs needed, 1 visible", p.stdout)

    def test_no_torch_is_refused_in_one_line(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is installed here")
        except ImportError:
            pass
        p = self.run_sh(None)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), 1, p.stdout)
        self.assertIn("refused: python3 cannot import torch", p.stdout)

    def test_runner_arguments(self):
        runner = os.path.join(HERE, "ddp_gpt2.py")
        p = subprocess.run([PY, runner, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0)
        self.assertIn("native,cachalot", p.stdout)
        p = subprocess.run([PY, runner, "jemalloc", "--out", "x"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("invalid choice", p.stderr)
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
        p = subprocess.run([PY, runner, "cachalot", "--out", "x"], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 2)
        self.assertIn("start it with torchrun", p.stderr)


class Plan(unittest.TestCase):
    def check(self, **env):
        tmp = self.enterContext(tempfile.TemporaryDirectory())
        with open(os.path.join(tmp, "torchrun.py"), "w") as fh:
            fh.write(FAKE_TORCHRUN)
        log = os.path.join(tmp, "launches.jsonl")
        full = dict(os.environ, TORCHRUN=f"{PY} {os.path.join(tmp, 'torchrun.py')}", FAKE_LOG=log,
                    CACHALOT_ALLOC_CONF="policy:pytorch", **env)
        full.pop("NCCL_NVLS_ENABLE", None)
        out = os.path.join(tmp, "out")
        p = subprocess.run([PY, os.path.join(HERE, "ddp_check.py"), out], env=full, capture_output=True, text=True,
                           timeout=120)
        with open(log) as fh:
            launches = [json.loads(line) for line in fh]
        return p, launches, out

    def test_the_plan_alternates_and_reports(self):
        p, launches, out = self.check()
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual([(x["allocator"], x["steps"]) for x in launches],
                         [("native", 2)] + [(a, 24) for a in
                                            ["native", "cachalot", "cachalot", "native", "native", "cachalot"]])
        self.assertTrue(all(x["nvls"] == "0" and x["multicast"] == "1" and x["conf"] is None for x in launches))
        for line in ["| PyTorch native (default) | 3 | 6.500000 | 6.505000 | 10.01 (10.01–10.01) | – |",
                     "| cachalot (default: policy:cachalot) | 3 | 6.500000 | 6.505000 | 10.01 (10.01–10.01) "
                     "| 1.000x |",
                     "PASS: final loss = PyTorch's (rank 0) — equal (6.500000)",
                     "PASS: peak reserved per rank <= PyTorch's — rank 0: 8.938 GiB vs 9.000 GiB",
                     "PASS: wall time <= 1.02x PyTorch's — median 10.01 s vs 10.01 s = 1.000x over 3 + 3",
                     "PASS: at least 3 timed runs of each allocator", "VERDICT: PASS"]:
            self.assertIn(line, p.stdout)
        with open(os.path.join(out, "summary.md")) as fh:
            self.assertIn("VERDICT: PASS", fh.read())
        again = subprocess.run([PY, os.path.join(HERE, "ddp_check.py"), "--report", os.path.join(out, "results.json"),
                                os.path.join(out, "again")], capture_output=True, text=True, timeout=60)
        self.assertEqual(again.returncode, 0, again.stderr)
        with open(os.path.join(out, "summary.md")) as a, open(os.path.join(out, "again", "summary.md")) as b:
            self.assertEqual(a.read(), b.read())

    def test_slow_cachalot_and_failed_launches_fail(self):
        p, _, _ = self.check(FAKE_SLOW="1.05", REPS="1", WARMUP="0")
        self.assertEqual(p.returncode, 1)
        self.assertIn("FAIL: wall time <= 1.02x PyTorch's — median 10.51 s vs 10.01 s = 1.050x", p.stdout)
        self.assertIn("FAIL: at least 3 timed runs of each allocator — 1 native, 1 cachalot", p.stdout)
        p, _, _ = self.check(FAKE_FAIL="cachalot", REPS="1", WARMUP="0")
        self.assertEqual(p.returncode, 1)
        self.assertIn("FAIL: cachalot runs to the end on all 2 ranks — 0 of 1 runs; r1: exit 1, 0 of 2 ranks "
                      "reported: RuntimeError: NCCL error", p.stdout)
        self.assertIn("SKIPPED: wall time", p.stdout)
        self.assertIn("VERDICT: FAIL", p.stdout)

    def test_budget_skips_what_cannot_fit(self):
        p, launches, _ = self.check(BUDGET_S="0", WARMUP="0")
        self.assertEqual(len(launches), 2, "round 1 always runs (stopped at BUDGET_S + 30); rounds 2 and 3 do not fit")
        self.assertIn("skipped round 2 (cachalot then native): needs ~", p.stdout)
        self.assertIn("VERDICT: FAIL", p.stdout)


class Report(unittest.TestCase):
    def test_each_requirement_fails_by_itself(self):
        native = [fake_run("native", r) for r in (1, 2, 3)]
        good = [fake_run("cachalot", r, loss=6.52, peaks=(8 << 30, 9 << 30)) for r in (1, 2, 3)]
        reqs = states(ddp_report.requirements(native + good, 2))
        self.assertEqual(set(reqs.values()), {True}, reqs)
        cases = {"final loss = PyTorch's": [fake_run("cachalot", r, loss=6.8, mean=6.8) for r in (1, 2, 3)],
                 "peak reserved per rank <= PyTorch's":
                     good[:2] + [fake_run("cachalot", 3, peaks=(8 << 30, (9 << 30) + 512))],
                 "wall time <= 1.02x PyTorch's": [fake_run("cachalot", r, secs=10.3) for r in (1, 2, 3)]}
        for failing, ours in cases.items():
            with self.subTest(failing=failing):
                reqs = states(ddp_report.requirements(native + ours, 2))
                self.assertEqual({k for k, v in reqs.items() if v is not True}, {failing}, reqs)

    def test_summary_names_each_rank(self):
        runs = [fake_run("native", 1), fake_run("cachalot", 1, peaks=(8 << 30, 10 << 30))]
        with tempfile.TemporaryDirectory() as tmp:
            said = []
            verdict = ddp_report.report(runs, ["round 2: no time"], tmp, said.append)
        self.assertEqual(verdict, "FAIL")
        text = said[0]
        self.assertIn("| peak reserved, rank 0 | peak reserved, rank 1 |", text)
        self.assertIn("rank 1: 10.000 GiB vs 9.000 GiB (1.111x", text)
        self.assertIn("- round 2: no time", text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
