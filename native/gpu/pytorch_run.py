"""One run of one workload of workloads.py, in this process, with PyTorch's own allocator or with
cachalot plugged in through native/python/cachalot_torch.py; prints what it measured.

usage: python3 pytorch_run.py WORKLOAD native|cachalot [--config CONF] [--lib PATH]
                              [--cli PATH] [--record FILE.json]

WORKLOAD is one of workloads.py's three or more_workloads.py's five. For native, CONF is
PyTorch's PYTORCH_CUDA_ALLOC_CONF (empty: PyTorch's default). The workload's file runs
unchanged, as `__main__` (runpy): its seeds, model code and timed span are its own, and `secs` and the final loss are read from its globals. For cachalot,
cachalot_torch.install() plugs cachalot in first (config CONF, i.e. CACHALOT_ALLOC_CONF) and
CACHALOT_LIB is cleared for workloads.py, which would otherwise swap in a second, hookless
CUDAPluggableAllocator over the same library. Peak figures come from torch.cuda.memory_stats()
(native) or cachalot_torch.memory_stats() (cachalot). With --record (cachalot, CONF holding
record_history:N) the snapshot, history included, is written to FILE.json and
cachalot_replay.compare checks the stats, summary and snapshot against a simulated replay of
that history and against `cachalot replay FILE.json --config CONF --capacity <this GPU's
memory> --json --summary`.

Output: workloads.py's own line, then one line `RESULT {json}`. Exit 0 when the workload ran.
"""
import argparse
import gc
import json
import os
import runpy
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FROM_WHEEL = os.environ.get("CACHALOT_FROM_WHEEL") == "1"  # the installed wheel's modules and library
if not FROM_WHEEL:
    sys.path.insert(0, os.path.join(ROOT, "native", "python"))
KEEP = ("reserved_bytes.all.peak", "allocated_bytes.all.peak", "requested_bytes.all.peak", "active_bytes.all.peak",
        "segment.all.peak", "num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms",
        "allocation.all.allocated")

ap = argparse.ArgumentParser()
FIRST_THREE = ["gpt2_train", "resnet50_train", "mixed_fc_conv"]  # workloads.py's
MORE = ["bert_large_ckpt", "vit_side_stream", "moe_train", "t5_train", "llm_decode"]  # more_workloads.py's
ap.add_argument("workload", choices=FIRST_THREE + MORE)
ap.add_argument("allocator", choices=["native", "cachalot"])
ap.add_argument("--config", default="")
ap.add_argument("--lib", default=None if FROM_WHEEL else os.path.join(ROOT, "target", "release", "libcachalot.so"))
ap.add_argument("--cli", default=os.path.join(ROOT, "target", "release", "cachalot"))
ap.add_argument("--record")
args = ap.parse_args()

os.environ.pop("CACHALOT_LIB", None)
os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # PyTorch's default config for the native runs
if args.allocator == "native" and args.config:
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.config
if args.allocator == "cachalot":
    import cachalot_torch
    cachalot_torch.install(args.lib, config=args.config)

import torch  # noqa: E402  (after install, as a user would)

with tempfile.TemporaryDirectory() as tmp:
    script = "workloads.py" if args.workload in FIRST_THREE else "more_workloads.py"
    sys.argv = [os.path.join(HERE, script), args.workload, tmp]
    ns = runpy.run_path(sys.argv[0], run_name="__main__")
torch.cuda.synchronize()
gc.collect()  # tensors in reference cycles go now, not between two of the reads below
gc.disable()

if args.allocator == "cachalot":
    stats = cachalot_torch.memory_stats()
else:
    stats = torch.cuda.memory_stats()
free, total = torch.cuda.mem_get_info()
result = dict(workload=args.workload, allocator=args.allocator, config=args.config, secs=ns["secs"],
              final_loss=ns["FINAL"].get("loss"), torch=torch.__version__, gpu=torch.cuda.get_device_name(),
              capacity=total, stats={k: stats.get(k) for k in KEEP}, all_stats=dict(stats))

if args.allocator == "cachalot" and args.record:
    import cachalot_replay
    figures = dict(stats=stats, summary=cachalot_torch.memory_summary(), snapshot=cachalot_torch.snapshot(0))
    with open(args.record, "w") as fh:
        json.dump(figures["snapshot"], fh)
    ops, report = cachalot_replay.trace_ops(figures["snapshot"])
    lib = cachalot_torch.load_library()
    sim = cachalot_replay.replay_simulated(lib, ops, args.config, total,
                                           cachalot_replay.segment_placements(figures["snapshot"]))
    try:
        cli = cachalot_replay.replay_cli(args.cli, args.record, args.config, total)
    except (RuntimeError, OSError, ValueError) as e:
        cli = None
        result["cli_error"] = str(e)
    result.update(trace=report, summary=figures["summary"], segments=len(figures["snapshot"]["segments"]),
                  checks=cachalot_replay.compare(figures, args.config, sim=sim, cli=cli),
                  cli=cli and dict(cmd=cli["cmd"], report={k: v for k, v in cli["json"].items() if k != "trace_report"}))
print("RESULT " + json.dumps(result), flush=True)
