#!/usr/bin/env python3
"""The fewest 2 MiB pages any allocator could hold a trace in: for each RMM CSV trace given,
the most, over the trace, of the live bytes in whole pages, with PyTorch's small pool
(rounded requests of at most 1 MiB) counted apart from the large one ("pools apart") and
together ("one pool"). Sizes are rounded up to 512 bytes, as both pools round them. No
allocator that maps 2 MiB pages can hold the trace in fewer pages, wherever it places what,
even one that moves live memory; `cachalot fit` then says how near each config comes.

Usage: page_bound.py TRACE.csv[.gz] ...   (one line per trace: peak requested, both bounds
and their ratio to the peak requested bytes)
"""
import gzip
import sys

PAGE = 2 << 20
SMALL = 1 << 20


def rows(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        header = f.readline().strip().split(",")
        col = {name: i for i, name in enumerate(header)}
        for line in f:
            cells = line.strip().split(",")
            if len(cells) >= len(header):
                yield cells[col["Action"]], cells[col["Pointer"]], int(cells[col["Size"]])


def bound(path):
    live = {}
    small = large = requested = 0
    peak_requested = apart = together = 0
    for action, pointer, size in rows(path):
        if action == "allocate":
            rounded = max(512, -(-size // 512) * 512)
            live[pointer] = (size, rounded)
            requested += size
            if rounded <= SMALL:
                small += rounded
            else:
                large += rounded
        elif pointer in live:
            size, rounded = live.pop(pointer)
            requested -= size
            if rounded <= SMALL:
                small -= rounded
            else:
                large -= rounded
        else:
            continue
        peak_requested = max(peak_requested, requested)
        apart = max(apart, -(-large // PAGE) + -(-small // PAGE))
        together = max(together, -(-(large + small) // PAGE))
    return peak_requested, apart, together


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        peak, apart, together = bound(path)
        ratio = lambda pages: pages * PAGE / max(peak, 1)
        print(f"{path}: peak requested {peak / 2**20:.1f} MiB; pools apart {apart} pages "
              f"({ratio(apart):.4f}x), one pool {together} pages ({ratio(together):.4f}x)")


if __name__ == "__main__":
    main()
