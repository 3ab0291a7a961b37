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
PYTHON=${PYTHON:-python3}
if [ "${CACHALOT_FROM_WHEEL:-}" = 1 ]; then  # the installed wheel (native/gpu/wheel_check.sh)
    LIB_ARG= MODULES=
else
    [ -f target/release/libcachalot.so ] || { echo "missing: target/release/libcachalot.so (carry it)"; exit 2; }
    LIB_ARG='"target/release/libcachalot.so"' MODULES=native/python
fi
echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
# Importing what the workloads import warms the file cache the same way for every allocator.
PYTHONPATH=$MODULES "$PYTHON" -c '
import time; t = time.time()
import cachalot_torch; cachalot_torch.install('"$LIB_ARG"')
import torch, torchvision, transformers; torch.zeros(1, device="cuda")
print(f"extension ready in {time.time() - t:.1f} s; torch {torch.__version__}, transformers {transformers.__version__}")'
"$PYTHON" native/gpu/eight_workloads.py "$OUT"
