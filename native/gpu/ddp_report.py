"""The two-GPU check's report: from the runs ddp_check.py made (each a torchrun launch of
ddp_gpt2.py on every GPU), the results table — final loss (rank 0's and the mean over ranks),
wall time, peak reserved and allocated per rank, per allocator — then one PASS/FAIL/SKIPPED line
per requirement and the verdict. Printed last; written to OUT as summary.md (the table for
docs/pytorch.md) and results.json (every run, every rank, every requirement).

Requirements: every cachalot run ends normally on every rank; at least REPS_NEEDED timed runs of
each allocator; final loss (rank 0's and the mean) equal to PyTorch's allocator's, or within bf16
noise (relative difference at most LOSS_NOISE, the bound the one-GPU check uses); per rank,
cachalot's peak reserved (largest over its runs) at most PyTorch's (smallest over its runs);
median wall time at most TIME_LIMIT x PyTorch's. Invariant: a requirement without its runs is
SKIPPED, never PASS; runs that failed count for nothing but the first requirement.
"""
import json
import os
import statistics

LOSS_NOISE = 1e-2
TIME_LIMIT = 1.02
REPS_NEEDED = 3
ALLOCATORS = (("native", "PyTorch native (default)"), ("cachalot", "cachalot (default: policy:cachalot)"))


def gib(b):
    return "–" if b is None else f"{b / 2**30:.3f} GiB"


def ok_runs(runs, kind):
    return [r for r in runs if r["kind"] == kind and r.get("ranks")]


def ranks_of(runs):
    return sorted({rk["rank"] for r in runs for rk in r["ranks"]})


def rank(run, r):
    return next(x for x in run["ranks"] if x["rank"] == r)


def loss0(run):
    return rank(run, 0)["final_loss"]


def mean_loss(run):
    return rank(run, 0)["mean_loss"]


def wall(run):
    return max(x["wall_secs"] for x in run["ranks"])


def peak(run, r, key="reserved_bytes.all.peak"):
    return rank(run, r)["stats"][key]


def span(values, digits=6):
    values = sorted(set(values))
    return f"{values[0]:.{digits}f}" if len(values) == 1 else f"{values[0]:.{digits}f} – {values[-1]:.{digits}f}"


def loss_check(name, ours, theirs):
    """(name, state, detail): equal, or within bf16 noise of the native median."""
    ref = statistics.median(theirs)
    rel = max(abs(x - ref) for x in ours) / max(abs(ref), 1e-12)
    spread = (max(theirs) - min(theirs)) / max(abs(ref), 1e-12)
    equal = set(ours) == set(theirs) and len(set(theirs)) == 1
    detail = (f"equal ({ref:.6f})" if equal else
              f"cachalot {span(ours)} vs native {span(theirs)}: largest relative difference {rel:.2e} "
              f"(bf16 noise bound {LOSS_NOISE:g}; native's own spread {spread:.2e})")
    return name, equal or rel <= LOSS_NOISE, detail


def table(runs, ranks):
    head = ("| allocator | runs | final loss, rank 0 | final loss, mean of ranks | wall s, median (min–max) "
            + "| vs native | "
            + " | ".join(f"peak reserved, rank {r}" for r in ranks) + " | "
            + " | ".join(f"peak allocated, rank {r}" for r in ranks) + " |")
    lines = [head, "|" + "---|" * 6 + "---:|" * (2 * len(ranks))]
    native = ok_runs(runs, "native")
    for kind, label in ALLOCATORS:
        rs = ok_runs(runs, kind)
        if not rs:
            lines.append(f"| {label} | 0 | – | – | – | – |" + " – |" * (2 * len(ranks)))
            continue
        ws = [wall(r) for r in rs]
        med = statistics.median(ws)
        vs = f"{med / statistics.median(map(wall, native)):.3f}x" if native and kind != "native" else "–"
        lines.append(f"| {label} | {len(rs)} | {span(map(loss0, rs))} | {span(map(mean_loss, rs))} | "
                     f"{med:.2f} ({min(ws):.2f}–{max(ws):.2f}) | {vs} | "
                     + " | ".join(gib(max(peak(x, r) for x in rs)) for r in ranks) + " | "
                     + " | ".join(gib(max(peak(x, r, "allocated_bytes.all.peak") for x in rs)) for r in ranks) + " |")
    return lines


def requirements(runs, nproc):
    reqs = []
    native, ours = ok_runs(runs, "native"), ok_runs(runs, "cachalot")
    tried = [r for r in runs if r["kind"] == "cachalot"]
    failed = [r for r in tried if not r.get("ranks")]
    reqs.append((f"cachalot runs to the end on all {nproc} ranks", "SKIPPED" if not tried else not failed,
                 f"{len(tried) - len(failed)} of {len(tried)} runs" +
                 "".join(f"; r{r['round']}: {r.get('error')}" for r in failed)))
    reqs.append((f"at least {REPS_NEEDED} timed runs of each allocator", len(native) >= REPS_NEEDED
                 and len(ours) >= REPS_NEEDED, f"{len(native)} native, {len(ours)} cachalot"))
    if not (native and ours):
        for name in ("final loss = PyTorch's (rank 0)", "final loss = PyTorch's (mean of ranks)",
                     "peak reserved per rank <= PyTorch's", f"wall time <= {TIME_LIMIT}x PyTorch's"):
            reqs.append((name, "SKIPPED", "no pair of runs"))
        return reqs
    reqs.append(loss_check("final loss = PyTorch's (rank 0)", [loss0(r) for r in ours], [loss0(r) for r in native]))
    reqs.append(loss_check("final loss = PyTorch's (mean of ranks)", [mean_loss(r) for r in ours],
                           [mean_loss(r) for r in native]))
    worse, details = [], []
    for r in ranks_of(native + ours):
        worst, best = max(peak(x, r) for x in ours), min(peak(x, r) for x in native)
        details.append(f"rank {r}: {gib(worst)} vs {gib(best)} ({worst / best:.3f}x; {worst} vs {best} bytes)")
        worse += [r] if worst > best else []
    reqs.append(("peak reserved per rank <= PyTorch's", not worse, "; ".join(details)))
    ratio = statistics.median(map(wall, ours)) / statistics.median(map(wall, native))
    reqs.append((f"wall time <= {TIME_LIMIT}x PyTorch's", ratio <= TIME_LIMIT,
                 f"median {statistics.median(map(wall, ours)):.2f} s vs {statistics.median(map(wall, native)):.2f} s = "
                 f"{ratio:.3f}x over {len(ours)} + {len(native)} alternating runs"))
    return reqs


def report(runs, skipped, out, say, nproc=2):
    """Writes summary.md and results.json to `out`, says the summary, returns the verdict."""
    timed = [r for r in runs if r["kind"] in ("native", "cachalot")]
    reqs = [(n, {True: "PASS", False: "FAIL"}.get(s, s), d) for n, s, d in requirements(timed, nproc)]
    states = {s for _, s, _ in reqs}
    verdict = "FAIL" if "FAIL" in states else "PASS" if states == {"PASS"} else "INCOMPLETE"
    first = next((rank(r, 0) for r in timed if r.get("ranks")), {})
    ranks = ranks_of([r for r in timed if r.get("ranks")]) or list(range(nproc))
    nvls = (first.get("env") or {}).get("NCCL_NVLS_ENABLE", "?")
    lines = [f"Devices: {nproc} x {first.get('gpu', '?')} ({gib(first.get('capacity'))}), "
             f"torch {first.get('torch', '?')}, NCCL {first.get('nccl', '?')}; NCCL_NVLS_ENABLE={nvls}; "
             f"{first.get('steps', '?')} steps of data-parallel gpt2_train per run.", ""]
    lines += table(timed, ranks)
    if skipped:
        lines += ["", "Skipped (time budget):"] + [f"- {s}" for s in skipped]
    lines += ["", "| requirement | result | detail |", "|---|---|---|"] + [f"| {n} | {s} | {d} |" for n, s, d in reqs]
    lines += [""] + [f"{s}: {n} — {d}" for n, s, d in reqs] + ["", f"VERDICT: {verdict}"]
    text = "\n".join(lines)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump(dict(runs=runs, skipped=skipped, nproc=nproc, requirements=reqs, verdict=verdict), fh, indent=1)
    say(text)
    return verdict
