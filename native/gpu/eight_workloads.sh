#!/usr/bin/env bash
# The eight-workload comparison on the H200, from the repo root:
#
#   OUT=dir bash native/gpu/eight_workloads.sh
#
# Build here first: `cargo build --release -p cachalot -p cachalot-cli` and carry
# target/release/libcachalot.so. Each workload of workloads.py and more_workloads.py runs under
# PyTorch's default allocator, its expandable segments and cachalot (through the extension),
# alternating, REPS rounds (default 3) inside BUDGET_S (default 540); see eight_workloads.py.
# WORKLOADS picks some (a 10-minute call holds about four). Results: $OUT/summary.md,
# $OUT/results.json, $OUT/eight_workloads.log. Exit 0 when every requirement passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
[ -f target/release/libcachalot.so ] || { echo "missing: target/release/libcachalot.so (carry it)"; exit 2; }
echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
# The extension is built once here, so no timed run pays for the build; importing what the
# workloads import warms the file cache the same way for every allocator.
PYTHONPATH=native/python python3 -c '
import time; t = time.time()
import cachalot_torch; cachalot_torch.install("target/release/libcachalot.so")
import torch, torchvision, transformers; torch.zeros(1, device="cuda")
print(f"extension ready in {time.time() - t:.1f} s; torch {torch.__version__}, transformers {transformers.__version__}")'
python3 native/gpu/eight_workloads.py "$OUT"
