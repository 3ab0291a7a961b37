#!/usr/bin/env bash
# A decoding trace replayed on a card of exactly its smallest size: replay_timing.cpp with
# --leave, which fills the GPU until only so many bytes are free, so that the driver refuses
# cuMemCreate itself (a memory fraction is checked by the allocator first and never reaches
# the driver). The cold pass, one library after the other, from the repo root:
#
#   OUT=dir LIBS="path/libcachalot.so ..." [TRACE=b8_p512_n512_l24_h2048] [LEAVES="BYTES ..."] \
#       bash native/gpu/whole_card_check.sh
#
# Build here first: the libraries, and the trace as operations under target/decode-ops/ (see
# decode_storm_cost.sh); carry them. LEAVES defaults to the trace's smallest device under
# cachalot's policy (`cachalot fit`), two, six and fourteen pages above it, for b8.
# Results: $OUT/whole_card.log, every RESULT line with the library and the bytes left.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
: "${LIBS:?LIBS=path/libcachalot.so ...}"
TRACE=${TRACE:-b8_p512_n512_l24_h2048}
LEAVES=${LEAVES:-"5001707520 5005901824 5014290432 5031067648"}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source native/gpu/soname_link.sh
gunzip -c "target/decode-ops/$TRACE.ops.gz" > "$WORK/trace.ops" || exit 2
log="$OUT/whole_card.log"
: > "$log"
status=0
read -ra libs <<< "$LIBS"
for i in "${!libs[@]}"; do
    mkdir -p "$WORK/lib$i"
    cp "${libs[$i]}" "$WORK/lib$i/libcachalot.so" && soname_link "$WORK/lib$i/libcachalot.so" || exit 2
    nvcc -O2 -std=c++17 native/gpu/replay_timing.cpp -o "$WORK/replay$i" -I include -L "$WORK/lib$i" \
        -lcachalot -lcuda -Xlinker -rpath="$WORK/lib$i" || exit 2
done
for round in 1 2; do
    for leave in $LEAVES; do
        for i in "${!libs[@]}"; do
            echo "== round $round, $(basename "${libs[$i]}"), $leave bytes left" | tee -a "$log"
            if timeout 120 "$WORK/replay$i" "$WORK/trace.ops" --config policy:cachalot --passes 0 \
                --leave "$leave" --label "$TRACE" > "$WORK/run.txt" 2>&1; then
                line=$(grep RESULT "$WORK/run.txt" | cut -c1-160)
            else
                line="FAILED (exit $?)"
                status=1
            fi
            cat "$WORK/run.txt" >> "$log"
            echo "$line" | tee -a "$log"
        done
    done
done
exit $status
