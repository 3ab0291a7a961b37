#!/usr/bin/env bash
# The replay benchmark of two builds in one run: the core at REV and the working tree, each
# compiled with today's core/benches/replay.rs (REV keeps its own support/), run alternately ROUNDS times (before,
# after, before, after, ...), so both see the same machine load. Prints criterion's lines.
#
#   bash core/benches/before_after.sh REV [FILTER] [ROUNDS]
#   bash core/benches/before_after.sh c65801c 'decision_memo:False|policy:cachalot' 2
#
# FILTER is criterion's (a regex over the bench ids, default every cachalot row); ROUNDS
# defaults to 2. The core's API the bench uses (Allocator, Config, Replayer, SimDevice) must
# exist at REV.
set -euo pipefail
rev=${1:?usage: before_after.sh REV [FILTER] [ROUNDS]}
filter=${2:-cachalot}
rounds=${3:-2}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach "$work/tree" "$rev" >/dev/null
cp "$root/core/benches/replay.rs" "$work/tree/core/benches/replay.rs"
build() { # DIR TARGET_DIR -> path of the bench binary
    (cd "$1" && CARGO_TARGET_DIR=$2 cargo bench -p cachalot-core --bench replay --no-run --message-format=json) |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}
before=$(build "$work/tree" "$root/target/before_after")
cp "$before" "$work/before"
after=$(build "$root" "$root/target")
cp "$after" "$work/after"
for round in $(seq "$rounds"); do
    for which in before after; do
        echo "== $which ($([ $which = before ] && echo "$rev" || echo "working tree")), round $round"
        (cd "$root" && "$work/$which" --bench "$filter" 2>&1 | grep -E '^replay/|time:')
    done
done
