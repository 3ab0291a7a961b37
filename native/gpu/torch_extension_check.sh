#!/usr/bin/env bash
# cachalot through its PyTorch extension (install()'s default), on the H200, from the repo root:
#
#   OUT=dir bash native/gpu/torch_extension_check.sh
#
# Build here first: `cargo build --release -p cachalot -p cachalot-cli`, and carry
# target/release/libcachalot.so and target/release/cachalot. It runs
#   1. native/gpu/torch_allocator_check.py: what a PyTorch program does with its allocator (out of
#      memory, torch.cuda.memory_*, cudnn.benchmark, CUDA graphs, MemPool, torch.compile's CUDA
#      graph trees, memory history and memory_viz, Lightning, timm), one JSON line per check;
#   2. native/gpu/pytorch_check.sh: the training workloads under PyTorch's allocator and under
#      cachalot installed through the extension, alternating (BUDGET_S, default 300).
# Logs: $OUT/allocator_check.log, $OUT/pytorch_check.log, $OUT/summary.md, $OUT/results.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
CACHALOT_LIB=target/release/libcachalot.so timeout 420 python3 -X faulthandler native/gpu/torch_allocator_check.py \
    > "$OUT/allocator_check.log" 2>&1
first=$?
grep '^{' "$OUT/allocator_check.log" | cut -c1-600
BUDGET_S=${BUDGET_S:-300} REPS=${REPS:-3} OUT="$OUT" bash native/gpu/pytorch_check.sh > "$OUT/pytorch_check.out" 2>&1
second=$?
tail -n 40 "$OUT/pytorch_check.out"
echo "allocator check exit $first, workload check exit $second"
[ "$first" = 0 ] && [ "$second" = 0 ]
