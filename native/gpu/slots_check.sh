#!/usr/bin/env bash
# The DynamicCache-style serving loop (`KV_CACHE=each serving_loop.sh`; `KV_CACHE=pair` for the
# loop's default cache, K and V regrown as a pair) on a capped device, the wheel's library
# against an earlier one (LIB_BEFORE), and the address space a process has for the large
# pool's ranges (address_space_check.py), from the repo root:
#
#   OUT=dir LIB_BEFORE=path/libcachalot.so [CAPS="BYTES ..."] [GENERATIONS=4] [KV_CACHE=each|pair] bash native/gpu/slots_check.sh
#
# Build here first: `make wheel`, and carry dist and the folder holding LIB_BEFORE. For each
# cap in CAPS (default: 6,499,074,048 bytes, 1.025 times the loop's peak allocated bytes, where
# PyTorch's backends run out of memory; and 6,845,104,128, where PyTorch's default fits), the
# loop runs under PyTorch's default, cachalot and cachalot with LIB_BEFORE; a cap of 0 runs it
# on the whole device.
# Results: $OUT/address_space.log and $OUT/serving_<cap>.log, each ending in its table; the
# per-generation JSON files are dropped, their lines are in the logs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
: "${LIB_BEFORE:?LIB_BEFORE=path/libcachalot.so}"
export KV_CACHE=${KV_CACHE:-each} GENERATIONS=${GENERATIONS:-4} LIB_BEFORE
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/address_space.log"
python3 native/gpu/address_space_check.py 2>&1 | tee -a "$OUT/address_space.log" || status=1
for cap in ${CAPS:-6499074048 6845104128}; do
    dir=$(mktemp -d)
    OUT=$dir CAP_BYTES=$cap RUNS="pytorch cachalot" bash native/gpu/serving_loop.sh > "$dir/table.txt" 2>&1 || status=1
    cat "$dir/serving_loop.log" "$dir/table.txt" > "$OUT/serving_$cap.log"
    tail -n 8 "$dir/table.txt"
    rm -rf "$dir"
done
exit $status
