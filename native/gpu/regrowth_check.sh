#!/usr/bin/env bash
# What a regrowing stream's region (core/src/engine/paged/regrowth.rs) changes on a GPU, against
# an older build of the library, in as few device calls as the time limit allows, from the repo
# root:
#
#   OUT=dir LIB_BEFORE=path/libcachalot.so STEPS="storm wheel" bash native/gpu/regrowth_check.sh
#   OUT=dir LIB_BEFORE=path/libcachalot.so STEPS=serving bash native/gpu/regrowth_check.sh
#
# storm:   decode_storm_cost.sh with one warm pass, this build under all three configs, then
#          LIB_BEFORE under cachalot's policy ($OUT/storm_after, $OUT/storm_before);
# wheel:   wheel_check.sh, PyTorch's own checks with the wheel ($OUT/wheel);
# serving: serving_loop.sh with LIB_BEFORE ($OUT/serving).
# Build here first: `make gpu-build wheel`, the decoding traces as operations (decode_storm_cost.sh
# says how), the older library at LIB_BEFORE; carry dist, target/release/libcachalot.so,
# target/decode-ops and LIB_BEFORE's folder.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
: "${LIB_BEFORE:?LIB_BEFORE names the older library to compare with}"
status=0
for step in ${STEPS:-storm wheel serving}; do
    echo "=== $step ($(date -u +%H:%M:%S))"
    case $step in
        storm)
            OUT="$OUT/storm_after" PASSES=1 bash native/gpu/decode_storm_cost.sh || status=1
            OUT="$OUT/storm_before" PASSES=1 LIB="$LIB_BEFORE" CONFIGS=policy:cachalot \
                bash native/gpu/decode_storm_cost.sh || status=1
            ;;
        wheel) OUT="$OUT/wheel" bash native/gpu/wheel_check.sh || status=1 ;;
        serving) OUT="$OUT/serving" LIB_BEFORE="$LIB_BEFORE" bash native/gpu/serving_loop.sh || status=1 ;;
        *) echo "unknown step $step" >&2; status=2 ;;
    esac
done
echo "=== done ($(date -u +%H:%M:%S))"
exit $status
