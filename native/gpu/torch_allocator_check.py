"""cachalot as PyTorch's CUDA allocator through its C++ extension (install(extension=True)),
checked the way a PyTorch program uses an allocator. On the GPU machine, from the repo root:

    CACHALOT_LIB=target/gpu/libcachalot.so python3 native/gpu/torch_allocator_check.py

Each check prints one JSON line {"check": ..., "ok": ..., ...}; the last line is the verdict.
Checks: torch.cuda.memory_stats() equals cachalot's own figures (read through its C ABI);
memory_summary(), max_memory_reserved() and reset_peak_memory_stats() work; out of memory
raises torch.OutOfMemoryError, calls the attached observer, hands back no null tensor, and the
program recovers; a cudnn.benchmark convnet trains; a CUDA graph captures and replays;
a torch.cuda.MemPool serves its own allocations; torch.compile(mode="reduce-overhead") is tried
and its outcome reported (CUDA graph trees also need checkpoint states, which the extension does
not have yet).
"""
import json, os, sys, time, traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import torch  # noqa: E402
import cachalot_torch  # noqa: E402

results = []


def check(name):
    def run(fn):
        t = time.time()
        try:
            extra = fn() or {}
            ok = extra.pop("ok", True)
        except Exception as e:  # a check that raises fails, with its message
            ok, extra = False, {"error": f"{type(e).__name__}: {e}"[:600], "trace": traceback.format_exc()[-800:]}
        line = dict(check=name, ok=bool(ok), secs=round(time.time() - t, 2), **extra)
        results.append(line)
        print(json.dumps(line), flush=True)
    return run


@check("install")
def _():
    ext = cachalot_torch.install(extension=True)
    return {"module": getattr(ext, "__name__", str(ext))}


dev = torch.device("cuda")


@check("memory_stats equals cachalot's own figures")
def _():
    xs = [torch.empty(n, dtype=torch.uint8, device=dev) for n in (512, 3 << 20, 40 << 20, 7)]
    del xs[1]
    torch.cuda.synchronize()
    theirs, ours = torch.cuda.memory_stats(), cachalot_torch.memory_stats()
    differ = sorted(k for k in ours if k in theirs and theirs[k] != ours[k])
    missing = sorted(k for k in ours if k not in theirs)
    return {"ok": not differ and not missing and theirs["allocated_bytes.all.current"] > 0,
            "differ": differ[:10], "missing": missing[:10], "keys": len(theirs),
            "allocated": theirs["allocated_bytes.all.current"], "reserved": theirs["reserved_bytes.all.current"]}


@check("memory_summary, max_memory_reserved, reset_peak_memory_stats")
def _():
    x = torch.empty(100 << 20, dtype=torch.uint8, device=dev)
    del x
    peak_before = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    summary = torch.cuda.memory_summary()
    after = torch.cuda.max_memory_allocated()
    return {"ok": "memory summary" in summary.lower() and torch.cuda.max_memory_reserved() > 0
            and after == torch.cuda.memory_allocated() and peak_before >= 100 << 20,
            "peak_before": peak_before, "peak_after_reset": after, "summary_lines": len(summary.splitlines())}


@check("out of memory raises torch.OutOfMemoryError and the program recovers")
def _():
    seen = []
    torch._C._cuda_attach_out_of_memory_observer(lambda *a: seen.append(a))
    torch.cuda.set_per_process_memory_fraction(0.05)
    held, raised, nulls, message = [], 0, 0, ""
    for _ in range(1000):
        try:
            t = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
            nulls += t.data_ptr() == 0
            held.append(t)
        except torch.OutOfMemoryError as e:
            raised += 1
            message = str(e)[:300]
            break
    count = len(held)
    held.clear()
    again = torch.empty(256 << 20, dtype=torch.uint8, device=dev)  # recovered: memory freed is reused
    torch.cuda.set_per_process_memory_fraction(1.0)
    return {"ok": raised == 1 and nulls == 0 and count > 0 and again.data_ptr() != 0 and len(seen) >= 1,
            "tensors_before_oom": count, "null_tensors": nulls, "observer_calls": len(seen),
            "num_ooms": torch.cuda.memory_stats()["num_ooms"], "message": message}


@check("cudnn.benchmark convnet training")
def _():
    torch.backends.cudnn.benchmark = True
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1),
                              torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        x, y = torch.randn(32, 3, 64, 64, device=dev), torch.randint(0, 10, (32,), device=dev)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    torch.backends.cudnn.benchmark = False
    return {"losses": [round(v, 4) for v in losses]}


@check("CUDA graph capture and replay")
def _():
    static = torch.randn(1 << 20, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = static * 2
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = static * 2 + 1
    static.copy_(torch.ones_like(static))
    g.replay()
    torch.cuda.synchronize()
    return {"ok": bool(torch.allclose(out, torch.full_like(out, 3.0)))}


@check("a CUDA graph whose capture freed every block it made still replays into its own memory")
def _():
    a = torch.ones(1 << 20, device=dev)
    b = torch.zeros(1 << 20, device=dev)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tmp = a * 3  # allocated from the graph's pool, freed inside the capture
        b.copy_(tmp + 1)
        del tmp
    torch.cuda.synchronize()
    others = [torch.full((1 << 20,), 7.0, device=dev) for _ in range(8)]  # must not get the pool's memory
    a.fill_(2.0)
    g.replay()
    torch.cuda.synchronize()
    ok = bool(torch.all(b == 7.0)) and all(bool(torch.all(o == 7.0)) for o in others)
    del g
    return {"ok": ok}


@check("torch.cuda.MemPool: allocations in the pool, freed with it")
def _():
    before = torch.cuda.memory_stats()["reserved_bytes.all.current"]
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        t = torch.ones(64 << 20, dtype=torch.uint8, device=dev)
    u = torch.ones(1 << 20, dtype=torch.uint8, device=dev)  # outside: the default pool
    inside = torch.cuda.memory_stats()["reserved_bytes.all.current"]
    # Served by the pool: its own segment, beside the default pool's.
    ok = int(t.sum()) == 64 << 20 and inside >= before + (64 << 20)
    uses = pool.use_count()
    del t, pool, u
    return {"ok": ok, "reserved_before": before, "reserved_with_pool": inside, "use_count": uses}


@check("torch.compile(mode='reduce-overhead'): CUDA graph trees match eager")
def _():
    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).to(dev)
    f = torch.compile(net, mode="reduce-overhead")
    xs = [torch.randn(64, 256, device=dev) for _ in range(6)]
    with torch.no_grad():
        want = [net(x) for x in xs]
        got = [f(x).clone() for x in xs]
    worst = max(float((g - w).abs().max()) for g, w in zip(got, want))
    stats = torch.cuda.memory_stats()
    return {"ok": worst < 1e-2, "max_abs_diff": worst, "allocated": stats["allocated_bytes.all.current"]}


ok = sum(r["ok"] for r in results)
print(json.dumps(dict(verdict="PASS" if ok == len(results) else "PARTIAL", passed=ok, checks=len(results))))
