#!/usr/bin/env bash
# The serving loop (serving_loop.sh) at several model shapes, one after another, from the repo
# root:
#
#   OUT=dir SHAPES="B:L:H:P:N ..." [GENERATIONS=n] [RUNS=...] [LIB_BEFORE=path] bash native/gpu/serving_shapes.sh
#
# Each shape is batch:layers:hidden:prompt:new tokens (serving_loop.py's BATCH, MODEL_LAYERS,
# MODEL_HIDDEN, PROMPT_TOKENS, NEW_TOKENS); SHAPES defaults to 16:12:1024:256:128, the shape of
# core/tests/regrowth.rs's server whose usual placement settles. Each shape's results go to
# $OUT/b<B>_l<L>_h<H>_p<P>_n<N>/ (serving_loop.sh's log, JSON and table). Exits 1 if any shape's
# run failed, after running the others.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
status=0
for shape in ${SHAPES:-16:12:1024:256:128}; do
    IFS=: read -r b l h p n <<< "$shape"
    dir="$OUT/b${b}_l${l}_h${h}_p${p}_n${n}"
    mkdir -p "$dir"
    echo "== shape batch $b, $l layers of $h, $p + $n tokens"
    OUT="$dir" BATCH="$b" MODEL_LAYERS="$l" MODEL_HIDDEN="$h" PROMPT_TOKENS="$p" NEW_TOKENS="$n" \
        bash native/gpu/serving_loop.sh || status=1
    grep -q "^FAILED" "$dir/serving_loop.log" && status=1
done
exit $status
