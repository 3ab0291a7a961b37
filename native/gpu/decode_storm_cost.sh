#!/usr/bin/env bash
# What the paged policy's mapping calls on decoding traces cost on a real GPU: each decoding
# trace replayed through the C ABI with real CUDA memory (replay_timing.cpp: a cold pass on a
# fresh allocator, then warm passes), under cachalot's policy, PyTorch's expandable segments and
# PyTorch's default config, and over a simulated device (the host's cost alone), from the repo
# root:
#
#   OUT=dir [PASSES=N] [LIB=path/libcachalot.so] [CONFIGS="policy:cachalot ..."] bash native/gpu/decode_storm_cost.sh
#
# LIB replays with another build of the library (an older one, to compare two versions of the
# policy in one call); CONFIGS limits the configs (all three unless given). CAPS ("trace=bytes
# ...", a trace's file name without .ops.gz) caps that trace's replays at so many bytes, as a
# device of that size would (`cachalot fit` finds the smallest each config needs): every config
# gets per_process_memory_fraction of the real device's total (torch.cuda.mem_get_info), or of
# the simulated one's 1 TiB. DEVICES ("real simulated" unless given) picks the devices replayed.
# PASSES warm passes follow each cold pass (3 unless given; 0 for the cold pass alone, as at a
# config's smallest device, which `fit` finds for one run of the trace: a second run on what the
# first left cached may need a page or a few more). A learned layout is followed from the fourth
# pass in all, the third warm one, so more show what following one costs; each replay may take
# 40 s a pass.
# Build here first: `make gpu-build`, then the decoding traces as operations (trace_ops), gzipped,
# under target/decode-ops/ (docs/benchmarks.md, *The smallest device a run fits on*, names them):
#   python3 native/cli/tests/decode_trace.py --batch 8 --prompt 512 --new 512 --layers 24 \
#       --hidden 2048 --out /tmp/b8_p512_n512_l24_h2048.csv.gz
#   target/release/examples/trace_ops /tmp/b8_p512_n512_l24_h2048.csv.gz | gzip > target/decode-ops/b8_p512_n512_l24_h2048.ops.gz
# and carry target/release/libcachalot.so and target/decode-ops. The cold pass's time less the
# simulated cold pass's is what the driver's calls cost; its RESULT line counts them.
# Results: $OUT/decode_storm_cost.log (every RESULT line) and a table.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# A cap that names no trace here, or is not a whole number of bytes, would leave replays
# uncapped without a word: refused before anything runs.
real_total=
if [ -n "${CAPS:-}" ]; then
    for pair in $CAPS; do
        if ! [ -f "target/decode-ops/${pair%%=*}.ops.gz" ] || ! [[ "${pair#*=}" =~ ^[1-9][0-9]*$ ]]; then
            echo "CAPS: '$pair' is not TRACE=BYTES for a trace of target/decode-ops" >&2
            exit 2
        fi
    done
    real_total=$(python3 -c 'import torch; print(torch.cuda.mem_get_info()[1])' 2>/dev/null)
    if [ -z "$real_total" ]; then
        echo "CAPS needs the device's total memory, from torch.cuda.mem_get_info" >&2
        exit 2
    fi
fi
source native/gpu/soname_link.sh
mkdir -p "$WORK/lib"
cp "${LIB:-target/release/libcachalot.so}" "$WORK/lib/libcachalot.so" || exit 2
soname_link "$WORK/lib/libcachalot.so" || exit 2
nvcc -O2 -std=c++17 native/gpu/replay_timing.cpp -o "$WORK/replay_timing" -I include -L "$WORK/lib" \
    -lcachalot -lcuda -Xlinker -rpath="$WORK/lib" || exit 2
# The fraction of $2 bytes that caps a replay of trace $1 at its CAPS bytes (rounded up half a
# byte, as the allocator truncates fraction x total), or nothing without a cap.
cap_fraction() {
    local pair
    for pair in ${CAPS:-}; do
        [ "${pair%%=*}" = "$1" ] && python3 -c "import sys; print(f'{(int(sys.argv[1]) + 0.5) / int(sys.argv[2]):.17g}')" "${pair#*=}" "$2"
    done
}
log="$OUT/decode_storm_cost.log"
: > "$log"
for gz in target/decode-ops/*.ops.gz; do
    name=$(basename "$gz" .ops.gz)
    gunzip -c "$gz" > "$WORK/$name.ops"
    for config in ${CONFIGS:-policy:cachalot policy:pytorch,expandable_segments:True policy:pytorch}; do
        for device in ${DEVICES:-real simulated}; do
            flag=()
            total=$real_total
            [ "$device" = simulated ] && flag=(--simulated) && total=$((1 << 40))
            capped=$config
            fraction=$(cap_fraction "$name" "$total")
            [ -n "$fraction" ] && capped="$config,per_process_memory_fraction:$fraction"
            echo "== $name $config $device" | tee -a "$log"
            timeout $((40 * (${PASSES:-3} + 1))) "$WORK/replay_timing" "$WORK/$name.ops" --config "$capped" --passes "${PASSES:-3}" --label "$name" "${flag[@]}" \
                >> "$log" 2>&1 || echo "FAILED $name $config $device (exit $?)" | tee -a "$log"
        done
    done
done
python3 - "$log" <<'PY'
import json, sys
rows, head = [], None
for line in open(sys.argv[1]):
    if line.startswith("== "):
        head = line[3:].split()
    elif line.startswith("RESULT ") and head:
        rows.append((head, json.loads(line[len("RESULT "):])))
print("| trace | config | device | cold pass ms | cold ns/op | warm ns/op | peak reserved | device allocs / frees |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for (name, config, device), r in rows:
    cold_ms = r["ns_per_op_cold"] * r["ops"] / 1e6
    print(f"| {name} | {config} | {device} | {cold_ms:.1f} | {r['ns_per_op_cold']} | {r['ns_per_op_warm_median']} | "
          f"{r['peak_reserved']:,} | {r['num_device_alloc']:,} / {r['num_device_free']:,} |")
PY
