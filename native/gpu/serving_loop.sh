#!/usr/bin/env bash
# A server generating text again and again (serving_loop.py) under PyTorch's default allocator,
# expandable segments and cachalot, from the repo root:
#
#   OUT=dir [LIB_BEFORE=path/libcachalot.so] bash native/gpu/serving_loop.sh
#
# Build here first: `make wheel`, and carry dist. cachalot comes from the wheel, installed into a
# virtual environment that sees the machine's PyTorch (wheel_env.sh). With LIB_BEFORE, cachalot
# runs a second time with that library in the wheel's place (an older build of the same C ABI,
# to compare two versions of the policy in one run). GENERATIONS, BATCH, CAP_BYTES and the
# model's shape (MODEL_LAYERS, MODEL_HIDDEN, PROMPT_TOKENS, NEW_TOKENS) and KV_CACHE go to serving_loop.py; RUNS (default "pytorch
# expandable cachalot") picks the allocators.
# Results: $OUT/serving_loop.log, $OUT/serving_loop_<allocator>.json and a table.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source native/gpu/wheel_env.sh
make_wheel_env || exit 2
export PYTHONUNBUFFERED=1
log="$OUT/serving_loop.log"
: > "$log"
read -r -a runs <<< "${RUNS:-pytorch expandable cachalot}"
for a in "${runs[@]}"; do
    echo "== $a" >> "$log"
    timeout 600 "$ENV_DIR/bin/python" native/gpu/serving_loop.py "$a" "$OUT/serving_loop_$a.json" >> "$log" 2>&1 ||
        echo "FAILED $a (exit $?)" | tee -a "$log"
done
if [ -n "${LIB_BEFORE:-}" ]; then
    lib=$(ls "$("$ENV_DIR/bin/python" -c 'import cachalot_native, os; print(os.path.dirname(cachalot_native.__file__))')"/libcachalot.so.*)
    cp "$LIB_BEFORE" "$lib" || exit 2
    echo "== cachalot_before ($LIB_BEFORE)" >> "$log"
    timeout 600 "$ENV_DIR/bin/python" native/gpu/serving_loop.py cachalot "$OUT/serving_loop_cachalot_before.json" >> "$log" 2>&1 ||
        echo "FAILED cachalot_before (exit $?)" | tee -a "$log"
fi
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
print("device capped at", os.environ.get("CAP_BYTES") or "nothing", "bytes; KV_CACHE", os.environ.get("KV_CACHE", "pair"))
print("| allocator | seconds a generation, in order | median of the last half | peak reserved | device allocs / frees, last generation |")
print("|---|---|---:|---:|---:|")
for path in sorted(glob.glob(os.path.join(out, "serving_loop_*.json"))):
    label = os.path.basename(path)[len("serving_loop_"):-len(".json")]
    rows = json.load(open(path))["generations"]
    if rows and rows[-1].get("out_of_memory"):
        print(f"| {label} | out of memory in generation {rows[-1]['generation']} | | | |")
        rows = rows[:-1]
    if not rows:
        continue
    secs = [r["secs"] for r in rows]
    last = rows[-1]
    print(f"| {label} | {' '.join(f'{s:.3f}' for s in secs)} | {statistics.median(secs[len(secs) // 2:]):.3f} | "
          f"{last['peak_reserved']:,} | {last['device_allocs']:,} / {last['device_frees']:,} |")
checks = {os.path.basename(p): [r["checksum"] for r in json.load(open(p))["generations"] if "checksum" in r]
          for p in glob.glob(os.path.join(out, "serving_loop_*.json"))}
print("checksums:", json.dumps({k: sorted(set(round(c, 2) for c in v)) for k, v in checks.items()}))
PY
