"""PyTorch's own statistics beside cachalot's, for short scripted scenarios.

Each scenario is a config and a list of steps (allocate on the default or a side stream, use
a block on the side stream, wait for the GPU, free, empty the cache, set the memory fraction,
read the statistics). Two halves:

  python3 native/gpu/stats_parity.py torch OUT.json [--every-step] [SCENARIO ...]
      on a GPU with PyTorch: runs every scenario (or those named) through PyTorch's own
      caching allocator, each in a process of its own (PYTORCH_CUDA_ALLOC_CONF is read once),
      and writes the 122 statistics, memory_summary() and the snapshot's segments read at
      each `stats` step (after every step with --every-step), the memory history (actions,
      sizes, streams, addresses), the GPU's total memory and where it put each segment;
  python3 native/gpu/stats_parity.py cachalot IN.json
      anywhere: replays the same steps on cachalot's simulated allocator (C ABI,
      `policy:pytorch` plus the scenario's config, the GPU's total memory as capacity, each
      segment where the GPU put PyTorch's: best fit breaks ties by address) and prints every
      statistic that differs; exit status 1 if any does.

The recorded figures of one H200 run are kept in `native/gpu/results/stats_parity_h200.json.gz`,
so `make python-test` compares cachalot with them on every run.
"""
import ctypes
import gzip
import json
import os
import random
import subprocess
import sys

MiB = 1 << 20
OOM_STATUS = "CACHALOT_STATUS_OUT_OF_MEMORY"
SIDE_STREAM = 0x5EED  # the simulated device's handle for the side stream (any but 0)


def mixed_steps(seed, count, sizes):
    """Allocations and frees of `sizes`, at random, a cache emptied now and then."""
    rng = random.Random(seed)
    steps, live, next_id = [], [], 0
    for i in range(count):
        if live and rng.random() < 0.45:
            steps.append(("free", live.pop(rng.randrange(len(live)))))
        else:
            steps.append(("malloc", next_id, rng.choice(sizes)))
            live.append(next_id)
            next_id += 1
        if i % 97 == 96:
            steps.append(("empty_cache",))
        if i % 50 == 49:
            steps.append(("stats",))
    steps += [("free", k) for k in live] + [("stats",), ("empty_cache",), ("stats",)]
    return steps


def stream_steps(seed, count, sizes):
    """Allocations on the default stream and a side stream, blocks of the default stream used
    on the side stream too (`record_stream`), frees; every allocation waits for the GPU first,
    so the events a free records have completed when the allocation looks at them, on the GPU
    as on the simulated device."""
    rng = random.Random(seed)
    steps, live, next_id = [], [], 0
    for i in range(count):
        r = rng.random()
        if live and r < 0.4:
            steps.append(("free", live.pop(rng.randrange(len(live)))[0]))
        elif live and r < 0.55:
            mine = [k for k, side in live if not side]
            if mine:
                steps.append(("record", rng.choice(mine)))
        else:
            side = rng.random() < 0.4
            steps += [("sync",), ("malloc", next_id, rng.choice(sizes)) + (("side",) if side else ())]
            live.append((next_id, side))
            next_id += 1
        if i % 40 == 39:
            steps.append(("stats",))
        if i % 113 == 112:
            steps.append(("empty_cache",))
    steps += [("free", k) for k, _ in live] + [("stats",), ("sync",), ("empty_cache",), ("stats",)]
    return steps


SIZES = [512, 1000, 4096, MiB - 1, MiB, 3 * MiB // 2, 3 * MiB, 10 * MiB, 25 * MiB, 100 * MiB, 300 * MiB]
LARGE_SIZES = SIZES + [600 * MiB, 1000 * MiB, 1500 * MiB]

# Sizes written as ("T", f) are f times the GPU's total memory, rounded down to 512 bytes.
SCENARIOS = {
    # A fraction of 1.0: is it a limit (garbage collection on) or none?
    "gc_threshold_fraction_1.0": ("garbage_collection_threshold:0.3", [
        ("fraction", 1.0), ("malloc", 0, ("T", 0.4)), ("free", 0), ("malloc", 1, ("T", 0.5)), ("stats",),
        ("free", 1), ("stats",)]),
    "gc_threshold_fraction_0.99": ("garbage_collection_threshold:0.3", [
        ("fraction", 0.99), ("malloc", 0, ("T", 0.4)), ("free", 0), ("malloc", 1, ("T", 0.5)), ("stats",),
        ("free", 1), ("stats",)]),
    # Segments, device calls and unmaps under expandable segments.
    "expandable_small_and_large": ("expandable_segments:True", [
        ("malloc", 0, 30 * MiB), ("malloc", 1, 1000), ("stats",), ("free", 0), ("free", 1), ("empty_cache",),
        ("stats",)]),
    "expandable_one_block_of_three_pages": ("expandable_segments:True", [
        ("malloc", 0, 60 * MiB), ("stats",), ("free", 0), ("empty_cache",), ("stats",)]),
    # max_split_size as the statistic reports it, for sizes past i64.
    "max_split_size_2^43_mb": ("max_split_size_mb:8796093022208", [("malloc", 0, 4096), ("stats",)]),
    "max_split_size_u64_max_mb": ("max_split_size_mb:18446744073709551615", [("malloc", 0, 4096), ("stats",)]),
    # Longer mixes under each of PyTorch's configs.
    "mixed_default": ("", mixed_steps(1, 300, SIZES)),
    "mixed_expandable": ("expandable_segments:True", mixed_steps(2, 300, SIZES)),
    "mixed_max_split_64": ("max_split_size_mb:64", mixed_steps(3, 300, SIZES)),
    "mixed_roundup": ("roundup_power2_divisions:4", mixed_steps(4, 300, SIZES)),
    "mixed_gc_fraction_0.5": ("garbage_collection_threshold:0.6", [("fraction", 0.5)] + mixed_steps(5, 300, SIZES)),
    "mixed_max_split_128_roundup": ("max_split_size_mb:128,roundup_power2_divisions:[256:2,>:8]",
                                    mixed_steps(6, 300, SIZES)),
    "mixed_gc_fraction_0.3": ("garbage_collection_threshold:0.5", [("fraction", 0.3)] + mixed_steps(7, 300, SIZES)),
    "mixed_expandable_max_split": ("expandable_segments:True,max_split_size_mb:40", mixed_steps(8, 300, SIZES)),
    # A side stream, and blocks used on it (record_stream): frees wait for its events.
    "record_stream_one_block": ("", [
        ("malloc", 0, 10 * MiB), ("record", 0), ("malloc", 1, 3 * MiB, "side"), ("stats",), ("free", 0), ("stats",),
        ("sync",), ("malloc", 2, 10 * MiB), ("stats",), ("free", 1), ("free", 2), ("empty_cache",), ("stats",)]),
    "mixed_streams": ("", stream_steps(9, 300, SIZES)),
    "mixed_streams_max_split": ("max_split_size_mb:64", stream_steps(10, 300, SIZES)),
    "mixed_streams_expandable": ("expandable_segments:True", stream_steps(11, 300, SIZES)),
    "mixed_max_non_split_rounding": ("max_split_size_mb:64,max_non_split_rounding_mb:128", mixed_steps(12, 300, SIZES)),
    "mixed_expandable_roundup_gc": ("expandable_segments:True,roundup_power2_divisions:[128:4,>:2],"
                                    "garbage_collection_threshold:0.5",
                                    [("fraction", 0.4)] + mixed_steps(13, 300, SIZES)),
    # Many out-of-memory events: a memory fraction of about 3 GB and requests up to 1.5 GB.
    "mixed_out_of_memory": ("", [("fraction", 0.02)] + mixed_steps(14, 300, LARGE_SIZES)),
    "mixed_out_of_memory_max_split": ("max_split_size_mb:100", [("fraction", 0.02)] + mixed_steps(15, 300, LARGE_SIZES)),
    "mixed_out_of_memory_expandable": ("expandable_segments:True",
                                       [("fraction", 0.02)] + mixed_steps(16, 300, LARGE_SIZES)),
    # Out of memory under a memory fraction: the retries and what was freed first.
    "oom_under_fraction": ("", [
        ("fraction", 0.01), ("malloc", 0, 300 * MiB), ("malloc", 1, 25 * MiB), ("free", 1), ("malloc", 2, 10 * MiB),
        ("free", 2), ("malloc", 3, 1400 * MiB), ("stats",), ("malloc", 4, 1000 * MiB), ("stats",)]),
    "oom_under_fraction_max_split": ("max_split_size_mb:20", [
        ("fraction", 0.01), ("malloc", 0, 300 * MiB), ("free", 0), ("malloc", 1, 100 * MiB), ("free", 1),
        ("malloc", 2, 30 * MiB), ("malloc", 3, 1200 * MiB), ("stats",), ("malloc", 4, 1300 * MiB), ("stats",)]),
}


def every_step(steps):
    """`steps` with the statistics read after each one."""
    return [x for step in steps for x in (step, ("stats",)) if step[0] != "stats" or x is step]


def segment_layout(segments):
    """A snapshot's segments as comparable lists: type, size, whether expandable, and each
    block's size, requested size and state, in address order (addresses themselves are left
    out: expandable segments' ranges are reserved wherever the driver has room)."""
    ordered = sorted(segments, key=lambda s: s["address"])
    return [[s["segment_type"], s["total_size"], s["is_expandable"],
             [[b["size"], b["requested_size"], b["state"]] for b in s["blocks"]]] for s in ordered]


def history_of(trace):
    """A memory history's entries as (action, size, stream, address): streams numbered by first
    appearance (their handles differ), addresses kept only for classic segments (an
    expandable segment's range lies wherever the driver had room)."""
    streams = {}
    out = []
    for e in trace:
        stream = streams.setdefault(e["stream"], len(streams))
        # An out-of-memory entry gives the device's free bytes (PyTorch names them
        # device_free), which the driver's own use makes differ from the simulated device's.
        out.append([e["action"], e["size"], stream, None if e["action"] == "oom" else e["addr"]])
    if any(a in ("segment_map", "segment_unmap") for a, *_ in out):
        out = [[a, size, stream, None] for a, size, stream, _ in out]
    return out


def comparable(layout):
    """`layout` without the requested bytes of inactive blocks: PyTorch reports the stale size
    of a cached block's last allocation there, which cachalot does not keep (it reports 0)."""
    return [[*seg[:3], [[size, 0 if state == "inactive" else req, state] for size, req, state in seg[3]]]
            for seg in layout]


def summary_lines(text):
    """memory_summary()'s lines, the title (which names the allocator) left out."""
    return [line for line in text.splitlines() if "memory summary, device ID" not in line]


def size_of(size, total):
    if isinstance(size, (list, tuple)):
        return int(total * size[1]) // 512 * 512
    return size


# ---- PyTorch's side ---------------------------------------------------------------------------

def run_torch_scenario(name, detail):
    import torch

    _, steps = SCENARIOS[name]
    steps = every_step(steps) if detail else steps
    total = torch.cuda.mem_get_info()[1]
    # The history gives where the device put each segment: best fit breaks ties by address,
    # so the replay must put them there too.
    torch.cuda.memory._record_memory_history(context=None, max_entries=1_000_000)
    live, out, summaries, layouts = {}, [], [], []
    side = torch.cuda.Stream()
    for step in steps:
        if step[0] == "malloc":
            stream = side if step[3:] == ("side",) else torch.cuda.current_stream()
            try:
                with torch.cuda.stream(stream):
                    live[step[1]] = torch.empty(size_of(step[2], total), dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError:
                pass
        elif step[0] == "record":
            live[step[1]].record_stream(side)
        elif step[0] == "sync":
            torch.cuda.synchronize()
        elif step[0] == "free":
            live.pop(step[1], None)
        elif step[0] == "empty_cache":
            torch.cuda.empty_cache()
        elif step[0] == "fraction":
            torch.cuda.set_per_process_memory_fraction(step[1])
        elif step[0] == "stats":
            torch.cuda.synchronize()
            out.append(dict(torch.cuda.memory_stats()))
            summaries.append(torch.cuda.memory_summary())
            layouts.append(segment_layout(torch.cuda.memory._snapshot()["segments"]))
    trace = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
    placements = [(e["addr"], e["size"]) for e in trace if e["action"] == "segment_alloc"]
    print(json.dumps({"total": total, "stats": out, "torch": torch.__version__, "every_step": detail,
                      "placements": placements, "summaries": summaries, "layouts": layouts,
                      "history": history_of(trace)}))


def record_torch(path, names, detail):
    results = {}
    for name in names or SCENARIOS:
        conf = SCENARIOS[name][0]
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        if not conf:
            env.pop("PYTORCH_CUDA_ALLOC_CONF")
        run = subprocess.run([sys.executable, __file__, "torch-scenario", name] + ["--every-step"] * detail, env=env,
                             capture_output=True, text=True)
        if run.returncode != 0:
            results[name] = {"error": run.stderr.strip().splitlines()[-1:]}
        else:
            results[name] = json.loads(run.stdout.strip().splitlines()[-1])
        print(name, "error" if "error" in results[name] else "ok", flush=True)
    with (gzip.open if path.endswith(".gz") else open)(path, "wt") as fh:
        json.dump(results, fh, sort_keys=True)


# ---- cachalot's side --------------------------------------------------------------------------

def replay_cachalot(lib, name, total, detail=False, placements=()):
    conf, steps = SCENARIOS[name]
    steps = every_step(steps) if detail else steps
    handle = lib.new_simulated(total, "policy:pytorch,record_history:1000000" + ("," + conf if conf else ""),
                               [tuple(p) for p in placements])
    lib.dll.cachalot_set_memory_fraction.argtypes = [ctypes.c_void_p, ctypes.c_double]
    lib.dll.cachalot_empty_cache.argtypes = [ctypes.c_void_p]
    lib.dll.cachalot_record_stream.argtypes = [ctypes.c_void_p] * 3
    live, out, summaries, layouts = {}, [], [], []
    try:
        for step in steps:
            if step[0] == "sync":
                pass  # the simulated device's events complete as soon as they are asked about
            elif step[0] == "record":
                lib.check("cachalot_record_stream", lib.dll.cachalot_record_stream(handle, live[step[1]], SIDE_STREAM))
            elif step[0] == "malloc":
                stream = SIDE_STREAM if step[3:] == ("side",) else 0
                try:
                    live[step[1]] = lib.malloc(handle, size_of(step[2], total), stream)
                except RuntimeError as e:
                    if getattr(e, "status", None) != OOM_STATUS:
                        raise
            elif step[0] == "free":
                if step[1] in live:
                    lib.free(handle, live.pop(step[1]))
            elif step[0] == "empty_cache":
                lib.check("cachalot_empty_cache", lib.dll.cachalot_empty_cache(handle))
            elif step[0] == "fraction":
                lib.check("cachalot_set_memory_fraction", lib.dll.cachalot_set_memory_fraction(handle, step[1]))
            elif step[0] == "stats":
                out.append(lib.stats(handle))
                summaries.append(lib.summary(handle))
                layouts.append(segment_layout(lib.snapshot(handle)["segments"]))
        history = history_of(lib.snapshot(handle)["device_traces"][0])
    finally:
        lib.free_allocator(handle)
    return out, summaries, layouts, history


def load(path):
    """Recorded figures, from a file written by the `torch` half (gzipped if named .gz)."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as fh:
        return json.load(fh)


def differences(lib, recorded):
    """(scenario, stats step, key, PyTorch's value, cachalot's value) for each statistic that
    differs, then the first differing line of each memory_summary and each differing layout of
    the snapshot's segments, all read at the same steps; a scenario PyTorch refused is skipped."""
    found = []
    for name, rec in sorted(recorded.items()):
        if "error" in rec or name not in SCENARIOS:
            continue
        ours, summaries, layouts, history = replay_cachalot(lib, name, rec["total"], rec.get("every_step", False),
                                                    rec.get("placements", ()))
        for i, (theirs, mine) in enumerate(zip(rec["stats"], ours)):
            for key in sorted(theirs):
                if mine.get(key) != theirs[key]:
                    found.append((name, i, key, theirs[key], mine.get(key)))
        for i, (theirs, mine) in enumerate(zip(rec.get("summaries", []), summaries)):
            for j, (a, b) in enumerate(zip(summary_lines(theirs), summary_lines(mine))):
                if a != b:
                    found.append((name, i, f"memory_summary line {j}", a, b))
                    break
            else:
                if len(summary_lines(theirs)) != len(summary_lines(mine)):
                    found.append((name, i, "memory_summary lines", len(summary_lines(theirs)),
                                  len(summary_lines(mine))))
        for i, (theirs, mine) in enumerate(zip(rec.get("layouts", []), layouts)):
            theirs, mine = comparable(theirs), comparable(mine)
            if theirs != mine:
                found.append((name, i, "snapshot segments", theirs, mine))
        if "history" in rec:
            # PyTorch notes each snapshot taken (each reading here) in its history.
            theirs = [h for h in rec["history"] if h[0] != "snapshot"]
            first = next((j for j, (a, b) in enumerate(zip(theirs, history)) if a != b), None)
            if first is not None:
                found.append((name, first, "history entry", theirs[first], history[first]))
            elif len(theirs) != len(history):
                found.append((name, -1, "history entries", len(theirs), len(history)))
    return found


def main(argv):
    if len(argv) >= 3 and argv[1] == "torch-scenario":
        run_torch_scenario(argv[2], "--every-step" in argv)
    elif len(argv) >= 3 and argv[1] == "torch":
        names = [a for a in argv[3:] if a != "--every-step"]
        unknown = [n for n in names if n not in SCENARIOS]
        if unknown:
            print(f"unknown scenarios: {unknown}; known: {list(SCENARIOS)}", file=sys.stderr)
            return 2
        record_torch(argv[2], names, "--every-step" in argv)
    elif len(argv) == 3 and argv[1] == "cachalot":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        import cachalot_torch

        recorded = load(argv[2])
        found = differences(cachalot_torch.load_library(), recorded)
        for name, i, key, theirs, mine in found:
            print(f"{name} reading #{i}: {key}: PyTorch {theirs}, cachalot {mine}")
        print(f"{len(found)} differences (statistics, memory_summary lines, snapshot segments, history) over "
              f"{len(recorded)} scenarios")
        return 1 if found else 0
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
