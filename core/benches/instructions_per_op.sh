#!/usr/bin/env bash
# Instructions an operation in warm passes, counted by callgrind: the instructions of
# `replay_loop` over LATER passes minus those over EARLIER passes, divided by the operations
# of the passes between. Counts do not drift with the machine's load as times do, so two
# configs or two commits compare exactly; the passes before EARLIER (cold, learning, laying
# out a plan) cancel out.
#
#   bash core/benches/instructions_per_op.sh TRACE CONFIG [EARLIER LATER]
#   bash core/benches/instructions_per_op.sh gpt2_train policy:cachalot 6 10
set -euo pipefail
trace=$1 config=$2 earlier=${3:-6} later=${4:-10}
root=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --release -q -p cachalot-core --example replay_loop --manifest-path "$root/Cargo.toml"
bin=$root/target/release/examples/replay_loop
ops=$(zcat "$root/traces/$trace.csv.gz" | tail -n +2 | grep -c .)
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$trace.csv.gz" "$1" "$config" 2>&1 >/dev/null |
        sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
first=$(count "$earlier")
second=$(count "$later")
awk -v a="$first" -v b="$second" -v n="$ops" -v p=$((later - earlier)) -v t="$trace" -v c="$config" \
    'BEGIN { printf "%s %s: %.1f instructions an operation (passes %d-%d)\n", t, c, (b - a) / (n * p), '"$earlier"' + 1, '"$later"' }'
