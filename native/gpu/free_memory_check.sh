#!/usr/bin/env bash
# What asking the driver for free memory costs the paged policy on a GPU, before and after the
# library kept the answer (native/src/cuda/free_memory_memo.rs), from the repo root:
#
#   OUT=dir LIB_BEFORE=path/libcachalot.so [ROUNDS=3] [C1="trace=bytes ..."] bash native/gpu/free_memory_check.sh
#
# 1. vmm_costs.cpp: cuMemGetInfo, cuEventRecord and cuEventQuery, median µs a call (with the
#    virtual-memory calls it always measured);
# 2. decode_storm_cost.sh under cachalot's policy on the GPU, four warm passes, with LIB_BEFORE
#    (a library that asks the driver each time) and with target/release/libcachalot.so (the one
#    tested), ROUNDS times, the two libraries' order swapped every other round: capped as C1
#    says (decode_storm_cost.sh's CAPS; by default where PyTorch's default fits each decoding
#    trace, `cachalot fit`'s figures, b32 uncapped), and uncapped. Timings on a shared host
#    drift, at times twofold from one replay to the next: the summary gives the least of the
#    rounds (the least disturbed) and their median.
# Needs nvcc and the CUDA driver, and torch for the device's total memory (the caps). Build here
# first: `make gpu-build`, the decoding traces' operations under target/decode-ops/
# (decode_storm_cost.sh's header says how), and LIB_BEFORE, e.g. from a worktree of the commit
# to compare with (`git worktree add /tmp/before COMMIT && make -C /tmp/before gpu-build`, then
# copy its target/release/libcachalot.so to target/lib_before/); carry
# target/release/libcachalot.so, target/decode-ops and LIB_BEFORE's folder.
# Results: $OUT/vmm_costs.log, $OUT/round<N>_<before|after>_<capped|uncapped>/decode_storm_cost.log
# (all of them in $OUT/free_memory_check.log) and the summary on stdout. Exits 1 if anything
# failed, a replay included.
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
    order="before after"
    [ $((round % 2)) = 0 ] && order="after before"
    for caps in capped uncapped; do
        for lib in $order; do
            path=target/release/libcachalot.so
            [ "$lib" = before ] && path=$LIB_BEFORE
            c=
            [ "$caps" = capped ] && c=$C1
            OUT="$OUT/round${round}_${lib}_$caps" LIB="$path" PASSES=4 CONFIGS=policy:cachalot CAPS="$c" DEVICES=real \
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
grep -q "^FAILED" "$OUT/free_memory_check.log" && status=1
exit $status
