#!/usr/bin/env bash
# cachalot's paged policy with page slack against PyTorch's expandable segments, same run, on
# the H200 (the trade between moving pages and holding them, docs/design.md):
#
#   bash native/gpu/slack_check.sh
#
# Build here first with `make gpu-build`, then carry
#   target/release/libcachalot.so  target/release/examples/trace_ops
# For each trace: overlap_check under the largest slack (real virtual memory, no overlap, peak
# reserved equal to the simulated replay's), then replay_timing (the C ABI, a fresh allocator:
# the first pass cold, then PASSES warm passes) under each config, then replay_torch.py with
# expandable_segments:True for as many passes. Then real training: TRAIN_WORKLOAD (default
# mixed_fc_conv, the workload that moves pages every step) under PyTorch's own allocator and
# under cachalot with each slack, TRAIN_ROUNDS rounds (default 3, 0 skips it), the order turning
# each round (pytorch_run.py; also carry target/release/cachalot). With OUT set, the whole output
# goes to $OUT/slack_check.log. Environment: SLACKS (default "0 0.03 0.1"), PASSES (default 12),
# TRACES (default: all three).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REL=$PWD/target/release
PASSES=${PASSES:-12}
TRAIN_ROUNDS=${TRAIN_ROUNDS:-3}
TRAIN_WORKLOAD=${TRAIN_WORKLOAD:-mixed_fc_conv}
read -r -a SLACKS <<<"${SLACKS:-0 0.03 0.1}"
read -r -a TRACES <<<"${TRACES:-mixed_fc_conv resnet50_train gpt2_train}"
source native/gpu/output_log.sh
log_to slack_check

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
source native/gpu/soname_link.sh
soname_link "$REL/libcachalot.so"
LINK=(-I include -L "$REL" -lcachalot -lcuda -Xlinker -rpath="$REL")
"$NVCC" -O2 -std=c++17 -arch="sm_${CAP:-90}" native/gpu/overlap_check.cu -o "$WORK/overlap_check" "${LINK[@]}"
"$NVCC" -O2 -std=c++17 native/gpu/replay_timing.cpp -o "$WORK/replay_timing" "${LINK[@]}"
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
rc=0
largest=policy:cachalot,page_slack:${SLACKS[-1]}
for t in "${TRACES[@]}"; do
    "$REL/examples/trace_ops" "traces/$t.csv.gz" >"$WORK/$t.ops"
    echo "=== $t: overlap check, $largest"
    timeout 150 "$WORK/overlap_check" "$WORK/$t.ops" --config "$largest" --passes 3 --label "$t" || rc=1
    for s in "${SLACKS[@]}"; do
        echo "=== $t: timing, policy:cachalot,page_slack:$s"
        timeout 90 "$WORK/replay_timing" "$WORK/$t.ops" --config "policy:cachalot,page_slack:$s" \
            --passes "$PASSES" --label "$t" || rc=1
    done
    echo "=== $t: PyTorch, expandable_segments:True"
    timeout 240 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
        python3 native/gpu/replay_torch.py "traces/$t.csv.gz" "$((PASSES + 1))" || rc=1
done
runs=(native)
for s in "${SLACKS[@]}"; do runs+=("policy:cachalot,page_slack:$s"); done
for ((round = 1; round <= TRAIN_ROUNDS; round++)); do
    for ((i = 0; i < ${#runs[@]}; i++)); do
        run=${runs[$(((i + round) % ${#runs[@]}))]}
        echo "=== training $TRAIN_WORKLOAD, round $round: $run"
        if [ "$run" = native ]; then
            timeout 180 python3 native/gpu/pytorch_run.py "$TRAIN_WORKLOAD" native || rc=1
        else
            timeout 180 python3 native/gpu/pytorch_run.py "$TRAIN_WORKLOAD" cachalot --config "$run" || rc=1
        fi
    done
done
exit $rc
