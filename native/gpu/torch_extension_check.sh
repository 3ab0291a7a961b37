#!/usr/bin/env bash
# cachalot through its PyTorch extension (install()'s default), on the H200, from the repo root:
#
#   OUT=dir bash native/gpu/torch_extension_check.sh
#
# Build here first: `make torch-extensions` and `cargo build --release -p cachalot-cli`, and carry
# target/release/libcachalot.so, target/release/cachalot and target/torch-ext (the extension
# built for each PyTorch minor; and target/vizcheck, see 2). It runs
#   1. native/gpu/torch_allocator_check.py: what a PyTorch program does with its allocator (out of
#      memory, torch.cuda.memory_*, cudnn.benchmark, CUDA graphs, MemPool, private pools held by
#      cachalot's core, torch.compile's CUDA graph trees, memory history and memory_viz,
#      Lightning, timm), one JSON line per check;
#   2. native/gpu/memory_viz_check.sh on every target/vizcheck/*.pickle (snapshots written by
#      `cachalot replay --snapshot`), when there are any;
#   3. native/gpu/eight_workloads.sh for WORKLOADS (default llm_decode, whose CUDA graphs share
#      one private pool), PyTorch's allocators and cachalot alternating, inside BUDGET_S
#      (default 240).
# Logs: $OUT/allocator_check.log, $OUT/memory_viz.log, $OUT/summary.md, $OUT/results.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
CACHALOT_LIB=target/release/libcachalot.so timeout 420 python3 -X faulthandler native/gpu/torch_allocator_check.py \
    > "$OUT/allocator_check.log" 2>&1
first=$?
grep '^{' "$OUT/allocator_check.log" | cut -c1-600
grep -E ': (error|fatal error):' "$OUT/allocator_check.log" | sort -u | head -n 20
viz=0
if compgen -G "target/vizcheck/*.pickle" > /dev/null; then
    OUT=/tmp/memory_viz bash native/gpu/memory_viz_check.sh target/vizcheck/*.pickle > "$OUT/memory_viz.log" 2>&1
    viz=$?
    cat "$OUT/memory_viz.log"
fi
WORKLOADS=${WORKLOADS:-llm_decode} BUDGET_S=${BUDGET_S:-240} OUT="$OUT" bash native/gpu/eight_workloads.sh \
    > "$OUT/workloads.out" 2>&1
second=$?
tail -n 30 "$OUT/workloads.out"
echo "allocator check exit $first, memory_viz exit $viz, workload check exit $second"
[ "$first" = 0 ] && [ "$viz" = 0 ] && [ "$second" = 0 ]
