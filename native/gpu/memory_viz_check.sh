#!/usr/bin/env bash
# Opens snapshots written by `cachalot replay --snapshot` with PyTorch's own memory_viz tools,
# on a machine with PyTorch (the H200), from the repo root:
#
#   OUT=dir bash native/gpu/memory_viz_check.sh FILE.pickle...
#
# Make the files here first, e.g.
#   target/release/cachalot replay native/cli/tests/fixtures/pytorch_snapshot.pickle --snapshot target/vizcheck/fixture_replayed.pickle
#   target/release/cachalot replay mixed_fc_conv --config policy:pytorch --snapshot target/vizcheck/mixed_replayed.pickle
# and carry target/vizcheck. For each file: `python3 -m torch.cuda._memory_viz` trace_plot,
# segment_plot and stats, each of which must exit 0 and (for the plots) write a page that embeds
# the snapshot. Exit 0 when all did.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
failed=0
for f in "$@"; do
    name=$(basename "$f" .pickle)
    for tool in trace_plot segment_plot; do
        if python3 -m torch.cuda._memory_viz "$tool" "$f" -o "$OUT/$name.$tool.html" > "$OUT/$name.$tool.log" 2>&1 &&
            [ -s "$OUT/$name.$tool.html" ]; then
            echo "ok   $tool $f ($(wc -c < "$OUT/$name.$tool.html") bytes)"
        else
            echo "FAIL $tool $f: $(tail -n 3 "$OUT/$name.$tool.log")"; failed=1
        fi
    done
    if python3 -m torch.cuda._memory_viz stats "$f" > "$OUT/$name.stats.txt" 2>&1; then
        echo "ok   stats $f: $(head -n 3 "$OUT/$name.stats.txt" | tr '\n' ' ')"
    else
        echo "FAIL stats $f: $(tail -n 3 "$OUT/$name.stats.txt")"; failed=1
    fi
done
exit $failed
