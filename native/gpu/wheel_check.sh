#!/usr/bin/env bash
# cachalot's wheel as a PyTorch user installs it, on the H200, from the repo root:
#
#   OUT=dir bash native/gpu/wheel_check.sh
#
# Build here first: `make wheel`, and carry dist (the wheel, about 2.5 MB). It
#   1. installs dist/cachalot-*.whl into a fresh virtual environment that sees the machine's
#      PyTorch (--system-site-packages), offline (--no-index);
#   2. runs everything below with a PATH that has no compiler, ninja, nvcc or cargo (a folder
#      of links to every other program), so nothing can be built at run time;
#   3. native/gpu/torch_allocator_check.py through the wheel's cachalot_torch (out of memory,
#      torch.cuda.memory_*, CUDA graphs, MemPool, graph trees, memory history, Lightning, timm);
#   4. native/gpu/eight_workloads.sh for WORKLOADS (default llm_decode) inside BUDGET_S.
# Logs: $OUT/wheel_allocator_check.log, $OUT/workloads.out and eight_workloads.sh's files.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source native/gpu/wheel_env.sh
make_wheel_env || exit 2
# PATH without builders: links to every program on the machine's PATH but these.
NOBUILD="$ENV_DIR/nobuild-bin"
mkdir -p "$NOBUILD"
IFS=: read -r -a dirs <<< "$PATH"
for d in "${dirs[@]}"; do
    for f in "$d"/*; do
        name=$(basename "$f")
        case "$name" in
            cc|c++|gcc*|g++*|*-gcc*|*-g++*|clang*|nvcc|ninja|cargo|rustc|cicc|ptxas) continue ;;
        esac
        [ -x "$f" ] && [ ! -e "$NOBUILD/$name" ] && ln -s "$f" "$NOBUILD/$name"
    done
done
export PATH="$ENV_DIR/bin:$NOBUILD" CACHALOT_FROM_WHEEL=1 PYTHONUNBUFFERED=1
for tool in cc c++ g++ nvcc ninja cargo; do
    if command -v "$tool" > /dev/null; then echo "FAIL: $tool is still on PATH"; exit 2; fi
done
torch_version=$(python -c 'import torch; print(torch.__version__)') || { echo "FAIL: no PyTorch to import"; exit 2; }
echo "torch $torch_version; no compiler on PATH"
timeout 420 python -X faulthandler native/gpu/torch_allocator_check.py > "$OUT/wheel_allocator_check.log" 2>&1
first=$?
grep '^{' "$OUT/wheel_allocator_check.log" | cut -c1-600
WORKLOADS=${WORKLOADS:-llm_decode} BUDGET_S=${BUDGET_S:-240} OUT="$OUT" PYTHON=python bash native/gpu/eight_workloads.sh \
    > "$OUT/workloads.out" 2>&1
second=$?
tail -n 30 "$OUT/workloads.out"
echo "wheel allocator check exit $first, workload check exit $second"
[ "$first" = 0 ] && [ "$second" = 0 ]
