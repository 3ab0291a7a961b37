#!/usr/bin/env python3
"""Writes a long RMM CSV trace: a reference trace's steps repeated, as a training run repeats them.

Each repetition is the reference trace's rows with their times moved past the previous
repetition's last; the allocations a repetition leaves live are freed at its end, so the next one
starts with nothing allocated and reuses the same pointers, as PyTorch's allocator hands a
training loop the same addresses step after step. The file grows with ROWS while the blocks live
at once stay those of one repetition: the input for checking that a replay's memory follows live
blocks, not the file's length (docs/reliability.md, "Untrusted files").

Usage: long_trace.py ROWS [REFERENCE.csv.gz] > long.csv
(default reference: traces/gpt2_train.csv.gz; 10,000,000 rows make a 523 MB file)
"""
import gzip
import os
import sys


def main():
    rows = int(sys.argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    reference = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "../../../traces/gpt2_train.csv.gz")
    lines = gzip.open(reference, "rt").read().splitlines()
    header, body = lines[0], [l.split(",") for l in lines[1:] if l.strip()]
    columns = [c.strip() for c in header.split(",")]
    time, action, pointer = columns.index("Time"), columns.index("Action"), columns.index("Pointer")
    t0, t1 = int(body[0][time]), int(body[-1][time])
    out = sys.stdout
    out.write(header + "\n")
    written, shift = 0, 0
    while written < rows:
        live = {}
        for fields in body:
            if written == rows:
                break
            fields = list(fields)
            fields[time] = str(int(fields[time]) + shift)
            if fields[action] == "allocate":
                live[fields[pointer]] = fields
            elif fields[action] == "free":
                live.pop(fields[pointer], None)
            out.write(",".join(fields) + "\n")
            written += 1
        shift += t1 - t0 + 1
        for fields in live.values():
            if written == rows:
                break
            fields = list(fields)
            fields[action], fields[time] = "free", str(t0 + shift - 1)  # the repetition's last time
            out.write(",".join(fields) + "\n")
            written += 1


if __name__ == "__main__":
    main()
