#!/usr/bin/env bash
# The largest batch three jobs run at on a capped H200 (set_per_process_memory_fraction),
# under PyTorch's default allocator, expandable segments and cachalot, from the repo root:
#
#   OUT=dir bash native/gpu/largest_batch.sh
#
# Build here first: `make wheel`, and carry dist. cachalot comes from the wheel, installed into a
# virtual environment that sees the machine's PyTorch (the one native/gpu/wheel_check.sh makes,
# made again when absent). Each (job, allocator) pair is one process of largest_batch.py;
# WORKLOADS (default: gpt2 bert_ckpt llm_decode), ALLOCATORS (default: pytorch expandable cachalot),
# BRACKET_<workload>_<allocator> (LO:HI, see largest_batch.py), PAIR_TIMEOUT_S (default 300),
# CAP_GIB (default 24) and BUDGET_S (default 540:
# a pair not started by then is skipped and said) choose what runs.
# Results: $OUT/largest_batch.log, $OUT/largest_batch.json (every pair's trials) and a table.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source native/gpu/wheel_env.sh
if ! "$ENV_DIR/bin/python" -c 'import cachalot_torch, torch' 2>/dev/null; then make_wheel_env || exit 2; fi
export PYTHONUNBUFFERED=1 CAP_GIB=${CAP_GIB:-24}
budget=${BUDGET_S:-540}
start=$SECONDS
rm -f "$OUT"/largest_batch_*.json
for w in ${WORKLOADS:-gpt2 bert_ckpt llm_decode}; do
    for a in ${ALLOCATORS:-pytorch expandable cachalot}; do
        # BRACKET_<workload>_<allocator>=LO:HI starts that pair's bisection there (largest_batch.py).
        bracket_var="BRACKET_${w}_${a}"
        export BRACKET=${!bracket_var:-}
        if (( SECONDS - start > budget )); then echo "SKIPPED $w $a: past BUDGET_S=$budget" | tee -a "$OUT/largest_batch.log"; continue; fi
        echo "== $w $a" >> "$OUT/largest_batch.log"
        timeout "${PAIR_TIMEOUT_S:-300}" "$ENV_DIR/bin/python" -X faulthandler native/gpu/largest_batch.py "$w" "$a" "$OUT/largest_batch_${w}_${a}.json" \
            >> "$OUT/largest_batch.log" 2>&1 || echo "FAILED $w $a (exit $?)" | tee -a "$OUT/largest_batch.log"
        grep '^RESULT' "$OUT/largest_batch.log" | tail -n 1 | cut -c1-300
    done
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "largest_batch_*_*.json")))]
json.dump(rows, open(os.path.join(out, "largest_batch.json"), "w"))
print(f"| job | allocator | largest batch (cap {rows[0]['cap_gib'] if rows else '?'} GiB) | exact | loss at the common batch |")
print("|---|---|---:|---|---|")
by_job = {}
for r in rows:
    by_job.setdefault(r["workload"], []).append(r)
for job, rs in by_job.items():
    # The largest batch every allocator ran (doubling tries the same ones): losses compare there.
    ran = [{t["batch"] for t in r["trials"] if t["ok"]} for r in rs]
    common = max(set.intersection(*ran), default=None)
    for r in rs:
        loss = next((t["loss"] for t in r["trials"] if t["batch"] == common and t["ok"]), None)
        print(f"| {job} | {r['allocator']} | {r['largest_batch']} | {r['exact']} | {common}: {loss} |")
PY
