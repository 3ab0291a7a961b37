#!/usr/bin/env bash
# What asking the driver for free memory costs the paged policy on a GPU, before and after the
# library kept the answer (native/src/cuda/free_memory_memo.rs), from the repo root:
#
#   OUT=dir LIB_BEFORE=path/libcachalot.so [ROUNDS=3] bash native/gpu/free_memory_check.sh
#
# 1. vmm_costs.cpp: cuMemGetInfo, cuEventRecord and cuEventQuery, median µs a call (with the
#    virtual-memory calls it always measured);
# 2. decode_storm_cost.sh under cachalot's policy, four warm passes, with LIB_BEFORE (a library
#    that asks the driver each time) and with target/release/libcachalot.so, alternating, ROUNDS
#    times: capped where PyTorch's default fits (C1, as decode_storm_cost.sh reads CAPS; below,
#    the decoding traces' figures of `cachalot fit`), and uncapped. Timings on a shared host
#    drift from one replay to the next, so the summary gives each figure's median over the rounds.
# Build here first: `make gpu-build`, the decoding traces' operations under target/decode-ops/
# (decode_storm_cost.sh's header says how), and carry target/release/libcachalot.so,
# target/decode-ops and LIB_BEFORE's folder.
# Results: $OUT/vmm_costs.log, $OUT/round<N>_<before|after>_<capped|uncapped>/decode_storm_cost.log
# (all of them in $OUT/free_memory_check.log) and the summary on stdout. Timings on a shared
# host drift, at times twofold between rounds: the least of the rounds is the figure least
# disturbed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [ ! -f "${LIB_BEFORE:-}" ]; then
    echo "LIB_BEFORE must name the library to compare with" >&2
    exit 2
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
status=0
nvcc -O2 -std=c++17 native/gpu/vmm_costs.cpp -o "$WORK/vmm_costs" -lcuda && "$WORK/vmm_costs" 512 | tee "$OUT/vmm_costs.log" || status=1
: "${C1:=b8_p512_n512_l24_h2048=5100273664 b16_p64_n768_l24_h1024=2306867200 b64_p256_n256_l16_h2048=6947864576}"
for round in $(seq "${ROUNDS:-3}"); do
    for caps in capped uncapped; do
        for lib in before after; do
            path=target/release/libcachalot.so
            [ "$lib" = before ] && path=$LIB_BEFORE
            c=
            [ "$caps" = capped ] && c=$C1
            OUT="$OUT/round${round}_${lib}_$caps" LIB="$path" PASSES=4 CONFIGS=policy:cachalot CAPS="$c" \
                bash native/gpu/decode_storm_cost.sh > /dev/null || status=1
        done
    done
done
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
runs = {}
for log in glob.glob(os.path.join(sys.argv[1], "round*_*_*", "decode_storm_cost.log")):
    _, lib, caps = os.path.basename(os.path.dirname(log)).split("_")
    head = None
    for line in open(log):
        if line.startswith("== "):
            head = line.split()
        elif line.startswith("RESULT ") and head and head[3] == "real":
            r = json.loads(line[len("RESULT "):])
            runs.setdefault((head[1], caps, lib), []).append(r)
print("| trace | cap | library | rounds | cold pass ms, least / median | warm ns/op, least / median (each round's median) |")
print("|---|---|---|---:|---:|---|")
for (name, caps, lib), rs in sorted(runs.items()):
    cold = [r["ns_per_op_cold"] * r["ops"] / 1e6 for r in rs]
    warm = [r["ns_per_op_warm_median"] for r in rs]
    print(f"| {name} | {caps} | {lib} | {len(rs)} | {min(cold):.1f} / {statistics.median(cold):.1f} | "
          f"{min(warm):.1f} / {statistics.median(warm):.1f} ({', '.join(map(str, warm))}) |")
PY
# Every round's log in one file (a tool that fetches few files gets them all).
for log in "$OUT"/round*/decode_storm_cost.log; do echo "## $log"; cat "$log"; done > "$OUT/free_memory_check.log"
exit $status
