#!/usr/bin/env bash
# Threads on the H200's host, every reference trace, one lock against a lock per stream:
#
#   bash native/gpu/threads_check.sh
#
# Build here first: `make gpu-build` and
# `cargo build --release -p cachalot-cli --example thread_scaling`, then carry
#   target/release/libcachalot.so  target/release/examples/trace_ops
#   target/release/examples/thread_scaling
# First cpu_baseline: how a loop that shares nothing scales on this host. Then, for each trace:
# contention_bench (the C ABI over real CUDA memory, 1-16 threads, a stream each, 20 timed
# passes, the median of 3 runs) under policy:pytorch and policy:pytorch,lock_per_stream:True,
# and with an allocator per thread (--separate: the threads share nothing, the most a shared
# allocator could reach on this host); then thread_scaling (the same over a simulated device,
# 1-16 threads, the three setups). With OUT set,
# the whole output goes to $OUT/threads_check.log. Environment: THREADS (default
# 1,2,4,8,16), PASSES (default 20), TRACES (default: all three), CONFIGS (the configs
# contention_bench compares, space-separated; default the two above). gpt2_train runs at most 4
# threads over real memory: each stream's copy of it reserves about 22 GiB under
# policy:pytorch, so 8 of them would not fit in the H200's 140 GiB, and the benchmark would
# time out-of-memory recovery instead of locks.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REL=$PWD/target/release
THREADS=${THREADS:-1,2,4,8,16}
PASSES=${PASSES:-20}
CONFIGS=${CONFIGS:-policy:pytorch policy:pytorch,lock_per_stream:True}
read -r -a TRACES <<<"${TRACES:-mixed_fc_conv resnet50_train gpt2_train}"
source native/gpu/output_log.sh
log_to threads_check

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
source native/gpu/soname_link.sh
soname_link "$REL/libcachalot.so"
"$NVCC" -O2 -std=c++17 native/gpu/contention_bench.cpp -o "$WORK/contention_bench" \
    -I include -L "$REL" -lcachalot -lcuda -Xlinker -rpath="$REL" -lpthread
"$NVCC" -O2 -std=c++17 native/gpu/cpu_baseline.cpp -o "$WORK/cpu_baseline" -lpthread
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
rc=0
"$WORK/cpu_baseline" --threads "$THREADS" || rc=1
for t in "${TRACES[@]}"; do
    "$REL/examples/trace_ops" "traces/$t.csv.gz" >"$WORK/$t.ops"
    for config in $CONFIGS; do
        echo "=== $t, $config (C ABI, real memory)"
        threads=$THREADS
        [ "$t" = gpt2_train ] && threads=$(tr ',' '\n' <<<"$THREADS" | awk '$1 <= 4' | paste -sd,)
        timeout 120 "$WORK/contention_bench" "$WORK/$t.ops" --config "$config" --threads "$threads" \
            --passes "$PASSES" || rc=1
    done
    echo "=== $t, an allocator per thread (C ABI, real memory)"
    timeout 120 "$WORK/contention_bench" "$WORK/$t.ops" --config policy:pytorch --threads "$threads" \
        --passes "$PASSES" --separate || rc=1
    echo "=== $t (simulated device)"
    timeout 120 "$REL/examples/thread_scaling" "traces/$t.csv.gz" "${THREADS##*,}" "$PASSES" || rc=1
done
exit "$rc"
