#!/usr/bin/env bash
# The serving loop (serving_loop.sh) at several model shapes, one after another, from the repo
# root:
#
#   OUT=dir SHAPES="B:L:H:P:S ..." [GENERATIONS=n] [RUNS=...] [LIB_BEFORE=path] bash native/gpu/serving_shapes.sh
#
# Each shape is batch:layers:hidden:prompt:steps (serving_loop.py's BATCH, LAYERS, HIDDEN,
# PROMPT, STEPS); its results go to $OUT/b<B>_l<L>_h<H>_p<P>_s<S>/. Whether a server's
# allocator settles (no device call a generation) depends on the shape: this runs the shapes
# whose simulated counterparts (core/tests/regrowth.rs) settle or do not.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-gpu-out}
for shape in ${SHAPES:-16:12:1024:256:128}; do
    IFS=: read -r b l h p s <<< "$shape"
    dir="$OUT/b${b}_l${l}_h${h}_p${p}_s${s}"
    mkdir -p "$dir"
    echo "== shape batch $b, $l layers of $h, $p + $s tokens"
    OUT="$dir" BATCH="$b" LAYERS="$l" HIDDEN="$h" PROMPT="$p" STEPS="$s" bash native/gpu/serving_loop.sh
done
