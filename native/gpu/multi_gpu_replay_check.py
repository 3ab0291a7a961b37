"""A snapshot of two GPUs, replayed one GPU at a time. With cachalot plugged into PyTorch
(`policy:pytorch`, history on), each GPU gets its own pattern of tensors, and one snapshot
records both. `cachalot replay` must refuse to guess which GPU to replay, naming both; with
`--device N` it must reproduce GPU N's own statistics and summary, and the simulated replay
its segments and history (cachalot_replay.compare: the checks pytorch_run.py makes on one GPU).

It writes the snapshot (two_gpus_snapshot.json) and each GPU's statistics
(two_gpus.deviceN.stats.json) into OUTDIR.

usage (from the repo root, on a machine with two or more GPUs; carry
target/release/libcachalot.so and target/release/cachalot):
    CACHALOT_LIB=target/release/libcachalot.so python3 native/gpu/multi_gpu_replay_check.py \
        target/release/cachalot OUTDIR
Prints one line per check and a VERDICT line; exit 0 when every check passed.
"""
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

import cachalot_replay  # noqa: E402
import cachalot_torch as ct  # noqa: E402

CONFIG = "policy:pytorch,record_history:200000"
cli_path, out_dir = sys.argv[1], sys.argv[2]
ct.install(config=CONFIG)
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + str(detail) if detail else ''}", flush=True)


if torch.cuda.device_count() < 2:
    print("SKIPPED: fewer than two GPUs")
    sys.exit(0)

# Different sizes, lifetimes and counts on each GPU, so that mixing their histories would show.
live = {0: [], 1: []}
for d in (0, 1):
    rng = random.Random(100 + d)
    for i in range(400 + 300 * d):
        size = rng.choice([512, 4096, 1 << 20, 3 << 20, 25 << 20, 70 << 20]) + rng.randrange(0, 4096)
        live[d].append(torch.empty(size, dtype=torch.uint8, device=f"cuda:{d}"))
        if rng.random() < 0.45:
            live[d].pop(rng.randrange(len(live[d])))
    torch.cuda.synchronize(d)

snap = ct.snapshot()
path = os.path.join(out_dir, "two_gpus_snapshot.json")
with open(path, "w") as fh:
    json.dump(snap, fh)
allocs = [sum(e["action"] == "alloc" for e in snap["device_traces"][d]) for d in (0, 1)]
check("the snapshot records allocations on both GPUs", all(allocs), allocs)

p = subprocess.run([cli_path, "replay", path, "--config", CONFIG], capture_output=True, text=True, timeout=600)
check("cachalot replay without --device refuses, naming both GPUs",
      p.returncode != 0 and "devices 0 and 1" in p.stderr and "--device N" in p.stderr, p.stderr.strip()[-200:])

lib = ct.load_library()
for d in (0, 1):
    total = torch.cuda.mem_get_info(d)[1]
    figures = dict(stats=ct.memory_stats(d), summary=ct.memory_summary(d), snapshot=snap)
    # What the live allocator reported, beside the snapshot: with both, a test replays the
    # run without a GPU (core/tests/recorded.rs).
    with open(os.path.join(out_dir, f"two_gpus.device{d}.stats.json"), "w") as fh:
        json.dump(dict(capacity=total, config=CONFIG, gpu=torch.cuda.get_device_name(d), torch=torch.__version__,
                       stats=figures["stats"]), fh, indent=0, sort_keys=True)
    ops, _ = cachalot_replay.trace_ops(snap, d)
    sim = cachalot_replay.replay_simulated(lib, ops, CONFIG, total, cachalot_replay.segment_placements(snap, d))
    cli = cachalot_replay.replay_cli(cli_path, path, CONFIG, total, device=d)
    for c in cachalot_replay.compare(figures, CONFIG, sim=sim, cli=cli, device=d):
        check(f"cuda:{d}: {c['check']}", c["ok"], c["detail"] or f"{c['ours']} vs {c['theirs']}")

passed = sum(results)
print(f"VERDICT: {'PASS' if all(results) else 'FAIL'} ({passed}/{len(results)})")
sys.exit(0 if all(results) else 1)
