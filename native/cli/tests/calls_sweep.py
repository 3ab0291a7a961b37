#!/usr/bin/env python3
"""Driver calls of cachalot's policy over a range of device sizes: for each RMM CSV trace given,
`cachalot replay --capacity SIZE --passes 4 --json` on devices from 1.000 to 1.045 times the
trace's peak requested bytes (steps of 0.0025, rounded down to 2 MiB), one line per device (the
first pass's driver calls, each warm pass's, and the out-of-memory events of the first pass and
of the warm passes), then per trace the sum of the warm passes' calls and the busiest warm pass
over the devices where the first pass fits. A policy change that moves fewer pages on the device
it was tried on may move more on the next: this is how the changes of docs/log (2026-12-07,
eleventh session) were judged.

Usage: calls_sweep.py CACHALOT_BINARY TRACE.csv[.gz] ...   (decoding traces: decode_trace.py)
"""
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

PAGE = 2 << 20
DRIVER = ("allocations", "frees", "vm_creates", "vm_maps", "vm_unmaps", "vm_destroys")


def replay(binary, trace, capacity=None):
    size = ["--capacity", f"{capacity}B"] if capacity else []
    run = subprocess.run([binary, "replay", trace, *size, "--passes", "4", "--json"], capture_output=True, text=True)
    # Exit status 3: the replay ran out of memory, and says where in its JSON.
    if run.returncode not in (0, 3):
        sys.exit(f"cachalot replay {trace} failed: {run.stderr.strip()}")
    return json.loads(run.stdout)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, traces = sys.argv[1], sys.argv[2:]
    peaks = {t: replay(binary, t)["peak_requested_bytes"] for t in traces}
    jobs = [(t, 1 + 0.0025 * i) for t in traces for i in range(19)]
    caps = {(t, x): int(peaks[t] * x) // PAGE * PAGE for t, x in jobs}
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda j: replay(binary, j[0], caps[j]), jobs))
    totals = {}
    for (t, x), d in zip(jobs, results):
        cold = sum(d["device_calls_cold"][k] for k in DRIVER)
        warm = d["driver_calls_passes"]
        print(f"{t} {x:.4f} cold {cold} warm {warm} ooms {d['ooms']} warm_pass_ooms {d['warm_pass_ooms']}")
        if d["ooms"] == 0:
            s = totals.setdefault(t, [0, 0])
            s[0] += sum(warm)
            s[1] = max(s[1], max(warm))
    for t, (warm, busiest) in totals.items():
        print(f"{t}: warm passes' calls {warm}, busiest warm pass {busiest}")


if __name__ == "__main__":
    main()
