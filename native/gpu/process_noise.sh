#!/usr/bin/env bash
# How much the H200's host moves a timing from one process to the next, and whether pinning
# each process to one CPU, or backing malloc's memory with huge pages, steadies it. run.sh
# times cachalot (replay_timing) and PyTorch's allocator (replay_torch.py) in separate
# processes, and their ratio has swung from 1.4x to 7.8x between runs, while the same
# allocators side by side in one process stayed at 4.1–5.0x (docs/benchmarks.md, *One process
# against another on the H200's host*).
#
#   bash native/gpu/process_noise.sh
#
# Build here first with `make gpu-build`, then carry
#   target/release/libcachalot.so  target/release/examples/trace_ops
# For ROUNDS rounds (default 3), for each trace of TRACES (default: mixed_fc_conv gpt2_train),
# times both allocators warm, each in a process of its own: as run.sh does (plain), pinned
# with taskset to CPU PIN_CPU (default 2), and with glibc's malloc asking for transparent huge
# pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), the order of the two turning each round. Prints
# one line per process and a table of the warm medians and their ratio per round and mode.
# With OUT set, the whole output goes to $OUT/process_noise.log.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REL=$PWD/target/release
ROUNDS=${ROUNDS:-3}
PIN_CPU=${PIN_CPU:-2}
read -r -a TRACES <<<"${TRACES:-mixed_fc_conv gpt2_train}"
source native/gpu/output_log.sh
log_to process_noise

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
source native/gpu/soname_link.sh
soname_link "$REL/libcachalot.so"
"$NVCC" -O2 -std=c++17 native/gpu/replay_timing.cpp -o "$WORK/replay_timing" \
    -I include -L "$REL" -lcachalot -lcuda -Xlinker -rpath="$REL"
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
lscpu 2>/dev/null | grep -E '^(Socket|NUMA node|Core|Thread)' || true
echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown);" \
    "glibc $(ldd --version 2>/dev/null | head -n 1 | awk '{print $NF}')"
PIN=()
if command -v taskset >/dev/null; then
    PIN=(taskset -c "$PIN_CPU")
else
    echo "taskset not found: the pinned rows run unpinned"
fi
for t in "${TRACES[@]}"; do
    "$REL/examples/trace_ops" "traces/$t.csv.gz" >"$WORK/$t.ops"
done
# Compiles PyTorch's side's extension once, untimed.
timeout 240 python3 native/gpu/replay_torch.py "traces/${TRACES[0]}.csv.gz" 1 >/dev/null

# timing MODE ROUND TRACE SIDE: one process; appends "MODE ROUND TRACE SIDE MEDIAN" to rows.
timing() {
    local mode=$1 round=$2 t=$3 side=$4 prefix=() median
    [ "$mode" = pinned ] && prefix=("${PIN[@]}")
    [ "$mode" = hugepages ] && prefix=(env GLIBC_TUNABLES=glibc.malloc.hugetlb=1)
    if [ "$side" = cachalot ]; then
        median=$(timeout 90 "${prefix[@]}" "$WORK/replay_timing" "$WORK/$t.ops" --config policy:pytorch \
            --passes 7 --label "$t" | sed -n 's/^RESULT .*"ns_per_op_warm_median": \([0-9.]*\).*/\1/p')
    else
        median=$(timeout 120 env -u PYTORCH_CUDA_ALLOC_CONF "${prefix[@]}" python3 native/gpu/replay_torch.py \
            "traces/$t.csv.gz" 6 | sed -n 's/.*"ns_per_op_warm_median": \([0-9.]*\).*/\1/p')
    fi
    echo "$mode round $round $t $side: ${median:-failed} ns/op"
    echo "$mode $round $t $side ${median:-nan}" >>"$WORK/rows"
}

: >"$WORK/rows"
for ((round = 1; round <= ROUNDS; round++)); do
    for mode in plain pinned hugepages; do
        for t in "${TRACES[@]}"; do
            if ((round % 2)); then sides=(cachalot torch); else sides=(torch cachalot); fi
            for side in "${sides[@]}"; do timing "$mode" "$round" "$t" "$side"; done
        done
    done
done

echo
echo "| mode | round | trace | cachalot ns/op | PyTorch ns/op | ratio |"
echo "|---|---:|---|---:|---:|---:|"
awk '{ key = $1 " " $2 " " $3; v[key, $4] = $5; if (!(key in seen)) { seen[key] = 1; order[n++] = key } }
     END { for (i = 0; i < n; i++) { split(order[i], k, " "); c = v[order[i], "cachalot"]; p = v[order[i], "torch"];
           printf "| %s | %s | %s | %s | %s | %.2fx |\n", k[1], k[2], k[3], c, p, (c > 0 ? p / c : 0) } }' "$WORK/rows"
