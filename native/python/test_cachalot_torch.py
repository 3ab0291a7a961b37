"""Tests of cachalot_torch and cachalot_replay without torch and without a GPU (`make python-test`).

Run: CACHALOT_LIB=target/release/libcachalot.so CACHALOT_CLI=target/release/cachalot \
         python3 native/python/test_cachalot_torch.py
(both default to target/release of this repository).

What they cover: memory_stats() has exactly torch.cuda.memory_stats()'s keys, in its order,
read from the versioned stats struct; memory_summary() is the 77-column table; snapshot()
has torch.cuda.memory._snapshot()'s schema; on a generated workload over a simulated
allocator (standing in for the GPU) the readers agree with a simulated replay of the recorded
history and with `cachalot replay --json --summary`, under four configs — the same checks
the GPU check runs after a real workload; the module-level functions before any device was
used; a missing library; and install() against a stand-in `torch` module: too late (CUDA
initialised, or the swap refused), a bad config, the hooks wired to cachalot's entry points.
"""
import collections
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
os.environ.setdefault("CACHALOT_LIB", os.path.join(ROOT, "target", "release", "libcachalot.so"))
CLI = os.environ.get("CACHALOT_CLI", os.path.join(ROOT, "target", "release", "cachalot"))
FAKE_CUDA = os.environ.get("CACHALOT_FAKE_CUDA")  # native/tests/fake_cuda built as libcuda.so
FAKE_CAPACITY = 32 * (1 << 30)

import cachalot_replay  # noqa: E402
import cachalot_torch  # noqa: E402

GiB = 1 << 30


def pytorch_stat_keys():
    """torch.cuda.memory_stats()'s keys, written out from PyTorch's nested dict (Module.cpp)."""
    nested = {k: 0 for k in ["num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams",
                             "num_device_alloc", "num_device_free"]}
    stat = {m: 0 for m in ["current", "peak", "allocated", "freed"]}
    for name in ["allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                 "active_bytes", "inactive_split_bytes", "requested_bytes"]:
        nested[name] = {pool: stat for pool in ["all", "small_pool", "large_pool"]}
    nested["oversize_allocations"] = nested["oversize_segments"] = stat

    def flat(prefix, obj):
        if isinstance(obj, dict):
            return [k for key, v in obj.items() for k in flat(f"{prefix}.{key}" if prefix else key, v)]
        return [prefix]
    return sorted(flat("", nested))


def workload(seed=1, steps=3000, side_stream=0x7F00):
    """A history in device_traces form: mixed small, medium and large requests on two streams."""
    rng = random.Random(seed)
    live, entries, addr = [], [], 1 << 40
    for _ in range(steps):
        if live and (rng.random() < 0.45 or len(live) > 80):
            a, size, stream = live.pop(rng.randrange(len(live)))
            entries.append(dict(action="free_requested", addr=a, size=size, stream=stream))
            continue
        r = rng.random()
        size = (rng.randint(1, 2048) if r < 0.4 else rng.randint(1 << 20, 12 << 20) if r < 0.8
                else rng.randint(12 << 20, 300 << 20))
        stream = 0 if rng.random() < 0.9 else side_stream
        addr += 1 << 32  # fake, unique addresses: only identity matters
        live.append((addr, size, stream))
        entries.append(dict(action="alloc", addr=addr, size=size, stream=stream))
    return {"segments": [], "device_traces": [entries]}


class Readers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lib = cachalot_torch.load_library()

    def test_stats_have_pytorchs_keys_in_its_order(self):
        h = self.lib.new_simulated(GiB, "policy:pytorch,max_split_size_mb:20")
        try:
            s = self.lib.stats(h)
            self.assertIsInstance(s, collections.OrderedDict)
            self.assertEqual(list(s), pytorch_stat_keys())
            self.assertEqual(len(s), 122)
            self.assertEqual(s["max_split_size"], 20 << 20)
            p = self.lib.malloc(h, 3 << 20)
            s = self.lib.stats(h)
            self.assertEqual(s["allocation.all.current"], 1)
            self.assertEqual(s["allocation.large_pool.current"], 1)
            self.assertEqual(s["requested_bytes.all.current"], 3 << 20)
            self.assertEqual(s["reserved_bytes.all.current"], 20 << 20)
            self.assertEqual(s["num_device_alloc"], 1)
            self.lib.free(h, p)
            self.lib.reset_peak_stats(h)
            self.assertEqual(self.lib.stats(h)["allocated_bytes.all.peak"], 0)
        finally:
            self.lib.free_allocator(h)

    def test_summary_is_pytorchs_table(self):
        h = self.lib.new_simulated(GiB, "")
        try:
            self.lib.malloc(h, 5000)
            full, short = self.lib.summary(h), self.lib.summary(h, abbreviated=True)
            for text in (full, short):
                lines = text.rstrip("\n").split("\n")
                self.assertTrue(all(len(line) == 77 and line[0] == line[-1] == "|" for line in lines), text)
            self.assertIn("from large pool", full)
            self.assertNotIn("from large pool", short)
            self.assertIn("Allocated memory", full)
        finally:
            self.lib.free_allocator(h)

    def test_snapshot_has_pytorchs_schema(self):
        h = self.lib.new_simulated(GiB, "policy:pytorch,record_history:100")
        try:
            p = self.lib.malloc(h, 100)
            self.lib.malloc(h, 30 << 20)
            self.lib.free(h, p)
            snap = self.lib.snapshot(h)
            self.assertEqual(set(snap), {"segments", "device_traces"})
            seg_keys = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                        "stream", "segment_type", "is_expandable", "blocks"}
            for s in snap["segments"]:
                self.assertLessEqual(seg_keys, set(s))
                self.assertIn(s["segment_type"], ("small", "large"))
                self.assertEqual(sum(b["size"] for b in s["blocks"]), s["total_size"])
                for b in s["blocks"]:
                    self.assertLessEqual({"address", "size", "requested_size", "state"}, set(b))
                    self.assertIn(b["state"], ("active_allocated", "active_pending_free", "inactive"))
            actions = [e["action"] for e in snap["device_traces"][0]]
            self.assertEqual(actions, ["segment_alloc", "alloc", "segment_alloc", "alloc", "free_requested",
                                       "free_completed"])
            self.assertLessEqual({"action", "addr", "size", "stream", "time_us"}, set(snap["device_traces"][0][0]))
        finally:
            self.lib.free_allocator(h)

    def test_readers_agree_with_replays_of_the_recorded_history(self):
        """The GPU check's comparison, with a simulated allocator in place of the GPU."""
        ops, _ = cachalot_replay.trace_ops(workload())
        capacity = 24 * GiB
        for base in ["", "policy:pytorch", "policy:pytorch,max_split_size_mb:64", "expandable_segments:True"]:
            config = ",".join(x for x in [base, "record_history:100000"] if x)
            with self.subTest(config=config):
                live = cachalot_replay.replay_simulated(self.lib, ops, config, capacity)
                self.assertEqual(live["ooms"], 0)
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "trace.json")
                    with open(path, "w") as fh:
                        json.dump(live["snapshot"], fh)
                    recorded, report = cachalot_replay.trace_ops(live["snapshot"])
                    self.assertEqual(report.get("unknown_frees", 0), 0)
                    self.assertEqual(len(recorded), len(ops))
                    sim = cachalot_replay.replay_simulated(self.lib, recorded, config, capacity)
                    cli = cachalot_replay.replay_cli(CLI, path, config, capacity)
                checks = cachalot_replay.compare(live, config, sim=sim, cli=cli)
                self.assertEqual(len(checks), 4 + 4 + 7)
                failed = [c for c in checks if not c["ok"]]
                self.assertEqual(failed, [], json.dumps(failed, indent=1))

    def test_a_simulated_allocator_places_segments_as_recorded(self):
        at = 0x7F00_0000_0000 + (64 << 20)
        handle = self.lib.new_simulated(GiB, "policy:pytorch", [(at, 20 << 20), (at + (20 << 20), 2 << 20)])
        try:
            self.assertEqual(self.lib.malloc(handle, 5 << 20), at, "the first large segment, where recorded")
            self.assertEqual(self.lib.malloc(handle, 1000), at + (20 << 20), "the first small one too")
            top = 0x8000_0000_0000
            self.assertEqual(self.lib.malloc(handle, 16 << 20), top - (16 << 20), "then its own rule: top down")
        finally:
            self.lib.free_allocator(handle)

    def test_compare_reports_a_mismatch_with_its_size(self):
        ops, _ = cachalot_replay.trace_ops(workload(seed=2, steps=400))
        config = "policy:pytorch,record_history:10000"
        live = cachalot_replay.replay_simulated(self.lib, ops, config, 8 * GiB)
        sim = cachalot_replay.replay_simulated(self.lib, ops, config, 8 * GiB)
        live["stats"]["reserved_bytes.all.peak"] += 512
        checks = {c["check"]: c for c in cachalot_replay.compare(live, config, sim=sim)}
        stats_check = checks["memory_stats = simulated replay's (all keys)"]
        self.assertFalse(stats_check["ok"])
        peak = sim["stats"]["reserved_bytes.all.peak"]
        self.assertIn(f"1 of 122 keys differ: reserved_bytes.all.peak: {peak + 512} vs {peak}", stats_check["detail"])
        shorter = cachalot_replay.replay_simulated(self.lib, ops[:-1], config, 8 * GiB)
        checks = {c["check"]: c for c in cachalot_replay.compare(live, config, sim=shorter)}
        history = checks["snapshot history = simulated replay's (actions, sizes)"]
        self.assertFalse(history["ok"])
        self.assertEqual(history["ours"] - history["theirs"], 2)  # the last free: requested and completed


class FakeCuda(unittest.TestCase):
    """PyTorch's entry points over native/tests/fake_cuda, a stand-in libcuda: each config in a
    process of its own (FakeCudaChild), since the process-wide allocator is created once."""

    def test_module_reads_the_allocator_pytorchs_entry_points_use(self):
        if not FAKE_CUDA:
            self.skipTest("set CACHALOT_FAKE_CUDA to the stand-in libcuda.so (make python-test does)")
        for config in ["policy:pytorch,record_history:100000", "policy:pytorch,max_split_size_mb:64,record_history:100000"]:
            with self.subTest(config=config):
                env = dict(os.environ, CACHALOT_FAKE_CUDA_CHILD="1", CACHALOT_ALLOC_CONF=config,
                           FAKE_CUDA_CAPACITY=str(FAKE_CAPACITY))
                p = subprocess.run([sys.executable, os.path.abspath(__file__), "FakeCudaChild"], env=env,
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertIn("OK", p.stderr)
                self.assertNotIn("skipped", p.stderr)


    def test_figures_per_device(self):
        if not FAKE_CUDA:
            self.skipTest("set CACHALOT_FAKE_CUDA to the stand-in libcuda.so (make python-test does)")
        env = dict(os.environ, CACHALOT_FAKE_CUDA_DEVICES_CHILD="1", CACHALOT_ALLOC_CONF=DEVICES_CONFIG,
                   FAKE_CUDA_DEVICES=str(len(DEVICE_CAPACITIES)),
                   FAKE_CUDA_CAPACITY=",".join(map(str, DEVICE_CAPACITIES)))
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "FakeCudaDevicesChild"], env=env,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("OK", p.stderr)
        self.assertNotIn("skipped", p.stderr)


DEVICES_CONFIG = "policy:pytorch,record_history:100000"
DEVICE_CAPACITIES = (32 * GiB, 16 * GiB)


class FakeCudaDevicesChild(unittest.TestCase):
    """Two stand-in devices, each with its own workload through PyTorch's entry points: every
    reader answers per device, and each device's figures agree with a replay of its history."""

    @unittest.skipUnless(os.environ.get("CACHALOT_FAKE_CUDA_DEVICES_CHILD"), "run by FakeCuda in a process of its own")
    def test_per_device_stats_summary_snapshot(self):
        ctypes.CDLL(FAKE_CUDA, mode=ctypes.RTLD_GLOBAL)
        fake = ctypes.CDLL(FAKE_CUDA)
        fake.fake_cuda_device_of.argtypes, fake.fake_cuda_device_of.restype = [ctypes.c_void_p], ctypes.c_int
        lib = cachalot_torch.load_library()
        malloc, free = lib.dll.cachalot_torch_malloc, lib.dll.cachalot_torch_free
        malloc.argtypes, malloc.restype = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
        free.argtypes, free.restype = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p], None
        record = lib.dll.cachalot_torch_record_stream
        record.argtypes, record.restype = [ctypes.c_void_p, ctypes.c_void_p], None
        devices = range(len(DEVICE_CAPACITIES))
        ops = [cachalot_replay.trace_ops(workload(seed=10 + d, steps=500 + 300 * d, side_stream=0))[0] for d in devices]
        # Interleaved, as two GPUs' work would be; device 1's record_stream calls find it by pointer.
        addrs, cursor = [{} for _ in devices], [0 for _ in devices]
        while any(cursor[d] < len(ops[d]) for d in devices):
            for d in devices:
                for op in ops[d][cursor[d]:cursor[d] + 3]:
                    if op[0] == "alloc":
                        p = addrs[d][op[1]] = malloc(op[2], d, None)
                        self.assertTrue(p)
                        self.assertEqual(fake.fake_cuda_device_of(p), d)
                        record(p, None)
                    else:
                        free(addrs[d].pop(op[1]), 0, d, None)
                cursor[d] += 3
        self.assertIsNone(lib.torch_allocator(len(DEVICE_CAPACITIES)))
        snap = cachalot_torch.snapshot()
        self.assertEqual(len(snap["device_traces"]), len(DEVICE_CAPACITIES), "one history per device")
        for d in devices:
            with self.subTest(device=d):
                stats = cachalot_torch.memory_stats(d)
                self.assertEqual(stats, cachalot_torch.memory_stats(f"cuda:{d}"))
                self.assertEqual(stats, cachalot_torch.memory_stats(types.SimpleNamespace(type="cuda", index=d)))
                self.assertEqual(stats["allocation.all.allocated"], sum(op[0] == "alloc" for op in ops[d]))
                self.assertEqual(stats["allocation.all.current"], len(addrs[d]))
                summary = cachalot_torch.memory_summary(device=d)
                self.assertIn(f"device ID {d} ", summary)
                mine = cachalot_torch.snapshot(d)
                self.assertEqual(len(mine["device_traces"]), d + 1)
                self.assertTrue(all(t == [] for t in mine["device_traces"][:d]))
                self.assertEqual(mine["device_traces"][d], snap["device_traces"][d])
                self.assertEqual(mine["segments"], [s for s in snap["segments"] if s["device"] == d])
                self.assertTrue(mine["segments"])
                self.assertTrue(all(fake.fake_cuda_device_of(s["address"]) == d for s in mine["segments"]))
                figures = dict(stats=stats, summary=summary, snapshot=snap)
                recorded, report = cachalot_replay.trace_ops(snap, device=d)
                self.assertEqual(report.get("allocs"), stats["allocation.all.allocated"])
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "trace.json")
                    with open(path, "w") as fh:
                        json.dump({"segments": mine["segments"], "device_traces": [mine["device_traces"][d]]}, fh)
                    sim = cachalot_replay.replay_simulated(lib, recorded, DEVICES_CONFIG, DEVICE_CAPACITIES[d])
                    cli = cachalot_replay.replay_cli(CLI, path, DEVICES_CONFIG, DEVICE_CAPACITIES[d])
                checks = cachalot_replay.compare(figures, DEVICES_CONFIG, sim=sim, cli=cli, device=d)
                failed = [c for c in checks if not c["ok"]]
                self.assertEqual(failed, [], json.dumps(failed, indent=1))
        self.assertNotEqual(cachalot_torch.memory_stats(0), cachalot_torch.memory_stats(1))
        # Peaks reset per device; empty_cache() empties every device.
        peaks = [cachalot_torch.max_memory_allocated(d) for d in devices]
        cachalot_torch.reset_peak_memory_stats(1)
        self.assertEqual(cachalot_torch.max_memory_allocated(0), peaks[0])
        self.assertEqual(cachalot_torch.max_memory_allocated(1), cachalot_torch.memory_allocated(1))
        self.assertLess(cachalot_torch.max_memory_allocated(1), peaks[1])
        before = [cachalot_torch.memory_reserved(d) for d in devices]
        cachalot_torch.empty_cache()
        for d in devices:
            used = sum(s["total_size"] for s in cachalot_torch.snapshot(d)["segments"] if s["allocated_size"])
            self.assertLess(cachalot_torch.memory_reserved(d), before[d])
            self.assertEqual(cachalot_torch.memory_reserved(d), used)


class FakeCudaChild(unittest.TestCase):
    @unittest.skipUnless(os.environ.get("CACHALOT_FAKE_CUDA_CHILD"), "run by FakeCuda in a process of its own")
    def test_figures_of_the_process_wide_allocator(self):
        ctypes.CDLL(FAKE_CUDA, mode=ctypes.RTLD_GLOBAL)  # found by soname when cachalot loads the driver
        lib = cachalot_torch.load_library()
        malloc, free = lib.dll.cachalot_torch_malloc, lib.dll.cachalot_torch_free
        malloc.argtypes, malloc.restype = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
        free.argtypes, free.restype = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p], None
        config = os.environ["CACHALOT_ALLOC_CONF"]
        self.assertIsNone(lib.torch_allocator(0))
        ops, _ = cachalot_replay.trace_ops(workload(seed=3, steps=1500, side_stream=0))
        addrs = {}
        for op in ops:
            if op[0] == "alloc":
                addrs[op[1]] = malloc(op[2], 0, None)
                self.assertTrue(addrs[op[1]])
            else:
                free(addrs.pop(op[1]), 0, 0, None)
        self.assertIsNotNone(lib.torch_allocator(0))
        self.assertIsNone(lib.torch_allocator(1))
        figures = dict(stats=cachalot_torch.memory_stats(0), summary=cachalot_torch.memory_summary(0),
                       snapshot=cachalot_torch.snapshot(0))
        self.assertEqual(cachalot_torch.memory_stats(), figures["stats"], "device None is device 0 without torch")
        self.assertEqual(cachalot_torch.snapshot(), figures["snapshot"])
        self.assertEqual(figures["stats"]["allocation.all.allocated"], sum(op[0] == "alloc" for op in ops))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            with open(path, "w") as fh:
                json.dump(figures["snapshot"], fh)
            recorded, _ = cachalot_replay.trace_ops(figures["snapshot"])
            placements = cachalot_replay.segment_placements(figures["snapshot"])
            self.assertEqual(len(placements), figures["stats"]["num_device_alloc"])
            sim = cachalot_replay.replay_simulated(lib, recorded, config, FAKE_CAPACITY, placements)
            cli = cachalot_replay.replay_cli(CLI, path, config, FAKE_CAPACITY)
        failed = [c for c in cachalot_replay.compare(figures, config, sim=sim, cli=cli) if not c["ok"]]
        self.assertEqual(failed, [], json.dumps(failed, indent=1))
        idle = cachalot_torch.memory_stats(1)
        self.assertEqual({k: v for k, v in idle.items() if v}, {"max_split_size": figures["stats"]["max_split_size"]},
                         "device 1 served nothing; its config is device 0's")
        self.assertIn("device ID 1 ", cachalot_torch.memory_summary(1))
        cachalot_torch.reset_peak_memory_stats(0)
        self.assertEqual(cachalot_torch.max_memory_allocated(0), cachalot_torch.memory_allocated(0))
        before = cachalot_torch.memory_reserved(0)
        cachalot_torch.empty_cache()
        used = sum(s["total_size"] for s in cachalot_torch.snapshot(0)["segments"] if s["allocated_size"])
        self.assertLess(cachalot_torch.memory_reserved(0), before)
        self.assertEqual(cachalot_torch.memory_reserved(0), used, "only segments holding allocations stay")


class ModuleFunctions(unittest.TestCase):
    """The process-wide allocators: none exists here (no GPU), so every device reads as unused."""

    def setUp(self):
        sys.modules.pop("torch", None)

    def test_unused_devices_read_as_an_idle_allocator(self):
        lib = cachalot_torch.load_library()
        self.assertIsNone(lib.torch_allocator(0))
        with self.assertRaises(cachalot_torch.CachalotError) as e:
            lib.torch_allocator(64)
        self.assertEqual(e.exception.status, "CACHALOT_STATUS_INVALID_ARGUMENT")
        s = cachalot_torch.memory_stats()
        self.assertEqual(list(s), pytorch_stat_keys())
        self.assertEqual(sum(v for k, v in s.items() if k != "max_split_size"), 0)
        self.assertEqual(cachalot_torch.memory_allocated(0), 0)
        self.assertEqual(cachalot_torch.max_memory_reserved("cuda:0"), 0)
        self.assertIn("device ID 3 ", cachalot_torch.memory_summary(3))
        self.assertEqual(cachalot_torch.snapshot(), {"segments": [], "device_traces": [[]]})
        self.assertEqual(cachalot_torch.snapshot(2), {"segments": [], "device_traces": [[], [], []]})
        cachalot_torch.reset_peak_memory_stats()
        cachalot_torch.empty_cache()

    def test_missing_library_names_the_paths_tried(self):
        with self.assertRaises(FileNotFoundError) as e:
            cachalot_torch.find_library("/nonexistent/libcachalot.so")
        self.assertIn("/nonexistent/libcachalot.so (from the lib_path argument)", str(e.exception))
        saved = os.environ["CACHALOT_LIB"], cachalot_torch._HERE
        try:
            os.environ["CACHALOT_LIB"] = "/nope/libcachalot.so"
            with self.assertRaises(FileNotFoundError) as e:
                cachalot_torch.find_library()
            self.assertIn("/nope/libcachalot.so (from $CACHALOT_LIB)", str(e.exception))
            del os.environ["CACHALOT_LIB"]
            with tempfile.TemporaryDirectory() as tmp:
                cachalot_torch._HERE = os.path.join(tmp, "a", "b")
                with self.assertRaises(FileNotFoundError) as e:
                    cachalot_torch.find_library()
                msg = str(e.exception)
                self.assertIn(os.path.join(tmp, "a", "b", "libcachalot.so"), msg)
                self.assertIn(os.path.join(tmp, "target", "release", "libcachalot.so"), msg)
                self.assertIn("cargo build --release -p cachalot", msg)
        finally:
            os.environ["CACHALOT_LIB"], cachalot_torch._HERE = saved


def fake_torch(initialized=False, refuse_swap=False, lacking=()):
    """A stand-in for the parts of torch that install() uses, recording what it is asked."""
    torch = types.ModuleType("torch")
    torch.__version__ = "fake"
    calls = torch.calls = {"hooks": {}, "swapped": []}

    class Raw:
        def __getattr__(self, name):
            if name.startswith("set_") and name.endswith("_fn") and name not in lacking:
                return lambda ptr: calls["hooks"].__setitem__(name, ptr)
            raise AttributeError(name)

    class Pluggable:
        def __init__(self, path, alloc_fn, free_fn):
            self.args, self.raw = (path, alloc_fn, free_fn), Raw()

        def allocator(self):
            return self.raw

    def change_current_allocator(a):
        if refuse_swap:
            raise RuntimeError("Can't swap an already initialized allocator")
        calls["swapped"].append(a)

    def memory_allocated():
        return 4096

    torch.cuda = types.SimpleNamespace(is_initialized=lambda: initialized, memory_allocated=memory_allocated,
                                       memory=types.SimpleNamespace(CUDAPluggableAllocator=Pluggable,
                                                                    change_current_allocator=change_current_allocator))
    return torch


class Install(unittest.TestCase):
    def setUp(self):
        self.saved_conf = os.environ.pop("CACHALOT_ALLOC_CONF", None)
        cachalot_torch._INSTALLED = None

    def tearDown(self):
        sys.modules.pop("torch", None)
        cachalot_torch._INSTALLED = None
        os.environ.pop("CACHALOT_ALLOC_CONF", None)
        if self.saved_conf is not None:
            os.environ["CACHALOT_ALLOC_CONF"] = self.saved_conf

    def test_too_late_when_cuda_is_initialised(self):
        sys.modules["torch"] = fake_torch(initialized=True)
        with self.assertRaises(RuntimeError) as e:
            cachalot_torch.install(config="policy:pytorch")
        self.assertIn("too late", str(e.exception))
        self.assertIn("before any CUDA tensor is created", str(e.exception))
        self.assertIn("holds 4096 bytes", str(e.exception))
        self.assertNotIn("CACHALOT_ALLOC_CONF", os.environ)

    def test_too_late_when_pytorch_refuses_the_swap(self):
        sys.modules["torch"] = fake_torch(refuse_swap=True)
        with self.assertRaises(RuntimeError) as e:
            cachalot_torch.install(config="policy:pytorch")
        self.assertIn("Can't swap an already initialized allocator", str(e.exception))
        self.assertIn("before any CUDA tensor is created", str(e.exception))
        self.assertNotIn("CACHALOT_ALLOC_CONF", os.environ, "a failed install leaves the config as it was")
        self.assertIsNone(cachalot_torch._INSTALLED)

    def test_bad_config_is_refused_by_name(self):
        sys.modules["torch"] = fake_torch()
        with self.assertRaises(ValueError) as e:
            cachalot_torch.install(config="policy:nope")
        self.assertIn("policy", str(e.exception))
        os.environ["CACHALOT_ALLOC_CONF"] = "max_split_size_mb:abc"
        with self.assertRaises(ValueError) as e:
            cachalot_torch.install()
        self.assertIn("CACHALOT_ALLOC_CONF", str(e.exception))
        self.assertIn("max_split_size_mb", str(e.exception))

    def test_install_plugs_in_cachalot_with_its_hooks(self):
        torch = sys.modules["torch"] = fake_torch()
        alloc = cachalot_torch.install(config="policy:pytorch,max_split_size_mb:128")
        lib = cachalot_torch.load_library()
        self.assertEqual(alloc.args, (lib.path, "cachalot_torch_malloc", "cachalot_torch_free"))
        self.assertEqual(torch.calls["swapped"], [alloc])
        self.assertEqual(torch.calls["hooks"], {setter: lib.address(symbol) for setter, symbol in cachalot_torch.HOOKS})
        self.assertTrue(all(torch.calls["hooks"].values()))
        self.assertEqual(os.environ["CACHALOT_ALLOC_CONF"], "policy:pytorch,max_split_size_mb:128")
        self.assertIs(cachalot_torch.install(), alloc, "a second install() is a no-op")
        with self.assertRaises(RuntimeError):
            cachalot_torch.install(config="policy:cachalot")
        self.assertEqual(cachalot_torch.memory_stats(), collections.OrderedDict(), "CUDA not initialised yet")

    def test_a_missing_hook_is_a_warning(self):
        torch = sys.modules["torch"] = fake_torch(lacking=("set_record_stream_fn",))
        with self.assertWarnsRegex(RuntimeWarning, "set_record_stream_fn: cachalot_torch_record_stream stays unwired"):
            alloc = cachalot_torch.install()
        self.assertEqual(set(torch.calls["hooks"]), {"set_reset_fn", "set_memory_fraction_fn"})
        self.assertEqual(torch.calls["swapped"], [alloc])


if __name__ == "__main__":
    unittest.main(verbosity=2)
