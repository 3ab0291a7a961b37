#!/usr/bin/env bash
# The GPU check of cachalot's native library, on a CUDA machine (the H200), from the repo root:
#
#   bash native/gpu/run.sh
#
# It builds nothing with cargo: build here first with `make gpu-build`, then carry
#   target/release/libcachalot.so  target/release/cachalot  target/release/examples/trace_ops
# It compiles two small programs against include/cachalot.h with nvcc, then, for each reference
# trace (traces/*.csv.gz, as plain-text operations from trace_ops):
#   1. overlap_check: replays the trace through the C ABI with real CUDA memory, checked — no two
#      live allocations overlap (address ranges on the host; a tag byte per allocation written
#      with cuMemsetD8 and verified by a kernel before each free) — in lockstep with a simulated
#      replay of the same operations and config, whose peak reserved bytes and device allocation
#      count must be equal (and equal to the `cachalot replay` CLI's); then times warm passes;
#   2. replay_torch.py (PyTorch's own allocator, same traces, same run) for the ns/op comparison,
#      and side_by_side.py (both allocators in one process, passes alternating, for the ratio);
#   3. contention_bench: 1, 2, 4, 8, 16 threads sharing one allocator, a stream each, with one
#      lock (the default) and with a lock per stream (lock_per_stream:True);
#   4. compute-sanitizer --tool memcheck over one trace's check;
#   5. torch_plugin_check.py: cachalot as PyTorch's allocator (CUDAPluggableAllocator), with
#      PLUGIN_CHECK=1 (native/gpu/pytorch_check.sh covers PyTorch in depth);
#   6. stream_check: record_stream across two streams, verified by memory contents, and out of
#      memory at a memory fraction with recovery after frees (both policies, and a lock per
#      stream);
#   7. stats_parity.py: scripted scenarios through PyTorch's own allocator and through
#      cachalot's simulated one, every statistic, summary line, snapshot segment and history
#      entry compared (STATS_PARITY=0 skips it; its recording is kept as stats_parity.json.gz).
# And for the policies (issues 6 and 7): the overlap check again under cachalot's paged policy
# (real virtual memory: cuMemCreate/cuMemMap; five checked passes on one allocator, so the
# layout it learns is followed, and checked, from the third), replay_timing (cold and warm ns/op through the
# C ABI, fresh allocator, as replay_torch.py times PyTorch) under both policies, and PyTorch's
# allocator with expandable_segments:True; policy_summary.py prints those tables after the
# main summary.
# The summary table is printed last. With OUT set, everything is written there: gpu_check.log
# (the whole output), summary.md, benchmarks.md (for docs/benchmarks.md), results.json and
# sanitizer.log. Exit 0 when every check passed.
#
# Environment: CACHALOT_CHECK_CONFIG (default policy:pytorch), PASSES (warm passes, default 7),
# CHECKED_PASSES (passes checked under CACHALOT_CHECK_CONFIG, default 7: the decision memo
# replays from the fifth, so the later ones check its answers on real memory),
# TORCH_PASSES (default 6), BUDGET_S (default 570: a later step starts only if its time limit
# ends before then, so the summary comes out inside the device tool's 600 s).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
REL=$ROOT/target/release
LIB=$REL/libcachalot.so
CLI=$REL/cachalot
OPS_TOOL=$REL/examples/trace_ops
CONFIG=${CACHALOT_CHECK_CONFIG:-policy:pytorch}
PAGED=policy:cachalot
PER_STREAM=$CONFIG,lock_per_stream:True
PASSES=${PASSES:-7}
CHECKED_PASSES=${CHECKED_PASSES:-7}
TORCH_PASSES=${TORCH_PASSES:-6}
BUDGET_S=${BUDGET_S:-570}
TRACES=(mixed_fc_conv resnet50_train gpt2_train)
SANITIZED=mixed_fc_conv
SANITIZED_CONFIG=${SANITIZED_CONFIG:-policy:cachalot} # the virtual-memory path: the most driver calls
CONTENDED=mixed_fc_conv

RESULTS=${OUT:-$(mktemp -d /tmp/cachalot-gpu.XXXXXX)}
WORK=$(mktemp -d /tmp/cachalot-gpu-work.XXXXXX)
mkdir -p "$RESULTS"
LOG=$RESULTS/gpu_check.log
: >"$LOG"

say() { printf '%s\n' "$*" | tee -a "$LOG"; }

# run_step NAME LIMIT_S OUTFILE CMD...: runs CMD with its output shown, logged and kept in
# $WORK/OUTFILE; returns CMD's status (124 on timeout) without stopping the script.
run_step() {
    local name=$1 limit=$2 outfile=$WORK/$3
    shift 3
    say ""
    say "=== $name ($(date +%T), ${SECONDS}s in) ==="
    { local rc=0; timeout --kill-after=15 "$limit" "$@" 2>&1 || rc=$?; echo "$rc" >"$outfile.rc"; } \
        | tee "$outfile" | tee -a "$LOG"
    local rc
    rc=$(cat "$outfile.rc")
    [ "$rc" = 0 ] || say "--- $name: exit status $rc"
    return "$rc"
}

# have_time NAME LIMIT_S: true when a step of that time limit would end inside the budget;
# otherwise says it is skipped, so the summary always comes out.
have_time() {
    if [ $((SECONDS + $2)) -gt "$BUDGET_S" ]; then
        say "--- skipped: $1 (${SECONDS}s spent, its limit $2s, budget ${BUDGET_S}s)"
        return 1
    fi
}

find_tool() { # NAME: on PATH, or in the CUDA toolkit's bin
    command -v "$1" 2>/dev/null || { [ -x "/usr/local/cuda/bin/$1" ] && echo "/usr/local/cuda/bin/$1"; } || true
}

# ---- preflight ----
say "=== cachalot GPU check ($(date -u +%FT%TZ)) ==="
missing=0
for f in "$LIB" "$CLI" "$OPS_TOOL"; do
    [ -f "$f" ] || { say "missing: ${f#$ROOT/} (build with 'make gpu-build' and carry it)"; missing=1; }
done
for t in "${TRACES[@]}"; do
    [ -f "traces/$t.csv.gz" ] || { say "missing: traces/$t.csv.gz"; missing=1; }
done
NVCC=$(find_tool nvcc)
SANITIZER=$(find_tool compute-sanitizer)
[ -n "$NVCC" ] || { say "missing: nvcc"; missing=1; }
[ "$missing" = 0 ] || { say "cannot run: see above"; exit 2; }
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader,nounits | head -n 1 || true)
IFS=',' read -r GPU_NAME DRIVER MEM_MIB CAP <<<"$GPU" || true
GPU_NAME=${GPU_NAME# } DRIVER=${DRIVER// /} MEM_MIB=${MEM_MIB// /} CAP=${CAP// /}
CAPACITY=$([[ "$MEM_MIB" =~ ^[0-9]+$ ]] && echo "${MEM_MIB}MiB" || echo 140GiB)
ARCH=sm_$(echo "${CAP:-9.0}" | tr -d '.')
TORCH_VERSION=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "not found")
NVCC_VERSION=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/nvcc \1/p')
say "GPU: ${GPU_NAME:-?} (driver ${DRIVER:-?}, ${MEM_MIB:-?} MiB, $ARCH); $NVCC_VERSION; torch $TORCH_VERSION"
say "config: $CONFIG; results: $RESULTS"
cat >"$WORK/meta.txt" <<EOF
gpu=$GPU_NAME
driver=$DRIVER
nvcc=$NVCC_VERSION
torch=$TORCH_VERSION
config=$CONFIG
passes=$PASSES
torch_passes=$TORCH_PASSES
contention_trace=$CONTENDED
date=$(date -u +%F)
EOF

# ---- build the two C ABI programs against the header and the carried library ----
source native/gpu/soname_link.sh
soname_link "$LIB"
LINK=(-I include -L "$REL" -lcachalot -lcuda -Xlinker -rpath="$REL")
run_step "build overlap_check" 120 build1.log \
    "$NVCC" -O2 -std=c++17 -arch="$ARCH" native/gpu/overlap_check.cu -o "$WORK/overlap_check" "${LINK[@]}" || true
run_step "build contention_bench" 120 build2.log \
    "$NVCC" -O2 -std=c++17 native/gpu/contention_bench.cpp -o "$WORK/contention_bench" "${LINK[@]}" -lpthread || true
run_step "build stream_check" 120 build4.log \
    "$NVCC" -O2 -std=c++17 -arch="$ARCH" native/gpu/stream_check.cu -o "$WORK/stream_check" "${LINK[@]}" || true
run_step "build vmm_costs" 120 build5.log \
    "$NVCC" -O2 -std=c++17 native/gpu/vmm_costs.cpp -o "$WORK/vmm_costs" -lcuda || true
[ -x "$WORK/vmm_costs" ] && run_step "virtual-memory call costs" 60 vmm_costs.log "$WORK/vmm_costs" 512 || true
run_step "build segment_call_costs" 120 build6.log \
    "$NVCC" -O2 -std=c++17 native/gpu/segment_call_costs.cpp -o "$WORK/segment_call_costs" -lcuda || true
[ -x "$WORK/segment_call_costs" ] && run_step "segment call costs" 60 segment_call_costs.log "$WORK/segment_call_costs" 21 || true
run_step "build replay_timing" 120 build3.log \
    "$NVCC" -O2 -std=c++17 native/gpu/replay_timing.cpp -o "$WORK/replay_timing" "${LINK[@]}" || true

# ---- per trace: operations, simulated reference, checked GPU replay ----
for t in "${TRACES[@]}"; do
    if ! "$OPS_TOOL" "traces/$t.csv.gz" >"$WORK/$t.ops" 2>>"$LOG"; then
        say "--- trace_ops failed on $t (see gpu_check.log)"
        continue
    fi
    if timeout 120 "$CLI" replay "traces/$t.csv.gz" --config "$CONFIG" --capacity "$CAPACITY" --passes 3 --json \
        >"$WORK/$t.cli.json" 2>>"$LOG"; then
        say "cachalot CLI, simulated replay of $t: done (the summary compares it)"
    else
        say "--- cachalot CLI failed on $t (see gpu_check.log)"
    fi
    if [ -x "$WORK/overlap_check" ]; then
        run_step "overlap check, real memory: $t" 150 "$t.check.log" \
            "$WORK/overlap_check" "$WORK/$t.ops" --config "$CONFIG" --passes "$PASSES" \
            --checked-passes "$CHECKED_PASSES" --label "$t" || true
    fi
done

# ---- cachalot's paged policy with real virtual memory ----
for t in "${TRACES[@]}"; do
    [ -f "$WORK/$t.ops" ] || continue
    timeout 120 "$CLI" replay "traces/$t.csv.gz" --config "$PAGED" --capacity "$CAPACITY" --passes 3 --json \
        >"$WORK/$t.paged.cli.json" 2>>"$LOG" || say "--- cachalot CLI ($PAGED) failed on $t"
    if [ -x "$WORK/overlap_check" ] && have_time "overlap check ($PAGED): $t" 150; then
        run_step "overlap check, real memory, $PAGED: $t" 150 "$t.paged.check.log" \
            "$WORK/overlap_check" "$WORK/$t.ops" --config "$PAGED" --passes 3 --checked-passes 5 --label "$t" || true
    fi
done

# ---- two streams (record_stream, checked by memory contents) and out of memory at a fraction ----
if [ -x "$WORK/stream_check" ]; then
    for c in "$CONFIG" "$PAGED"; do
        run_step "streams and memory fraction, $c" 60 "stream_check.${c#policy:}.log" "$WORK/stream_check" --config "$c" || true
    done
    run_step "streams and memory fraction, $PER_STREAM" 60 stream_check.per_stream.log \
        "$WORK/stream_check" --config "$PER_STREAM" || true
fi

# ---- cold and warm time per operation through the C ABI, fresh allocators ----
for t in "${TRACES[@]}"; do
    [ -x "$WORK/replay_timing" ] && [ -f "$WORK/$t.ops" ] || continue
    for c in "$CONFIG" "$PAGED"; do
        have_time "timing $c: $t" 90 || continue
        run_step "timing, real memory, $c: $t" 90 "$t.timing.${c#policy:}.log" \
            "$WORK/replay_timing" "$WORK/$t.ops" --config "$c" --passes "$PASSES" --label "$t" || true
    done
done

# ---- PyTorch's allocator on the same traces, in the same run ----
limit=240 # the first replay compiles PyTorch's C++ extension
for t in "${TRACES[@]}"; do
    have_time "PyTorch replay of $t" "$limit" || continue
    run_step "PyTorch's allocator (default config): $t" "$limit" "$t.torch.log" \
        env -u PYTORCH_CUDA_ALLOC_CONF python3 native/gpu/replay_torch.py "traces/$t.csv.gz" "$TORCH_PASSES" || true
    limit=120
done
# ---- side by side: one process, passes alternating between PyTorch's allocator and cachalot ----
limit=240 # compiles its own extension first
for t in "${TRACES[@]}"; do
    have_time "side by side: $t" "$limit" || continue
    run_step "side by side, PyTorch's allocator and cachalot ($CONFIG): $t" "$limit" "$t.side_by_side.log" \
        env -u PYTORCH_CUDA_ALLOC_CONF python3 native/gpu/side_by_side.py "$LIB" "traces/$t.csv.gz" 21 "$CONFIG" || true
    limit=120
done
for t in "${TRACES[@]}"; do
    have_time "PyTorch replay of $t (expandable segments)" "$limit" || continue
    run_step "PyTorch's allocator (expandable_segments:True): $t" "$limit" "$t.torch_expandable.log" \
        env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 native/gpu/replay_torch.py "traces/$t.csv.gz" "$TORCH_PASSES" || true
done

# ---- threads sharing one allocator ----
if [ -x "$WORK/contention_bench" ] && have_time "contention benchmark" 90; then
    run_step "contention: 1-16 threads, one allocator ($CONTENDED)" 90 contention.log \
        "$WORK/contention_bench" "$WORK/$CONTENDED.ops" --config "$CONFIG" --threads 1,2,4,8,16 --passes 20 || true
fi
if [ -x "$WORK/contention_bench" ] && have_time "contention benchmark, a lock per stream" 90; then
    run_step "contention: 1-16 threads, a lock per stream ($CONTENDED)" 90 contention_per_stream.log \
        "$WORK/contention_bench" "$WORK/$CONTENDED.ops" --config "$PER_STREAM" --threads 1,2,4,8,16 --passes 20 || true
fi

# ---- compute-sanitizer over one trace's check ----
if [ -z "$SANITIZER" ]; then
    echo "UNAVAILABLE compute-sanitizer not found" >"$WORK/sanitizer.status"
elif [ ! -x "$WORK/overlap_check" ]; then
    echo "FAIL overlap_check did not build" >"$WORK/sanitizer.status"
elif have_time "compute-sanitizer" 200; then
    say ""
    say "=== compute-sanitizer --tool memcheck: $SANITIZED ($(date +%T), ${SECONDS}s in; full log: sanitizer.log) ==="
    rc=0
    timeout --kill-after=15 200 "$SANITIZER" --tool memcheck --leak-check full --error-exitcode 86 \
        "$WORK/overlap_check" "$WORK/$SANITIZED.ops" --config "$SANITIZED_CONFIG" --passes 2 --checked-passes 4 --label "$SANITIZED (memcheck)" \
        >"$RESULTS/sanitizer.log" 2>&1 || rc=$?
    tail -n 25 "$RESULTS/sanitizer.log" | tee -a "$LOG"
    summary_line=$(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$RESULTS/sanitizer.log" | tail -n 1 || true)
    if grep -qiE 'device not supported|not supported on this (device|platform)' "$RESULTS/sanitizer.log"; then
        echo "UNAVAILABLE compute-sanitizer does not support this machine (exit $rc): see sanitizer.log" >"$WORK/sanitizer.status"
    elif [ "$rc" = 0 ] && [ "$summary_line" = "ERROR SUMMARY: 0 errors" ]; then
        echo "PASS $summary_line; the check itself passed under memcheck" >"$WORK/sanitizer.status"
    else
        echo "FAIL exit $rc, ${summary_line:-no error summary}: see sanitizer.log" >"$WORK/sanitizer.status"
    fi
else
    echo "SKIPPED out of time" >"$WORK/sanitizer.status"
fi

# ---- cachalot as PyTorch's allocator ----
if [ "${PLUGIN_CHECK:-0}" = 1 ] && have_time "PyTorch plug-in check" 120; then
    run_step "PyTorch plug-in (CUDAPluggableAllocator)" 120 plugin.log \
        env CACHALOT_ALLOC_CONF="$CONFIG" python3 native/gpu/torch_plugin_check.py "$LIB" || true
fi

# ---- PyTorch's own statistics beside cachalot's (scripted scenarios) ----
if [ "${STATS_PARITY:-1}" = 1 ] && have_time "statistics beside PyTorch's" 240; then
    run_step "statistics beside PyTorch's (stats_parity.py)" 240 stats_parity.log \
        bash -c 'python3 native/gpu/stats_parity.py torch "$1" && CACHALOT_LIB="$2" python3 native/gpu/stats_parity.py cachalot "$1"' \
        _ "$RESULTS/stats_parity.json.gz" "$LIB" || true
fi

# ---- summary, printed last ----
say ""
say "=== summary (${SECONDS}s) ==="
rc=0
python3 native/gpu/summarize.py "$WORK" "$RESULTS" "${TRACES[@]}" 2>&1 | tee -a "$LOG" || rc=$?
python3 native/gpu/policy_summary.py "$WORK" "$RESULTS" "${TRACES[@]}" 2>&1 | tee -a "$LOG" || rc=$?
say "(logs and results: $RESULTS)"
exit "$rc"
