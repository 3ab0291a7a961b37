"""Do cachalot's figures agree with a replay of what it recorded? The history in a snapshot's
`device_traces` (config `record_history:N`) is replayed twice: through a simulated allocator
of the C ABI, read with cachalot_torch's readers (every statistic, the summary table, the
snapshot's segments and history), and through `cachalot replay --json --summary` (peaks,
device allocations and frees, out-of-memory count, the summary at the end of the trace).
`compare` lists each check with both values and the size of any mismatch.

Used by the local test (a simulated allocator stands in for the GPU) and by the GPU check
(native/gpu/pytorch_run.py, after a workload). No torch needed. One device at a time:
`trace_ops(snap, device)` and `compare(..., device=N)` read device N's history and segments,
and `replay_cli(..., device=N)` has the CLI replay device N's history (`--device N`); a
replay's summary (a simulated device is device 0) is compared as if headed device N. A config
of None means $CACHALOT_ALLOC_CONF for both replays.

Invariant: the history is read as the core's trace reader reads it (`alloc` allocates,
`free_requested` frees, `oom` is a skipped failure, zero sizes and frees of unknown addresses
are skipped), and neither replay frees what the trace left live, so all three — the live
allocator, the simulated replay and the CLI's — end in the same state.
"""
import collections
import json
import operator
import os
import subprocess

import cachalot_torch

OOM = "CACHALOT_STATUS_OUT_OF_MEMORY"
END_MARK = "memory summary at the end of the trace (before freeing what it left live):\n"


def trace_ops(snap, device=0):
    """(ops, report): ops are ("alloc", key, size, stream) and ("free", key)."""
    ops, live = [], {}
    report = collections.Counter()
    for e in snap["device_traces"][device]:
        action, addr = e["action"], e.get("addr")
        if action == "alloc":
            if e["size"] == 0:
                report["zero_size"] += 1
                continue
            if addr in live:
                report["implicit_frees"] += 1
                ops.append(("free", live.pop(addr)))
            key = len(ops)
            live[addr] = key
            ops.append(("alloc", key, e["size"], e.get("stream", 0)))
            report["allocs"] += 1
        elif action == "free_requested":
            if addr in live:
                ops.append(("free", live.pop(addr)))
                report["frees"] += 1
            else:
                report["unknown_frees"] += 1
        elif action == "oom":
            report["alloc_failures"] += 1
    report["live_at_end"] = len(live)
    report["entries"] = len(snap["device_traces"][device])
    return ops, dict(report)


def segment_placements(snap, device=0):
    """Where the run's device placed its segments: (address, size) of each `segment_alloc`
    entry of device `device`'s history, in order."""
    return [(e["addr"], e["size"]) for e in snap["device_traces"][device] if e["action"] == "segment_alloc"]


def replay_simulated(lib, ops, config, capacity, placements=()):
    """The figures of a simulated allocator (`capacity` bytes, `config`, None for
    $CACHALOT_ALLOC_CONF) after `ops`; with
    `placements` (from `segment_placements`) its segments go where the run's device put them,
    so best fit breaks ties between equal cached blocks as the run did."""
    handle = lib.new_simulated(capacity, config, placements)
    try:
        addrs, ooms = {}, 0
        for op in ops:
            if op[0] == "alloc":
                try:
                    addrs[op[1]] = lib.malloc(handle, op[2], op[3])
                except cachalot_torch.CachalotError as e:
                    if e.status != OOM:
                        raise
                    ooms += 1
            elif op[1] in addrs:
                lib.free(handle, addrs.pop(op[1]))
        return dict(stats=lib.stats(handle), summary=lib.summary(handle), snapshot=lib.snapshot(handle), ooms=ooms)
    finally:
        lib.free_allocator(handle)


def replay_cli(cli, trace_path, config, capacity, device=None):
    """`cachalot replay TRACE --config C --capacity N [--device D] --json --summary`: its
    JSON report and the summary it prints for the end of the trace. `config` None reads
    $CACHALOT_ALLOC_CONF, as `replay_simulated` does (the CLI itself would take the
    defaults); `device` picks one GPU's history of a snapshot that recorded several."""
    if config is None:
        config = os.environ.get(cachalot_torch.CONFIG_ENV, "")
    cmd = [cli, "replay", trace_path, "--config", config, "--capacity", str(capacity), "--passes", "3",
           "--json", "--summary"]
    if device is not None:
        cmd += ["--device", str(operator.index(device))]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    end = p.stderr.split(END_MARK, 1)
    return dict(json=json.loads(p.stdout), summary_end=end[1] if len(end) == 2 else None, cmd=" ".join(cmd))


def history_capacity(config):
    """record_history's N in `config` (None: $CACHALOT_ALLOC_CONF); 0 when it is off."""
    if config is None:
        config = os.environ.get(cachalot_torch.CONFIG_ENV, "")
    # Read as the core reads it: spaces around keys and values allowed, the last value wins.
    values = [v for k, v in cachalot_torch._config_pairs(config) or [] if k == "record_history"]
    try:
        return int(values[-1]) if values else 0
    except ValueError:  # the core refuses such a config before anything is recorded
        return 0


def _segment_key(s):
    blocks = tuple((b["size"], b["requested_size"], b["state"]) for b in s["blocks"])
    return (s["segment_type"], s["is_expandable"], s["stream"], s["total_size"], s["allocated_size"],
            s["active_size"], s["requested_size"], blocks)


def _history_key(entries):
    # A missing stream is the default stream, as trace_ops reads it.
    return [(e["action"], e["size"], e.get("stream", 0)) for e in entries]


def _check(name, ours, theirs, ok=None, detail=""):
    ok = (ours == theirs) if ok is None else ok
    if not ok and not detail and isinstance(ours, int) and isinstance(theirs, int):
        detail = f"differs by {ours - theirs:+d}"
    return dict(check=name, ok=bool(ok), ours=ours, theirs=theirs, detail=detail)


def _lines_differing(a, b):
    a, b = (a or "").rstrip("\n").split("\n"), (b or "").rstrip("\n").split("\n")
    return sum(1 for x, y in zip(a, b) if x != y) + abs(len(a) - len(b))


def as_device(summary, device):
    """A replay's summary (a simulated device reports device ID 0) headed as device `device`'s."""
    return summary if summary is None or device == 0 else summary.replace(
        f"device ID {0:<21}", f"device ID {device:<21}", 1)


def compare(figures, config, sim=None, cli=None, device=0):
    """Checks of `figures` (dict stats, summary, snapshot: what cachalot_torch read from the
    live allocator of CUDA device `device`) against the simulated replay `sim` and the CLI's
    `cli` of that device's history. Each check: {check, ok, ours, theirs, detail}; `ours` is
    the live allocator's value."""
    stats, summary, snap = figures["stats"], figures["summary"], figures["snapshot"]
    entries = snap["device_traces"][device]
    checks = []
    cap = history_capacity(config)
    if cap == 0:
        history_detail = "history not recorded (record_history off in the config)"
    elif len(entries) >= cap:
        history_detail = "history full: oldest dropped"
    else:
        history_detail = "" if entries else "history empty"
    checks.append(_check("history complete (entries < record_history)", len(entries), cap,
                         ok=0 < len(entries) < cap, detail=history_detail))
    segs = [s for s in snap["segments"] if s["device"] == device]
    blocks = [b for s in segs for b in s["blocks"]]
    checks.append(_check("snapshot allocated bytes = allocated_bytes.all.current",
                         sum(s["allocated_size"] for s in segs), stats["allocated_bytes.all.current"]))
    checks.append(_check("snapshot allocated blocks = allocation.all.current",
                         sum(b["state"] == "active_allocated" for b in blocks), stats["allocation.all.current"]))
    mapped, reserved = sum(s["total_size"] for s in segs), stats["reserved_bytes.all.current"]
    paged = any(s["is_expandable"] for s in segs)
    checks.append(_check("snapshot segment bytes = reserved_bytes.all.current" + (" (<=: kept pages)" if paged else ""),
                         mapped, reserved, ok=mapped == reserved or (paged and mapped <= reserved)))
    if sim is not None:
        diff = [k for k in stats if stats[k] != sim["stats"].get(k)]
        checks.append(_check("memory_stats = simulated replay's (all keys)", len(stats) - len(diff), len(stats),
                             detail=f"{len(diff)} of {len(stats)} keys differ: " * bool(diff)
                             + "; ".join(f"{k}: {stats[k]} vs {sim['stats'].get(k)}" for k in diff[:6])))
        n = _lines_differing(summary, as_device(sim["summary"], device))
        checks.append(_check("memory_summary = simulated replay's", n, 0, detail=f"{n} lines differ" if n else ""))
        ours_segs = sorted(map(_segment_key, segs))
        sim_segs = sorted(map(_segment_key, sim["snapshot"]["segments"]))
        sim_set = set(sim_segs)
        same = sum(1 for k in ours_segs if k in sim_set)
        checks.append(_check("snapshot segments = simulated replay's (sizes, blocks, states)", len(ours_segs),
                             len(sim_segs), ok=ours_segs == sim_segs,
                             detail="" if ours_segs == sim_segs else f"{same} of {len(ours_segs)} segments match"))
        sim_hist = _history_key(sim["snapshot"]["device_traces"][0])
        ours_hist = _history_key(entries)
        first = next((i for i, (x, y) in enumerate(zip(ours_hist, sim_hist)) if x != y), None)
        checks.append(_check("snapshot history = simulated replay's (actions, sizes)", len(ours_hist), len(sim_hist),
                             ok=ours_hist == sim_hist,
                             detail="" if ours_hist == sim_hist else f"first difference at entry {first}"))
    if cli is not None:
        j = cli["json"]
        for key, stat in [("peak_reserved_bytes", "reserved_bytes.all.peak"),
                          ("peak_allocated_bytes", "allocated_bytes.all.peak"),
                          ("peak_requested_bytes", "requested_bytes.all.peak"),
                          ("device_allocs", "num_device_alloc"), ("device_frees", "num_device_free"),
                          ("ooms", "num_ooms")]:
            checks.append(_check(f"{stat} = cachalot replay's {key}", stats[stat], j[key]))
        n = _lines_differing(summary, as_device(cli["summary_end"], device))
        checks.append(_check("memory_summary = cachalot replay's summary at the end", n, 0,
                             detail=f"{n} lines differ" if n else ""))
    return checks
