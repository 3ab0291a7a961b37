#!/usr/bin/env bash
# Where the GPU host's time per operation goes: the same replay on the same host, four ways.
#
#   bash native/gpu/host_check.sh
#
# Build here first: `make gpu-build` and
# `cargo build --release -p cachalot-core --example replay_loop`, then carry
#   target/release/libcachalot.so  target/release/examples/trace_ops
#   target/release/examples/replay_loop
# It prints the host's CPU, clock source and frequency governor, then for each reference trace:
#   1. replay_loop: the core alone over a simulated device (no C ABI), under `perf stat` when
#      perf is there (cycles and instructions per operation say whether the host runs fewer
#      instructions a cycle or fewer cycles a second);
#   2. replay_timing --simulated: the C ABI over a simulated device, no CUDA context;
#   3. replay_timing: the C ABI over real CUDA memory;
#   4. with TORCH=1 (the default), replay_torch.py: PyTorch's allocator on the same trace.
# Each under policy:pytorch. With OUT set, the output also goes to $OUT/host_check.log.
# Environment: TRACES (default: all three), PASSES (default 7), TORCH (default 1).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REL=$PWD/target/release
PASSES=${PASSES:-7}
read -r -a TRACES <<<"${TRACES:-mixed_fc_conv resnet50_train gpt2_train}"
source native/gpu/output_log.sh
log_to host_check

echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "MHz now: $(grep 'cpu MHz' /proc/cpuinfo | awk '{print int($4)}' | sort -n | uniq -c | sort -rn | head -n 4 | xargs)"
echo "clock source: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo ?)"
echo "governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo none)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo ?)"
PERF=$(command -v perf || true)
echo "perf: ${PERF:-not found}"

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
source native/gpu/soname_link.sh
soname_link "$REL/libcachalot.so"
"$NVCC" -O2 -std=c++17 native/gpu/replay_timing.cpp -o "$WORK/replay_timing" \
    -I include -L "$REL" -lcachalot -lcuda -Xlinker -rpath="$REL"
rc=0
for t in "${TRACES[@]}"; do
    "$REL/examples/trace_ops" "traces/$t.csv.gz" >"$WORK/$t.ops"
    echo "=== $t: the core alone (replay_loop, 20 passes)"
    if [ -n "$PERF" ]; then
        "$PERF" stat -e cycles,instructions,task-clock "$REL/examples/replay_loop" "$PWD/traces/$t.csv.gz" 20 policy:pytorch || rc=1
    else
        "$REL/examples/replay_loop" "$PWD/traces/$t.csv.gz" 20 policy:pytorch || rc=1
    fi
    echo "=== $t: the core alone, pinned to one CPU"
    taskset -c 3 "$REL/examples/replay_loop" "$PWD/traces/$t.csv.gz" 20 policy:pytorch || rc=1
    echo "=== $t: C ABI, simulated device"
    "$WORK/replay_timing" "$WORK/$t.ops" --simulated --passes "$PASSES" --label "$t" | head -n 1 || rc=1
    echo "=== $t: C ABI, real memory"
    "$WORK/replay_timing" "$WORK/$t.ops" --passes "$PASSES" --label "$t" | head -n 1 || rc=1
    if [ "${TORCH:-1}" = 1 ]; then
        echo "=== $t: PyTorch's allocator"
        env -u PYTORCH_CUDA_ALLOC_CONF timeout 240 python3 native/gpu/replay_torch.py "traces/$t.csv.gz" 6 || rc=1
    fi
done
exit "$rc"
