"""Summarises a run of native/gpu/run.sh: reads the step outputs in WORK, prints the summary
(tables, then one PASS/FAIL line per requirement, then the verdict) and writes summary.md,
benchmarks.md (ready for docs/benchmarks.md) and results.json into RESULTS.

usage: python3 summarize.py WORK RESULTS TRACE...
Exit 0 when every requirement passed.
"""
import json, os, sys

work, results, traces = sys.argv[1], sys.argv[2], sys.argv[3:]


def read(name, default=""):
    try:
        with open(os.path.join(work, name)) as fh:
            return fh.read()
    except OSError:
        return default


def result_lines(name):
    out = []
    for line in read(name).splitlines():
        if line.startswith("RESULT "):
            try:
                out.append(json.loads(line[len("RESULT "):]))
            except ValueError:
                pass
    return out


def last_json(name):
    for line in reversed(read(name).splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


meta = dict(l.split("=", 1) for l in read("meta.txt").splitlines() if "=" in l)
checks, rows, data = [], [], dict(meta=meta, traces={})


def requirement(name, ok, detail):
    checks.append((name, "PASS" if ok is True else ("FAIL" if ok is False else ok), detail))


for t in traces:
    check = (result_lines(f"{t}.check.log") or [None])[-1]
    cli = last_json(f"{t}.cli.json")
    torch = last_json(f"{t}.torch.log")
    data["traces"][t] = dict(check=check, cli=cli, torch=torch)
    if check is None:
        requirement(f"{t}: replay with real memory", False, "no result (see gpu_check.log)")
        rows.append(f"| {t} | – | – | – | – | – | – | – | – |")
        continue
    requirement(f"{t}: replay with real memory", check["gpu_ooms"] == 0 and check["emptied"],
                f"{check['ops']} ops, {check['gpu_ooms']} out of memory, empty_cache returned every segment: {check['emptied']}")
    requirement(f"{t}: no overlap", check["overlaps"] == 0 and check["violations"] == 0,
                f"{check['overlaps']} address overlaps, {check['violations']} of {check['verified_frees']} frees failed the byte check")
    same = check["gpu_peak_reserved"] == check["sim_peak_reserved"] and check["gpu_device_allocs"] == check["sim_device_allocs"]
    cli_same = cli is not None and cli.get("peak_reserved_bytes") == check["sim_peak_reserved"] and cli.get("device_allocs") == check["sim_device_allocs"]
    detail = (f"peak reserved {check['gpu_peak_reserved']} vs {check['sim_peak_reserved']} bytes, device allocations "
              f"{check['gpu_device_allocs']} vs {check['sim_device_allocs']}")
    if check["first_divergence_op"] >= 0:
        detail += f"; first divergence at op {check['first_divergence_op']}"
    requirement(f"{t}: GPU = simulated replay", same, detail)
    requirement(f"{t}: C-ABI replay = cachalot CLI", cli_same if cli is not None else "SKIPPED",
                "CLI " + (f"{cli.get('peak_reserved_bytes')} bytes, {cli.get('device_allocs')} device allocations" if cli else "did not run"))
    ns = check["ns_per_op_warm_median"]
    torch_ns = torch.get("ns_per_op_warm_median") if torch else None
    if torch_ns:
        requirement(f"{t}: faster than PyTorch", ns < torch_ns, f"{ns:.1f} vs {torch_ns:.1f} ns/op")
    else:
        requirement(f"{t}: faster than PyTorch", False, "PyTorch's replay did not run (see gpu_check.log)")
    torch_resv = torch.get("peak_reserved") if torch else None
    rows.append("| {} | {:,} | {:.1f} | {} | {:.1f} | {} | {:.2f} GiB | {} | {} |".format(
        t, check["ops"], ns, f"{torch_ns:.1f}" if torch_ns else "–", check["sim_ns_per_op_warm_median"],
        f"{torch_ns / ns:.1f}x" if torch_ns else "–", check["gpu_peak_reserved"] / 2**30,
        f"{torch_resv / 2**30:.2f} GiB" if torch_resv else "–", check["gpu_device_allocs"]))

san = read("sanitizer.status", "SKIPPED did not run").strip().split(" ", 1)
requirement("compute-sanitizer memcheck", {"PASS": True, "FAIL": False}.get(san[0], san[0]), san[1] if len(san) > 1 else "")
data["sanitizer"] = " ".join(san)

contention = result_lines("contention.log")
data["contention"] = contention
requirement("contention benchmark", True if contention else "SKIPPED" if not read("contention.log") else False,
            f"{len(contention)} thread counts measured")
per_stream = result_lines("contention_per_stream.log")
data["contention_per_stream"] = per_stream
if per_stream:
    single = per_stream[0]["mops_per_s"]
    worst = min(per_stream, key=lambda c: c["mops_per_s"])
    requirement("a lock per stream: total throughput never below one thread's", worst["mops_per_s"] >= single,
                f"lowest {worst['mops_per_s']:.2f} Mops/s at {worst['threads']} threads, one thread {single:.2f}")
else:
    requirement("a lock per stream: contention benchmark", "SKIPPED" if not read("contention_per_stream.log") else False,
                "no result")

plugin = last_json("plugin.log")
data["plugin"] = plugin
if plugin is None:
    requirement("PyTorch plug-in (CUDAPluggableAllocator)", "SKIPPED" if not read("plugin.log") else False, "no result")
else:
    requirement("PyTorch plug-in (CUDAPluggableAllocator)", plugin.get("ok") is True,
                f"loss {plugin.get('first_loss')} -> {plugin.get('last_loss')}, side stream ok: {plugin.get('side_stream_ok')}, "
                f"last error: '{plugin.get('last_error')}'")

parity = [l for l in read("stats_parity.log").splitlines() if " differences (" in l and " scenarios" in l]
if not parity:
    requirement("statistics, summary, segments and history = PyTorch's (stats_parity.py)",
                "SKIPPED" if not read("stats_parity.log") else False, "no result")
else:
    requirement("statistics, summary, segments and history = PyTorch's (stats_parity.py)",
                parity[-1].startswith("0 differences"), parity[-1])

env = f"{meta.get('gpu', '?')}, driver {meta.get('driver', '?')}, {meta.get('nvcc', '?')}, torch {meta.get('torch', '?')}"
table = [
    f"Device: {env}. cachalot config `{meta.get('config', '?')}`; PyTorch default config. "
    f"Warm cache, median of {meta.get('passes', '?')} passes (cachalot) and {meta.get('torch_passes', '?')} (PyTorch).",
    "",
    "| trace | ops | cachalot ns/op (C ABI, real memory) | PyTorch ns/op | cachalot ns/op (simulated device) | PyTorch / cachalot | cachalot peak reserved | PyTorch peak reserved | cachalot device allocs |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
] + rows
def contention_table(measured):
    base = measured[0]["mops_per_s"]
    rows = ["| threads | wall ms | total Mops/s | ns/op per thread | throughput vs 1 thread |", "|---:|---:|---:|---:|---:|"]
    return rows + [f"| {c['threads']} | {c['wall_ms']:.1f} | {c['mops_per_s']:.2f} | {c['ns_per_op_per_thread']:.1f} | "
                   f"{c['mops_per_s'] / base:.2f}x |" for c in measured]


cont = []
for measured, how in ((contention, "one lock"), (per_stream, "a lock per stream")):
    if measured:
        cont += ["", f"## Contention: threads sharing one allocator, {how} ({meta.get('contention_trace', '?')}, a stream each)", ""]
        cont += contention_table(measured)
states = {s for _, s, _ in checks}
verdict = "FAIL" if "FAIL" in states else "PASS" if states == {"PASS"} else "INCOMPLETE"
lines = ["## Time per operation, real memory, warm cache", ""] + table
lines += cont
lines += ["", "## Checks", "", "| check | result | detail |", "|---|---|---|"]
lines += [f"| {n} | {s} | {d} |" for n, s, d in checks]
lines += ["", f"VERDICT: {verdict}"]
text = "\n".join(lines)

os.makedirs(results, exist_ok=True)
with open(os.path.join(results, "summary.md"), "w") as fh:
    fh.write(text + "\n")
with open(os.path.join(results, "results.json"), "w") as fh:
    json.dump(dict(data, checks=checks, verdict=verdict), fh, indent=1)
with open(os.path.join(results, "benchmarks.md"), "w") as fh:
    fh.write("## cachalot through the C ABI on real memory vs PyTorch's allocator\n\n"
             f"Measured {meta.get('date', '?')} with `bash native/gpu/run.sh` (after `make gpu-build`), one device run "
             "for both allocators.\n\n" + "\n".join(table) + "\n")
    if cont:
        fh.write("\n### Threads sharing one allocator\n\n" + "\n".join(cont) + "\n")
print(text)
sys.exit(0 if verdict == "PASS" else 1)
