"""A PyTorch memory snapshot's history written as RAPIDS RMM's logging CSV, pointers only.

    python3 native/gpu/snapshot_csv.py SNAPSHOT[.json|.json.gz] OUT.csv[.gz] [DEVICE]

One row per allocation and per free, where the program called (`alloc`, `free_requested`);
`segment_alloc` and the other entries are dropped. A row's time is when the allocator acted:
an allocation's its own, a free's that of its `free_completed`, when its memory could be
reused. For a block used on another stream (`record_stream`) that is later than the
allocations after it; `cachalot replay` reads such a row back as a free that waited
(core/src/trace/late_frees.rs), counted freed at its row and reused only from its time, so
the CSV replays to the run's own peak allocated bytes as well as its reserved bytes. A free
still waiting when the history ended gets a time past the history's last; a history
without `free_completed` entries (older PyTorch) keeps the request's time. Needs no
PyTorch; workloads.py writes its traces with it.
"""
import gzip, json, sys

HEADER = "Thread,Time,Action,Pointer,Size,Stream"


def csv_rows(events):
    """The CSV's data rows for one device's `device_traces` list."""
    end = max((e.get("time_us", 0) for e in events), default=0) + 1
    back, asked = {}, {}  # free_requested index -> free_completed time; addr -> index waiting
    for i, e in enumerate(events):
        if e.get("action") == "free_requested":
            asked[e.get("addr", 0)] = i
        elif e.get("action") == "free_completed" and e.get("addr", 0) in asked:
            back[asked.pop(e.get("addr", 0))] = e.get("time_us", 0)
    completes = any(e.get("action") == "free_completed" for e in events)
    live, rows = {}, []
    for i, e in enumerate(events):
        a, addr, time = e.get("action"), e.get("addr", 0), e.get("time_us", 0)
        if a == "alloc":
            live[addr] = e["size"]
            rows.append(f"0,{time},allocate,{addr:#x},{e['size']},{e.get('stream', 0):#x}")
        elif a == "free_requested" and addr in live:
            if completes:
                time = back.get(i, end)
            rows.append(f"0,{time},free,{addr:#x},{live.pop(addr)},{e.get('stream', 0):#x}")
    return rows


def write(path, rows):
    """Writes the header and rows, gzipped when `path` ends in .gz."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as fh:
        fh.write(HEADER + "\n")
        fh.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    src, out = sys.argv[1], sys.argv[2]
    device = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as fh:
        snapshot = json.load(fh)
    write(out, csv_rows(snapshot["device_traces"][device]))
