#!/usr/bin/env python3
"""Writes an RMM CSV trace that runs a recorded trace's repeating stretch again and again: the
requests before request FIRST once (a server's weights, loaded once), then requests FIRST to
FIRST+PERIOD, with their frees, N times, each copy PERIOD's operations after the one before.
A block of the stretch freed after the stretch's end is freed at the same point of a later
copy; one whose free would come after the last copy's end stays live, as in the recording.

The input is `trace_ops`'s output (`cargo run --release -p cachalot-cli --example trace_ops
TRACE`), so snapshots and CSV traces alike; sizes are kept, pointers are made up (replay with
--no-follow-addresses).

Usage: repeat_period.py OPS FIRST PERIOD N OUT.csv.gz
Example (the serving loop's recorded trace repeats every 75,552 requests from its 76th):
  target/release/examples/trace_ops native/gpu/results/serving_trace_h100.snapshot.json.gz > ops
  repeat_period.py ops 75 75552 12 serving_12.csv.gz
  target/release/cachalot replay --json --no-follow-addresses serving_12.csv.gz
"""
import gzip
import sys


def requests(path):
    """Each request as [op made, op freed or None, size], in order of making."""
    made, slots = [], {}
    with open(path) as f:
        header = f.readline().split()
        if header[:2] != ["cachalot-ops", "1"]:
            sys.exit(f"{path}: not trace_ops output")
        for op, line in enumerate(f):
            cells = line.split()
            try:
                if cells[0] == "a":
                    slots[cells[1]] = len(made)
                    made.append([op, None, int(cells[2])])
                else:
                    made[slots.pop(cells[1])][1] = op
            except (IndexError, KeyError, ValueError):
                sys.exit(f"{path}, line {op + 2}: not an allocation or a free of a live slot: {line.strip()[:80]}")
    return made


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    path, first, period, copies, out = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    made = requests(path)
    if not 0 <= first or first + period >= len(made) or copies < 1:
        sys.exit(f"{path} has {len(made)} requests: FIRST + PERIOD must be fewer, N at least 1")
    start, end = made[first][0], made[first + period][0]
    ops = end - start
    events = []  # (op, order, action, id, size): frees before makings at one op
    for i, (born, died, size) in enumerate(made[:first]):
        events.append((born, 1, "allocate", i, size))
        if died is not None:
            events.append((died, 0, "free", i, size))
    for copy in range(copies):
        for i in range(first, first + period):
            born, died, size = made[i]
            key = first + copy * period + (i - first)
            events.append((born + copy * ops, 1, "allocate", key, size))
            # A free that would come after the last copy's end stays out: live, as recorded.
            if died is not None and died + copy * ops < start + copies * ops:
                events.append((died + copy * ops, 0, "free", key, size))
    events.sort()
    with gzip.open(out, "wt") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for n, (_, _, action, key, size) in enumerate(events):
            f.write(f"0,{n + 1},{action},0x{(key + 1) << 12:x},{size},0x0\n")


if __name__ == "__main__":
    main()
