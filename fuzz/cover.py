#!/usr/bin/env python3
"""Picks the committed corpus of a fuzz target: a greedy set cover of the edges its inputs reach.

libFuzzer's merge (`cargo fuzz cmin`) keeps every input that adds a feature, in size order, which
leaves hundreds of files; this keeps, most new edges first, at most LIMIT inputs and says how many
of all the edges they still reach. Feed it the control file of a merge run with edge coverage only:

    target/x86_64-unknown-linux-gnu/release/TARGET -merge=1 -use_counters=0 \
        -merge_control_file=/tmp/ctl EMPTY_DIR corpus-raw/TARGET seeds/TARGET
    python3 cover.py /tmp/ctl corpus/TARGET 200
"""
import os
import shutil
import sys


def main(control, out_dir, limit):
    lines = open(control).read().split("\n")
    count = int(lines[0])
    files = lines[2 : 2 + count]
    edges = {}
    for line in lines[2 + count :]:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "COV":
            edges[int(parts[1])] = set(map(int, parts[2:]))
    every = set().union(*edges.values()) if edges else set()
    chosen, covered = [], set()
    while covered != every and len(chosen) < limit:
        best = max(edges, key=lambda i: (len(edges[i] - covered), -os.path.getsize(files[i])))
        if not edges[best] - covered:
            break
        chosen.append(best)
        covered |= edges[best]
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    for i in chosen:
        shutil.copy(files[i], os.path.join(out_dir, os.path.basename(files[i])))
    size = sum(os.path.getsize(files[i]) for i in chosen)
    print(f"{len(files)} inputs reach {len(every)} edges; kept {len(chosen)} ({size} bytes) reaching {len(covered)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 200)
