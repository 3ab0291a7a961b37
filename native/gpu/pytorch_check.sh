#!/usr/bin/env bash
# cachalot as PyTorch's allocator, on a CUDA machine (the H200), from the repo root:
#
#   bash native/gpu/pytorch_check.sh
#
# It builds nothing: build here with `cargo build --release -p cachalot -p cachalot-cli`, then carry
#   target/release/libcachalot.so  target/release/cachalot
# It runs the three workloads of native/gpu/workloads.py (a copy of ../shared/gpu/workloads.py)
# with PyTorch's own allocator and with cachalot plugged in through native/python/cachalot_torch.py,
# alternating, several rounds inside a time budget (see pytorch_check.py for the plan), records
# each workload's allocation history under cachalot and checks cachalot_torch's stats, summary
# and snapshot against `cachalot replay` of that history. The summary table is printed last.
# Results go to $OUT (default ./gpu-out): pytorch_check.log (everything, each run's output
# included), summary.md (the tables for docs/pytorch.md), results.json (every run and check).
# Exit 0 when every requirement passed.
#
# Environment: WORKLOADS (names, default all three), EXTRA_CONFIG (added to every cachalot config),
# BUDGET_S (default 470: no run starts unless it should end by then; none runs
# past BUDGET_S + 30), REPS (rounds, default 3), HISTORY (record_history entries, default 2000000).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
RESULTS=${OUT:-gpu-out}
mkdir -p "$RESULTS"

missing=0
for f in target/release/libcachalot.so target/release/cachalot; do
    [ -f "$f" ] || { echo "missing: $f (build with 'cargo build --release -p cachalot -p cachalot-cli' and carry it)"; missing=1; }
done
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
    { echo "missing: python3 with a CUDA-enabled torch and a GPU"; missing=1; }
[ "$missing" = 0 ] || exit 2

# Importing what the workloads import warms the file cache, so that the first timed run (whose span
# includes importing transformers or torchvision) does not pay for a cold disk.
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1 || true)
VERSIONS=$(python3 -c 'import torch, torchvision, transformers as t; print("torch", torch.__version__, "torchvision", torchvision.__version__, "transformers", t.__version__)' 2>&1 | tail -n 1)
echo "GPU: ${GPU:-?}; $VERSIONS; $(target/release/cachalot --version)"
exec python3 native/gpu/pytorch_check.py "$RESULTS"
