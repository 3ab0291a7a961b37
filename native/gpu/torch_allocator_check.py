"""cachalot as PyTorch's CUDA allocator through its C++ extension (install()), checked the way a
PyTorch program uses an allocator. On the GPU machine, from the repo root:

    CACHALOT_LIB=target/release/libcachalot.so python3 native/gpu/torch_allocator_check.py
        (this checkout's modules; the extension from target/torch-ext, `make torch-extensions`)
    CACHALOT_FROM_WHEEL=1 python3 native/gpu/torch_allocator_check.py
        (the installed wheel's, as native/gpu/wheel_check.sh runs it)

Each check prints one JSON line {"check": ..., "ok": ..., ...}; the last line is the verdict.
Checks: torch.cuda.memory_stats() equals cachalot's own figures (read through its C ABI);
memory_summary(), max_memory_reserved() and reset_peak_memory_stats() work; out of memory
raises torch.OutOfMemoryError, calls the attached observer, hands back no null tensor, and the
program recovers; a cudnn.benchmark convnet trains; a CUDA graph captures and replays;
a torch.cuda.MemPool serves its own allocations and counts its uses as PyTorch does;
torch.compile(mode="reduce-overhead") inference and training (CUDA graph trees, with their
checkpoints of the pool and checks of its live blocks) match eager; the memory history and
snapshot open in PyTorch's _memory_viz with the recorded stacks; Lightning (with its
DeviceStatsMonitor) and timm models train.
"""
import json, os, subprocess, sys, time, traceback

# CACHALOT_FROM_WHEEL=1 (native/gpu/wheel_check.sh): the installed wheel's cachalot_torch, not this checkout's.
if os.environ.get("CACHALOT_FROM_WHEEL") != "1":
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
    try:
        ext = cachalot_torch.install(extension=True)
    except Exception as e:
        print(e, file=sys.stderr)  # the compiler's whole output, which the JSON line cuts short
        raise
    return {"extension": getattr(ext, "path", str(ext)), "library": cachalot_torch.load_library().path,
            "ok": getattr(ext, "is_current", lambda: False)()}


if not results[-1]["ok"]:  # every later check would measure PyTorch's own allocator
    print(json.dumps(dict(verdict="FAIL", passed=0, checks=1)))
    sys.exit(1)


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


@check("torch.cuda.MemPool: use_count as PyTorch's own allocator reports it")
def _():
    pool = torch.cuda.MemPool()
    ours = pool.use_count()
    with torch.cuda.use_mem_pool(pool):
        t = torch.ones(1 << 20, device=dev)
    during = pool.use_count()
    del t
    code = ("import torch; p = torch.cuda.MemPool(); a = p.use_count()\n"
            "with torch.cuda.use_mem_pool(p):\n    t = torch.ones(1 << 20, device='cuda')\n"
            "print(a, p.use_count())")
    env = {k: v for k, v in os.environ.items() if k != "CACHALOT_ALLOC_CONF"}
    theirs = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    want = theirs.stdout.split()
    return {"ok": [str(ours), str(during)] == want, "cachalot": [ours, during], "pytorch": want,
            "pytorch_stderr": theirs.stderr[-300:]}


@check("private pools live in cachalot's core: counted exactly, in the snapshot, given back after release")
def _():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_stats()["reserved_bytes.all.current"]
    x = torch.ones(8 << 20, device=dev)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 2
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        y = x * 2 + 1  # a 32 MiB block of the graph's pool
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        t = torch.ones(24 << 20, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    stats, snap = torch.cuda.memory_stats(), torch.cuda.memory_snapshot()
    in_segments = sum(seg["total_size"] for seg in snap)
    pools = {tuple(seg["segment_pool_id"]) for seg in snap}
    exact = stats["reserved_bytes.all.current"] == in_segments and stats == cachalot_torch.memory_stats()
    with_pools = stats["reserved_bytes.all.current"]
    g.replay()
    torch.cuda.synchronize()
    replayed = bool(torch.all(y == 3.0))
    del g, y, t, pool
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    after = torch.cuda.memory_stats()["reserved_bytes.all.current"]
    del x
    torch.cuda.empty_cache()
    ok = exact and replayed and len(pools) >= 3 and after <= base + (32 << 20)
    return {"ok": ok, "reserved_before": base, "reserved_with_pools": with_pools, "in_snapshot_segments": in_segments,
            "pool_ids_in_snapshot": sorted(pools), "reserved_after_release": after, "replayed": replayed}


checkpoint_calls = {"get": 0, "set": 0, "check_live": 0}
for name, key in (("_cuda_getCheckpointState", "get"), ("_cuda_setCheckpointPoolState", "set"),
                  ("_cuda_checkPoolLiveAllocations", "check_live")):
    real = getattr(torch._C, name)

    def counted(*a, _real=real, _key=key, **k):
        checkpoint_calls[_key] += 1
        return _real(*a, **k)
    setattr(torch._C, name, counted)


@check("torch.compile(mode='reduce-overhead'): CUDA graph trees match eager")
def _():
    torch._inductor.config.triton.slow_path_cudagraph_asserts = True  # graph trees check the pool's live blocks
    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).to(dev)
    f = torch.compile(net, mode="reduce-overhead")
    xs = [torch.randn(64, 256, device=dev) for _ in range(6)]
    with torch.no_grad():
        want = [net(x) for x in xs]
        got = [f(x).clone() for x in xs]
    worst = max(float((g - w).abs().max()) for g, w in zip(got, want))
    stats = torch.cuda.memory_stats()
    return {"ok": worst < 1e-2, "max_abs_diff": worst, "allocated": stats["allocated_bytes.all.current"],
            "checkpoint_calls": dict(checkpoint_calls)}


@check("torch.compile(mode='reduce-overhead') training: graph trees (forward, backward, eval between) match eager")
def _():
    import copy
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
                              torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)).to(dev)
    eager = copy.deepcopy(net)
    compiled = torch.compile(net, mode="reduce-overhead")
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (net, eager)]
    losses = {"compiled": [], "eager": []}
    for step in range(12):
        g = torch.Generator(device=dev).manual_seed(step)
        x = torch.randn(64, 128, device=dev, generator=g)
        y = torch.randint(0, 10, (64,), device=dev, generator=g)
        for key, model, opt in (("compiled", compiled, opts[0]), ("eager", eager, opts[1])):
            torch.compiler.cudagraph_mark_step_begin()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[key].append(float(loss.detach()))
            if step % 3 == 2:  # an eval pass between steps: another path through the tree
                torch.compiler.cudagraph_mark_step_begin()
                with torch.no_grad():
                    model(x[:32]).sum().item()
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses["compiled"], losses["eager"]))
    return {"ok": worst < 1e-3 and checkpoint_calls["get"] > 0, "max_rel_loss_diff": worst,
            "losses_compiled": [round(v, 5) for v in losses["compiled"][-3:]],
            "losses_eager": [round(v, 5) for v in losses["eager"][-3:]], "checkpoint_calls": dict(checkpoint_calls)}


@check("_record_memory_history, _snapshot, _dump_snapshot, and memory_viz opens them")
def _():
    import pickle
    import tempfile
    from torch.cuda import _memory_viz
    torch.cuda.memory._record_memory_history(max_entries=100000)
    held = [torch.empty(1 << k, dtype=torch.uint8, device=dev) for k in range(10, 26)]
    del held[::2]
    snap = torch.cuda.memory._snapshot()
    path = os.path.join(tempfile.mkdtemp(), "cachalot_snapshot.pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(path, "rb") as f:
        dumped = pickle.load(f)
    segs = snap["segments"]
    tiled = all(sum(b["size"] for b in s["blocks"]) == s["total_size"] for s in segs)
    reserved = torch.cuda.memory_stats()["reserved_bytes.all.current"]
    in_segments = sum(s["total_size"] for s in segs)
    live = {t.data_ptr() for t in held}
    blocks = [b for s in segs for b in s["blocks"]]
    with_frames = [b for b in blocks if b["address"] in live and b.get("frames")]
    trace = snap["device_traces"][0] if snap["device_traces"] else []
    allocs = [e for e in trace if e["action"] == "alloc" and e["addr"] in live]
    here = os.path.basename(__file__)
    framed = [e for e in allocs if any(here in fr.get("filename", "") for fr in e.get("frames", []))]
    html = _memory_viz.trace_plot(dumped), _memory_viz.segment_plot(dumped)
    cli = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", path, "-o", path + ".html"],
                         capture_output=True, text=True, timeout=120)
    return {"ok": tiled and in_segments == reserved and len(with_frames) == len(live) and len(framed) == len(live)
            and all(len(h) > 1000 for h in html) and cli.returncode == 0 and os.path.getsize(path + ".html") > 1000,
            "segments": len(segs), "in_segments": in_segments, "reserved": reserved, "live": len(live),
            "blocks_with_frames": len(with_frames), "trace_entries": len(trace), "allocs_with_frames": len(framed),
            "cli": cli.returncode, "cli_err": cli.stderr[-300:]}


MINOR = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


@check("a block used on a side stream and freed during a capture waits for the capture's end, then is reused")
def _():
    x = torch.ones(1 << 20, device=dev)  # made before the capture, used on a side stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    x.record_stream(side)
    ptr = x.data_ptr()
    g = torch.cuda.CUDAGraph()
    static = torch.zeros(1 << 20, device=dev)
    with torch.cuda.graph(g):
        del x  # freed during the capture: no event may be recorded now
        static.add_(1)
    pending = torch.cuda.memory_stats()["active_bytes.all.current"] - torch.cuda.memory_stats()["allocated_bytes.all.current"]
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    again = [torch.empty(1 << 20, device=dev) for _ in range(4)]  # after the capture's end: reusable
    reused = any(t.data_ptr() == ptr for t in again)
    # A capture records static.add_(1) without running it: the one replay makes it 1.
    replayed_once = bool(torch.all(static == 1.0))
    ok = pending >= (4 << 20) and reused and replayed_once and bool(torch.all(y == 2.0))
    del g, again
    return {"ok": ok, "pending_bytes_after_capture": pending, "reused": reused, "replayed_once": replayed_once}


@check("memory history entries carry the thread's user metadata (_set_memory_metadata)")
def _():
    if not hasattr(torch.cuda.memory, "_set_memory_metadata"):
        return {"skipped": f"torch {torch.__version__} has no _set_memory_metadata"}
    torch.cuda.memory._record_memory_history(max_entries=1000)
    torch.cuda.memory._set_memory_metadata("cachalot-step-3")
    t = torch.empty(3 << 20, dtype=torch.uint8, device=dev)
    torch.cuda.memory._set_memory_metadata("")
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    torch.cuda.memory._record_memory_history(enabled=None)
    mine = [e for e in trace if e["action"] == "alloc" and e["addr"] == t.data_ptr()]
    return {"ok": bool(mine) and mine[-1].get("user_metadata") == "cachalot-step-3", "entries": len(trace)}


@check("an annotation of a live tensor is an 'annotate' history entry (PyTorch 2.14 on)")
def _():
    if MINOR < (2, 14) or not hasattr(torch.cuda.memory, "_annotate_tensor"):
        return {"skipped": f"torch {torch.__version__} has no _annotate_tensor"}
    torch.cuda.memory._record_memory_history(max_entries=1000)
    t = torch.empty(5 << 20, dtype=torch.uint8, device=dev)
    torch.cuda.memory._annotate_tensor(t, "kv-cache")
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    torch.cuda.memory._record_memory_history(enabled=None)
    notes = [e for e in trace if e["action"] == "annotate" and e["addr"] == t.data_ptr()]
    return {"ok": bool(notes) and notes[-1].get("user_metadata") == "kv-cache" and notes[-1]["size"] == 5 << 20}


@check("throw_on_cudamalloc_oom: a request past the memory fraction is rejected at once and counted (2.12 on)")
def _():
    if MINOR < (2, 12):
        return {"skipped": f"torch {torch.__version__} has no throw_on_cudamalloc_oom"}
    code = (
        "import torch, cachalot_torch; cachalot_torch.install(config='policy:pytorch,throw_on_cudamalloc_oom:True')\n"
        "torch.cuda.set_per_process_memory_fraction(0.01)\n"
        "seen = []\n"
        "torch._C._cuda_attach_oom_rejection_observer(lambda *a: seen.append(a))"
        " if hasattr(torch._C, '_cuda_attach_oom_rejection_observer') else None\n"
        "try:\n    torch.empty(8 << 30, dtype=torch.uint8, device='cuda')\nexcept torch.OutOfMemoryError:\n    pass\n"
        "s = torch.cuda.memory_stats()\n"
        "print(s.get('num_oom_rejections'), s['num_alloc_retries'], len(seen))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    figures = run.stdout.split()
    return {"ok": run.returncode == 0 and figures[:2] == ["1", "0"], "rejections_retries_observed": figures,
            "err": run.stderr[-300:]}


@check("Lightning trains, DeviceStatsMonitor reading torch.cuda.memory_stats()")
def _():
    import tempfile
    import lightning as L
    from lightning.pytorch.callbacks import DeviceStatsMonitor
    from lightning.pytorch.loggers import CSVLogger

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.body(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    data = torch.utils.data.TensorDataset(torch.randn(2048, 64), torch.randint(0, 4, (2048,)))
    logs = tempfile.mkdtemp()
    trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=2, logger=CSVLogger(logs), callbacks=[DeviceStatsMonitor()],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=5)
    trainer.fit(Net(), torch.utils.data.DataLoader(data, batch_size=64))
    import glob
    metrics = open(glob.glob(os.path.join(logs, "**", "metrics.csv"), recursive=True)[0]).read()
    header = metrics.splitlines()[0].split(",")
    mem_cols = [c for c in header if "allocated_bytes" in c or "reserved_bytes" in c]
    return {"ok": trainer.state.finished and len(mem_cols) > 0, "memory_columns": len(mem_cols),
            "final_loss": float(trainer.callback_metrics.get("loss", float("nan")))}


@check("timm: a ResNet and a ViT train under autocast")
def _():
    import timm
    out = {}
    for name in ("resnet18", "vit_tiny_patch16_224"):
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=10).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scaler = torch.amp.GradScaler("cuda")
        losses = []
        for step in range(4):
            x, y = torch.randn(16, 3, 224, 224, device=dev), torch.randint(0, 10, (16,), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(round(float(loss), 4))
        out[name] = losses
    return {"ok": all(all(v == v for v in l) for l in out.values()), "losses": out,
            "peak_reserved": torch.cuda.max_memory_reserved()}


ok = sum(r["ok"] for r in results)
print(json.dumps(dict(verdict="PASS" if ok == len(results) else "PARTIAL", passed=ok, checks=len(results))))
