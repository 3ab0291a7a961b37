"""The PyTorch check's report: from the runs pytorch_check.py made, the results table (final
loss, wall time, peak reserved per workload and allocator), the agreement of cachalot_torch's
figures with `cachalot replay`, and one PASS/FAIL/SKIPPED line per requirement, then the
verdict. Printed last; written to OUT as summary.md (tables for docs/pytorch.md) and
results.json (every run, every check).

Requirements, per workload: cachalot's runs end normally; final loss equal to PyTorch's
allocator's (or, where kernels are not deterministic, within bf16 noise: relative difference at
most LOSS_NOISE); median wall time at most 1.02x PyTorch's; peak reserved (cachalot's stats)
at most PyTorch's; every agreement check of the recorded run passes (and of the policy:pytorch
run, when it ran). Invariant: a requirement without its runs is SKIPPED, never PASS.
"""
import json
import os
import statistics

LOSS_NOISE = 1e-2
TIME_LIMIT = 1.02
WORKLOADS = ["mixed_fc_conv", "resnet50_train", "gpt2_train"]


def gib(b):
    return "–" if b is None else f"{b / 2**30:.3f} GiB"


def ok_runs(runs, workload, kinds):
    return [r for r in runs if r["workload"] == workload and r["kind"] in kinds and r.get("result")]


def losses(rs):
    return [r["result"]["final_loss"] for r in rs]


def peak(rs, key="reserved_bytes.all.peak"):
    return [r["result"]["stats"][key] for r in rs]


def fmt(values):
    return "[" + ", ".join(f"{v:.6f}" for v in sorted(set(values))) + "]"


def secs(rs):
    return [r["result"]["secs"] for r in rs]


def row(workload, label, rs, native_secs, timed=True):
    if not rs:
        return f"| {workload} | {label} | 0 | – | – | – | – | – | – |"
    ls, ts = losses(rs), secs(rs)
    loss = f"{ls[0]:.6f}" if len(set(ls)) == 1 else f"{min(ls):.6f} – {max(ls):.6f}"
    med = statistics.median(ts)
    wall = f"{med:.2f} ({min(ts):.2f}–{max(ts):.2f})" if len(ts) > 1 else f"{med:.2f}"
    vs = f"{med / statistics.median(native_secs):.3f}x" if native_secs and timed else ("history on" if not timed else "–")
    s = rs[0]["result"]["stats"]
    return (f"| {workload} | {label} | {len(rs)} | {loss} | {wall} | {vs} | {gib(max(peak(rs)))} | "
            f"{gib(max(peak(rs, 'allocated_bytes.all.peak')))} | {s['num_device_alloc']} |")


def report(runs, skipped, out, say):
    reqs, table, agree, mismatches = [], [], [], []

    def requirement(name, state, detail):
        reqs.append((name, {True: "PASS", False: "FAIL"}.get(state, state), detail))

    for w in WORKLOADS:
        native = ok_runs(runs, w, ("native",))
        timed = ok_runs(runs, w, ("cachalot",))
        with_history = ok_runs(runs, w, ("trace",))
        pyt = ok_runs(runs, w, ("pytorch",))
        tried = [r for r in runs if r["workload"] == w and r["allocator"] == "cachalot"]
        failed = [r for r in tried if not r.get("result")]
        n_secs = secs(native)
        table += [row(w, "PyTorch native (default)", native, None),
                  row(w, "cachalot (default: policy:cachalot)", timed, n_secs)]
        table += [row(w, label, rs, n_secs, timed=False) for label, rs in
                  [("cachalot, record_history", with_history), ("cachalot policy:pytorch, record_history", pyt)] if rs]
        requirement(f"{w}: runs to the end with cachalot", "SKIPPED" if not tried else not failed,
                    f"{len(tried) - len(failed)} of {len(tried)} runs" +
                    "".join(f"; {r['label']} r{r['round']}: {r.get('error')}" for r in failed))
        ours = timed + with_history
        if native and ours:
            ref = statistics.median(losses(native))
            rel = max(abs(x - ref) for x in losses(ours)) / max(abs(ref), 1e-12)
            spread = (max(losses(native)) - min(losses(native))) / max(abs(ref), 1e-12)
            equal = set(losses(ours)) == set(losses(native)) and len(set(losses(native))) == 1
            requirement(f"{w}: final loss = PyTorch's", equal or rel <= LOSS_NOISE,
                        (f"equal ({ref:.6f})" if equal else
                         f"cachalot {fmt(losses(ours))} vs native {fmt(losses(native))}: largest "
                         f"relative difference {rel:.2e} (bf16 noise bound {LOSS_NOISE:g}; native's own spread {spread:.2e})"))
        else:
            requirement(f"{w}: final loss = PyTorch's", "SKIPPED", "no pair of runs")
        if native and timed:
            ratio = statistics.median(secs(timed)) / statistics.median(n_secs)
            requirement(f"{w}: wall time <= {TIME_LIMIT}x PyTorch's", ratio <= TIME_LIMIT,
                        f"median {statistics.median(secs(timed)):.2f} s vs {statistics.median(n_secs):.2f} s = "
                        f"{ratio:.3f}x over {len(timed)} + {len(native)} alternating runs")
            worst, best_native = max(peak(ours)), min(peak(native))
            requirement(f"{w}: peak reserved <= PyTorch's", worst <= best_native,
                        f"{gib(worst)} vs {gib(best_native)} ({worst / best_native:.3f}x; {worst} vs {best_native} bytes)")
        else:
            requirement(f"{w}: wall time <= {TIME_LIMIT}x PyTorch's", "SKIPPED", "no pair of runs")
            requirement(f"{w}: peak reserved <= PyTorch's", "SKIPPED", "no pair of runs")
        for label, rs, required in [("record_history (policy:cachalot)", with_history, True),
                                    ("policy:pytorch", pyt, False)]:
            if not rs:
                if required:
                    requirement(f"{w}: stats/summary/snapshot = cachalot replay ({label})", "SKIPPED", "no run")
                continue
            r = rs[0]["result"]
            checks = r.get("checks", [])
            bad = [c for c in checks if not c["ok"]]
            cli = (r.get("cli") or {}).get("report", {})
            agree.append(f"| {w} | `{r['config']}` | {len(checks) - len(bad)}/{len(checks)} | "
                         f"{r['stats']['reserved_bytes.all.peak']} / {cli.get('peak_reserved_bytes', '–')} | "
                         f"{r['stats']['num_device_alloc']} / {cli.get('device_allocs', '–')} | "
                         f"{r['trace'].get('allocs', 0)} allocs, {r['trace'].get('frees', 0)} frees |")
            mismatches += [f"- {w} `{r['config']}`: {c['check']}: {c['ours']} vs {c['theirs']} {c['detail']}" for c in bad]
            if r.get("cli_error"):
                mismatches.append(f"- {w} `{r['config']}`: cachalot replay failed: {r['cli_error']}")
            requirement(f"{w}: stats/summary/snapshot = cachalot replay ({label})", not bad and not r.get("cli_error"),
                        f"{len(checks) - len(bad)} of {len(checks)} checks agree")
        if pyt and native:
            requirement(f"{w}: policy:pytorch peak reserved = PyTorch's (info)", "INFO",
                        f"{peak(pyt)[0]} vs {min(peak(native))} bytes")

    states = {s for _, s, _ in reqs if s != "INFO"}
    verdict = "FAIL" if "FAIL" in states else "PASS" if states == {"PASS"} else "INCOMPLETE"
    any_run = next((r["result"] for r in runs if r.get("result")), {})
    lines = [f"Device: {any_run.get('gpu', '?')}, torch {any_run.get('torch', '?')}, "
             f"{gib(any_run.get('capacity'))} (the --capacity of the replays).", "",
             "| workload | allocator | runs | final loss | wall s, median (min–max) | vs native | peak reserved | "
             "peak allocated | device allocs |", "|---|---|---:|---|---|---:|---:|---:|---:|"] + table
    lines += ["", "Agreement of cachalot_torch's figures with `cachalot replay` of the recorded history "
              "(live / replay):", "",
              "| workload | config | checks agreeing | peak reserved bytes | device allocs | history |",
              "|---|---|---:|---:|---:|---|"] + agree
    if mismatches:
        more = [f"- ... and {len(mismatches) - 20} more (results.json)"] if len(mismatches) > 20 else []
        lines += ["", "Mismatches:"] + mismatches[:20] + more
    if skipped:
        lines += ["", "Skipped (time budget):"] + [f"- {s}" for s in skipped]
    lines += ["", "| requirement | result | detail |", "|---|---|---|"] + [f"| {n} | {s} | {d} |" for n, s, d in reqs]
    lines += ["", f"VERDICT: {verdict}"]
    text = "\n".join(lines)
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump(dict(runs=runs, skipped=skipped, requirements=reqs, verdict=verdict), fh, indent=1)
    say(text)
    return verdict
