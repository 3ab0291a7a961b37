"""Tests of cachalot_torch and cachalot_replay without torch and without a GPU (`make python-test`).

Run: CACHALOT_LIB=target/release/libcachalot.so CACHALOT_CLI=target/release/cachalot \
         python3 native/python/test_cachalot_torch.py
(both default to target/release of this repository).

What they cover: memory_stats() has exactly torch.cuda.memory_stats()'s keys, in its order,
read from the versioned stats struct; memory_summary() is the 77-column table; snapshot()
has torch.cuda.memory._snapshot()'s schema; on a generated workload over a simulated
allocator (standing in for the GPU) the readers agree with a simulated replay of the recorded
history and with `cachalot replay --json --summary`, under four configs — the same checks
the GPU check runs after a real workload; a text reader racing a writer that outgrows its
buffer; the CLI replaying one device of several; the module-level functions before any
device was used, the device arguments they accept and refuse, and a bad config in the
environment; a missing library, a file that is not one, a library that is not cachalot or is
an older one, a stats layout of another build; and install() against a stand-in `torch`
module and a stand-in extension: the extension of the running PyTorch's minor loaded and
installed, never a silent fallback (an unsupported PyTorch, a CPU-only one, no extension
shipped, a build of another minor: each an error naming the fix), the pluggable path only when
asked for, too late (CUDA initialised, or the swap refused), a bad config, a second call with
another config, the hooks wired to cachalot's entry points.
"""
import collections
import copy
import ctypes
import ctypes.util
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import types
import unittest
import warnings
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
os.environ.setdefault("CACHALOT_LIB", os.path.join(ROOT, "target", "release", "libcachalot.so"))
CLI = os.environ.get("CACHALOT_CLI", os.path.join(ROOT, "target", "release", "cachalot"))
FAKE_CUDA = os.environ.get("CACHALOT_FAKE_CUDA")  # native/tests/fake_cuda built as libcuda.so
# native/tests/fake_torch_extension built as a shared library: the extension's entry points.
FAKE_EXTENSION = os.environ.get("CACHALOT_FAKE_EXTENSION")
FAKE_CAPACITY = 32 * (1 << 30)

import cachalot_replay  # noqa: E402
import cachalot_torch  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "native", "gpu"))
import stats_parity  # noqa: E402

GiB = 1 << 30
CONFIG_ENV = "CACHALOT_ALLOC_CONF"


class DllProxy:
    """A loaded library's stand-in: its functions, some replaced (`overrides`, name to a
    Python function) or hidden (`hidden`), and the names asked for recorded in `asked`."""

    def __init__(self, dll, overrides=None, hidden=()):
        self._dll, self._overrides, self._hidden, self.asked = dll, dict(overrides or {}), set(hidden), []

    def __getattr__(self, name):
        self.asked.append(name)
        if name in self._hidden:
            raise AttributeError(name)
        return self._overrides[name] if name in self._overrides else getattr(self._dll, name)


def library_with(lib, **overrides):
    """A copy of the Library `lib` whose C functions named in `overrides` are replaced."""
    other = copy.copy(lib)
    other.dll = DllProxy(lib.dll, overrides)
    return other


class EnvVar:
    """Sets (or, with None, removes) an environment variable for a `with` block."""

    def __init__(self, name, value):
        self.name, self.value = name, value

    def __enter__(self):
        self.saved = os.environ.pop(self.name, None)
        if self.value is not None:
            os.environ[self.name] = self.value

    def __exit__(self, *exc):
        os.environ.pop(self.name, None)
        if self.saved is not None:
            os.environ[self.name] = self.saved


def pytorch_stat_keys(minor="2.15"):
    """torch.cuda.memory_stats()'s keys, written out from PyTorch's nested dict (Module.cpp);
    from 2.12 with num_oom_rejections. cachalot's config follows 2.15 unless it names a release."""
    nested = {k: 0 for k in ["num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams",
                             "num_device_alloc", "num_device_free"]}
    if minor != "2.11":
        nested["num_oom_rejections"] = 0
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

    def test_statistics_equal_pytorchs_own_recorded_on_an_h200(self):
        """native/gpu/stats_parity.py's scenarios (mixes under each config, garbage collection,
        a memory fraction, out of memory, expandable segments), with PyTorch 2.11's figures
        recorded on an H200: at every reading all 122 statistics, memory_summary() line by line
        and the snapshot's segments, and the whole memory history, equal cachalot's under
        policy:pytorch, its segments placed where the GPU put PyTorch's."""
        recorded = stats_parity.load(os.path.join(ROOT, "native", "gpu", "results", "stats_parity_h200.json.gz"))
        self.assertEqual(set(recorded), set(stats_parity.SCENARIOS), "every scenario recorded")
        self.assertTrue(all(r["torch"].startswith("2.11") for r in recorded.values()))
        readings = sum(len(r["stats"]) for r in recorded.values())
        self.assertGreater(readings, 70)
        found = stats_parity.differences(self.lib, recorded)
        self.assertEqual(found[:10], [], f"{len(found)} figures differ from PyTorch's")
        self.assertTrue(all(len(r["summaries"]) == len(r["layouts"]) == len(r["stats"]) for r in recorded.values()),
                        "each reading has its summary and segments")
        self.assertGreater(sum(len(r["history"]) for r in recorded.values()), 5000)

    def test_stats_have_pytorchs_keys_in_its_order(self):
        h = self.lib.new_simulated(GiB, "policy:pytorch,max_split_size_mb:20")
        try:
            s = self.lib.stats(h)
            self.assertIsInstance(s, collections.OrderedDict)
            self.assertEqual(list(s), pytorch_stat_keys())
            self.assertEqual(len(s), 123)
            self.assertEqual(s["max_split_size"], 20 << 20)
            self.assertEqual(s["num_oom_rejections"], 0)
            h211 = self.lib.new_simulated(GiB, "policy:pytorch,pytorch_version:2.11")
            try:
                self.assertEqual(list(self.lib.stats(h211)), pytorch_stat_keys("2.11"), "2.11 counts no rejections")
            finally:
                self.lib.free_allocator(h211)
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

    def test_history_capacity_reads_the_config_as_the_core_does(self):
        cap = cachalot_replay.history_capacity
        self.assertEqual(cap("policy:pytorch"), 0)
        self.assertEqual(cap("record_history:100"), 100)
        self.assertEqual(cap("record_history: 100"), 100, "spaces around a value")
        self.assertEqual(cap(" record_history :7,policy:pytorch"), 7, "spaces around a key")
        self.assertEqual(cap("record_history:5,record_history:1000"), 1000, "the last value wins")
        ops, _ = cachalot_replay.trace_ops(workload(seed=2, steps=50))
        config = "policy:pytorch, record_history: 100000"
        live = cachalot_replay.replay_simulated(self.lib, ops, config, 8 * GiB)
        checks = {c["check"]: c for c in cachalot_replay.compare(live, config, sim=live)}
        self.assertTrue(checks["history complete (entries < record_history)"]["ok"])

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
        self.assertIn(f"1 of 123 keys differ: reserved_bytes.all.peak: {peak + 512} vs {peak}", stats_check["detail"])
        shorter = cachalot_replay.replay_simulated(self.lib, ops[:-1], config, 8 * GiB)
        checks = {c["check"]: c for c in cachalot_replay.compare(live, config, sim=shorter)}
        history = checks["snapshot history = simulated replay's (actions, sizes)"]
        self.assertFalse(history["ok"])
        self.assertEqual(history["ours"] - history["theirs"], 2)  # the last free: requested and completed

    def test_compare_says_when_the_history_was_not_recorded(self):
        h = self.lib.new_simulated(GiB, "")
        try:
            self.lib.malloc(h, 1000)
            figures = dict(stats=self.lib.stats(h), summary=self.lib.summary(h), snapshot=self.lib.snapshot(h))
        finally:
            self.lib.free_allocator(h)
        first = cachalot_replay.compare(figures, "policy:cachalot")[0]
        self.assertFalse(first["ok"])
        self.assertEqual(first["detail"], "history not recorded (record_history off in the config)")

    def test_history_entries_without_a_stream_are_on_the_default_stream(self):
        entry = {"action": "alloc", "addr": 1 << 40, "size": 512}
        ops, _ = cachalot_replay.trace_ops({"device_traces": [[entry]]})
        self.assertEqual(ops, [("alloc", 0, 512, 0)])
        h = self.lib.new_simulated(GiB, "")
        try:
            figures = dict(stats=self.lib.stats(h), summary=self.lib.summary(h), snapshot=self.lib.snapshot(h))
        finally:
            self.lib.free_allocator(h)
        ours = dict(figures, snapshot={"segments": [], "device_traces": [[entry]]})
        sim = dict(figures, snapshot={"segments": [], "device_traces": [[dict(entry, stream=0)]]})
        checks = {c["check"]: c for c in cachalot_replay.compare(ours, "record_history:9", sim=sim)}
        self.assertTrue(checks["snapshot history = simulated replay's (actions, sizes)"]["ok"])

    def test_replay_cli_replays_one_device_of_several(self):
        two_devices = {"segments": [], "device_traces": [
            [{"action": "alloc", "addr": 1 << 40, "size": 1000, "stream": 0}],
            [{"action": "alloc", "addr": 2 << 40, "size": 50 << 20, "stream": 0},
             {"action": "alloc", "addr": 3 << 40, "size": 30 << 20, "stream": 0}]]}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            with open(path, "w") as fh:
                json.dump(two_devices, fh)
            with self.assertRaisesRegex(RuntimeError, "--device"):
                cachalot_replay.replay_cli(CLI, path, "", GiB)  # the CLI asks which device
            for device, allocs in [(0, 1), (1, 2)]:
                replay = cachalot_replay.replay_cli(CLI, path, "", GiB, device=device)
                self.assertEqual(replay["json"]["trace_report"]["allocs"], allocs)
                self.assertIn(f"--device {device}", replay["cmd"])

    def test_replay_cli_without_a_config_reads_the_environment(self):
        trace = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1 << 40, "size": 100, "stream": 0}]]}
        with tempfile.TemporaryDirectory() as tmp, EnvVar(CONFIG_ENV, "policy:pytorch"):
            path = os.path.join(tmp, "trace.json")
            with open(path, "w") as fh:
                json.dump(trace, fh)
            self.assertEqual(cachalot_replay.replay_cli(CLI, path, None, GiB)["json"]["config"], "policy:pytorch")

    def test_a_reader_racing_a_writer_asks_the_size_again(self):
        """Another thread allocates between the reader's size query and its fill, outgrowing
        the buffer three times in a row: the reader sizes again each time, then succeeds."""
        h = self.lib.new_simulated(64 * GiB, "policy:pytorch")
        real = self.lib.dll.cachalot_snapshot_json

        def text_size():
            need = ctypes.c_size_t()
            self.lib.check("cachalot_snapshot_json", real(h, None, 0, ctypes.byref(need)))
            return need.value

        grow_past, grown, allocated = queue.Queue(), queue.Queue(), []

        def writer():  # allocates until the text no longer fits the buffer the reader just made
            for limit in iter(grow_past.get, None):
                while text_size() <= limit:
                    allocated.extend(self.lib.malloc(h, 1024) for _ in range(16))
                grown.put(True)

        fills = []

        def racing(handle, buf, buf_len, out_len):
            if buf is not None:
                if len(fills) < 3:
                    grow_past.put(buf_len)
                    grown.get(timeout=120)
                fills.append(buf_len)
            return real(handle, buf, buf_len, out_len)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            snap = library_with(self.lib, cachalot_snapshot_json=racing).snapshot(h)
        finally:
            grow_past.put(None)
            thread.join()
            self.lib.free_allocator(h)
        self.assertEqual(len(fills), 4, "three buffers outgrown, the fourth sized after the writer stopped")
        self.assertEqual(sum(b["state"] == "active_allocated" for s in snap["segments"] for b in s["blocks"]),
                         len(allocated))

    def test_a_reader_outgrown_every_time_gives_up_and_says_so(self):
        h = self.lib.new_simulated(GiB, "")
        real = self.lib.dll.cachalot_memory_summary
        fills = []

        def always_outgrown(handle, abbreviated, buf, buf_len, out_len):
            if buf is None:
                return real(handle, abbreviated, buf, buf_len, out_len)
            fills.append(buf_len)
            return real(handle, abbreviated, buf, 1, out_len)  # as if the text had grown past the buffer

        try:
            with self.assertRaises(cachalot_torch.CachalotError) as e:
                library_with(self.lib, cachalot_memory_summary=always_outgrown).summary(h)
        finally:
            self.lib.free_allocator(h)
        self.assertEqual(e.exception.status, "CACHALOT_STATUS_BUFFER_TOO_SMALL")
        self.assertIn(f"gave up after {cachalot_torch.TEXT_ATTEMPTS} attempts", str(e.exception))
        self.assertEqual(len(fills), cachalot_torch.TEXT_ATTEMPTS)
        self.assertEqual(fills, sorted(fills))
        self.assertLess(fills[0], fills[-1], "each attempt leaves a wider margin")


class LoadingTheLibrary(unittest.TestCase):
    """What loading checks: a shared library, cachalot, every function this module calls,
    the stats layout this module reads."""

    def test_a_file_that_is_no_shared_library_is_an_oserror_naming_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "libcachalot.so")
            with open(path, "w") as fh:
                fh.write("not a library")
            with self.assertRaises(OSError) as e:
                cachalot_torch.Library(path)
        self.assertTrue(str(e.exception).startswith(f"cachalot: cannot load {path} as a shared library: "),
                        str(e.exception))

    def test_a_library_that_is_not_cachalot_is_named(self):
        libc = ctypes.util.find_library("c") or "libc.so.6"
        with self.assertRaises(RuntimeError) as e:
            cachalot_torch.Library(libc)
        self.assertEqual(str(e.exception), f"cachalot: {libc} is not a cachalot library (no cachalot_torch_allocator)")

    def test_an_older_cachalot_is_named_with_what_it_lacks(self):
        real_cdll = ctypes.CDLL
        lib = cachalot_torch.load_library()
        for lacking in ["cachalot_torch_record_stream", "cachalot_torch_empty_cache", "cachalot_status_name"]:
            with self.subTest(lacking=lacking), mock.patch.object(
                    cachalot_torch.ctypes, "CDLL", lambda path: DllProxy(real_cdll(path), hidden=[lacking])):
                with self.assertRaises(RuntimeError) as e:
                    cachalot_torch.Library(lib.path)
                self.assertIn(f"is cachalot {lib.version()}, older than this module: it lacks {lacking};",
                              str(e.exception))

    def test_a_stats_layout_of_another_build_is_refused(self):
        lib = cachalot_torch.load_library()
        real = lib.dll.cachalot_get_stats

        def newer_layout(handle, out):
            status = real(handle, out)
            out._obj.version = 3  # a layout this module does not read
            return status

        h = lib.new_simulated(GiB, "")
        try:
            with self.assertRaisesRegex(RuntimeError, "wrote cachalot_stats version 3 .*this module reads version 2"):
                library_with(lib, cachalot_get_stats=newer_layout).stats(h)
        finally:
            lib.free_allocator(h)


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


    def test_snapshot_covers_devices_past_torchs_device_count(self):
        if not FAKE_CUDA:
            self.skipTest("set CACHALOT_FAKE_CUDA to the stand-in libcuda.so (make python-test does)")
        env = dict(os.environ, CACHALOT_FAKE_CUDA_LIVE_CHILD="1", CACHALOT_ALLOC_CONF=DEVICES_CONFIG,
                   FAKE_CUDA_DEVICES="3", FAKE_CUDA_CAPACITY=str(4 * GiB))
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "FakeCudaLiveChild"], env=env,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("OK", p.stderr)
        self.assertNotIn("skipped", p.stderr)


class FakeCudaLiveChild(unittest.TestCase):
    """Allocators on devices 0 and 2 while torch says there is one device."""

    @unittest.skipUnless(os.environ.get("CACHALOT_FAKE_CUDA_LIVE_CHILD"), "run by FakeCuda in a process of its own")
    def test_snapshot_covers_every_device_with_an_allocator(self):
        ctypes.CDLL(FAKE_CUDA, mode=ctypes.RTLD_GLOBAL)
        lib = cachalot_torch.load_library()
        malloc = lib.dll.cachalot_torch_malloc
        for device in (0, 2):
            self.assertTrue(malloc(3 << 20, device, None))
        try:
            for initialized in (False, True):
                with self.subTest(cuda_initialised=initialized):
                    sys.modules["torch"] = fake_torch(initialized=initialized, device_count=1)
                    snap = cachalot_torch.snapshot()
                    self.assertEqual(len(snap["device_traces"]), 3)
                    self.assertEqual(sorted({s["device"] for s in snap["segments"]}), [0, 2])
                    self.assertEqual(snap["device_traces"][1], [])
                    self.assertTrue(snap["device_traces"][0] and snap["device_traces"][2])
        finally:
            sys.modules.pop("torch", None)


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

    def tearDown(self):
        sys.modules.pop("torch", None)

    READERS = (cachalot_torch.memory_stats, cachalot_torch.memory_summary, cachalot_torch.snapshot,
               cachalot_torch.reset_peak_memory_stats, cachalot_torch.memory_allocated,
               cachalot_torch.max_memory_allocated, cachalot_torch.memory_reserved,
               cachalot_torch.max_memory_reserved)

    def test_devices_are_read_as_torch_reads_them(self):
        for device, expected in [(None, 0), (3, 3), ("cuda", 0), ("cuda:5", 5), (types.SimpleNamespace(type="cuda",
                                 index=None), 0), (types.SimpleNamespace(type="cuda", index=2), 2)]:
            with self.subTest(device=device):
                self.assertEqual(cachalot_torch._device_index(device), expected)
        refused = [("cpu", ValueError, "Expected a cuda device, but got: cpu"),
                   ("cpu:1", ValueError, "Expected a cuda device, but got: cpu:1"),
                   ("meta:1", ValueError, "Expected a cuda device, but got: meta:1"),
                   (types.SimpleNamespace(type="cpu", index=1), ValueError, "Expected a cuda device, but got: cpu:1"),
                   (types.SimpleNamespace(type="cpu", index=None), ValueError, "Expected a cuda device, but got: cpu"),
                   ("cuda:x", RuntimeError, "Invalid device string: 'cuda:x'"),
                   ("cuda:-2", RuntimeError, "Invalid device string: 'cuda:-2'"),
                   ("cuda:01", RuntimeError, "Invalid device string: 'cuda:01'"),
                   ("", RuntimeError, "Invalid device string: ''"),
                   ([1], TypeError, "device must be"), (1.7, TypeError, "device must be"),
                   (True, TypeError, "device must be"), (object(), TypeError, "device must be")]
        for device, error, message in refused:
            for reader in self.READERS:
                with self.subTest(device=device, reader=reader.__name__):
                    with self.assertRaises(error) as e:
                        reader(device)
                    self.assertIn(message, str(e.exception))
                    self.assertNotIsInstance(e.exception, ctypes.ArgumentError)

    def test_ordinals_out_of_range_raise_before_any_call(self):
        lib = cachalot_torch.load_library()
        watched = copy.copy(lib)
        watched.dll = DllProxy(lib.dll)
        try:
            cachalot_torch._LIB = watched
            # No subTest: the first failure ends the test, before snapshot(2**32) could build
            # 2**32 lists, as it did when the ordinal was checked only by the C call.
            for ordinal in [2 ** 32, 2 ** 32 + 1, 2 ** 31, 64, -1, "cuda:64", "cuda:4294967296"]:
                for reader in self.READERS:
                    call = f"{reader.__name__}({ordinal!r})"
                    with self.assertRaises(RuntimeError, msg=call) as e:
                        reader(ordinal)
                    self.assertRegex(str(e.exception), r"^Invalid device argument -?\d+: cachalot serves "
                                                       r"CUDA devices 0 to 63$", call)
            self.assertEqual(watched.dll.asked, [], "no C call for an ordinal out of range")
        finally:
            cachalot_torch._LIB = lib

    def test_ordinals_past_torchs_device_count_raise_once_cuda_is_initialised(self):
        sys.modules["torch"] = fake_torch(initialized=True, device_count=2, current_device=1)
        for reader in self.READERS:
            with self.subTest(reader=reader.__name__):
                with self.assertRaisesRegex(RuntimeError, r"^Invalid device argument 2: this process has 2 CUDA"):
                    reader(2)
        self.assertEqual(list(cachalot_torch.memory_stats(1)), pytorch_stat_keys())
        self.assertEqual(len(cachalot_torch.snapshot()["device_traces"]), 2)
        self.assertIn("device ID 1 ", cachalot_torch.memory_summary(), "None is torch's current device")

    def test_once_cuda_is_initialised_the_device_is_still_checked_here(self):
        sys.modules["torch"] = fake_torch(initialized=True, device_count=2, current_device=1)
        self.assertIn("device ID 1 ", cachalot_torch.memory_summary("cuda"),
                      "an index-less 'cuda' is the current device")
        with self.assertRaises(ValueError):
            cachalot_torch.memory_stats("cpu")
        with self.assertRaises(TypeError):
            cachalot_torch.memory_stats(1.7)  # not the current device, as torch's optional reading would have it

    def test_a_bad_config_in_the_environment_is_a_valueerror_naming_it(self):
        with EnvVar(CONFIG_ENV, "policy:nope"):
            for reader in (cachalot_torch.memory_stats, cachalot_torch.memory_summary,
                           cachalot_torch.memory_allocated, cachalot_torch.max_memory_reserved):
                with self.subTest(reader=reader.__name__):
                    with self.assertRaises(ValueError) as e:
                        reader(0)
                    self.assertIn("CACHALOT_ALLOC_CONF", str(e.exception))
                    self.assertIn("'policy'", str(e.exception))

    def test_before_cuda_is_initialised(self):
        """The rule of the module's docstring: memory_stats() and the four figures read from it
        are empty, as PyTorch's; the summary, the snapshot and the reset read cachalot, which
        has no allocator yet; a bad device is refused all the same."""
        sys.modules["torch"] = fake_torch(initialized=False, device_count=1)
        self.assertEqual(cachalot_torch.memory_stats(), collections.OrderedDict())
        for figure in (cachalot_torch.memory_allocated, cachalot_torch.max_memory_allocated,
                       cachalot_torch.memory_reserved, cachalot_torch.max_memory_reserved):
            with self.subTest(figure=figure.__name__):
                self.assertEqual(figure(), 0)
                doc = " ".join((figure.__doc__ or "").split())
                self.assertIn(f"torch.cuda.{figure.__name__}() for cachalot", doc)
                self.assertIn("0 while CUDA is not initialised", doc)
        self.assertIn("Allocated memory", cachalot_torch.memory_summary())
        self.assertEqual(cachalot_torch.snapshot(), {"segments": [], "device_traces": [[]]})
        cachalot_torch.reset_peak_memory_stats()
        with self.assertRaises(ValueError):
            cachalot_torch.memory_stats("cpu")

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


def fake_torch(initialized=False, refuse_swap=False, lacking=(), device_count=1, current_device=0,
               version="2.15.0+cu132", cuda="13.2"):
    """A stand-in for the parts of torch that install() and the readers use, recording what
    it is asked."""
    torch = types.ModuleType("torch")
    torch.__version__ = version
    torch.version = types.SimpleNamespace(cuda=cuda)
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

    def get_device_index(device, optional=False):  # torch.cuda._get_device_index, for ordinals
        return current_device if device is None else device

    torch.cuda = types.SimpleNamespace(is_initialized=lambda: initialized, memory_allocated=memory_allocated,
                                       device_count=lambda: device_count, current_device=lambda: current_device,
                                       _get_device_index=get_device_index,
                                       memory=types.SimpleNamespace(CUDAPluggableAllocator=Pluggable,
                                                                    change_current_allocator=change_current_allocator))
    return torch


MINORS = ("2.11", "2.12", "2.13", "2.14", "2.15")


def fake_extensions(folder, minors=MINORS):
    """`folder` holding the stand-in extension under each minor's file name (a copy each, so
    each loads as its own library)."""
    for minor in minors:
        shutil.copy(FAKE_EXTENSION, os.path.join(folder, "libcachalot_torch_" + minor.replace(".", "_") + ".so"))
    return folder


@unittest.skipUnless(FAKE_EXTENSION, "needs CACHALOT_FAKE_EXTENSION (make python-test builds it)")
class Install(unittest.TestCase):
    def setUp(self):
        self.saved_conf = os.environ.pop("CACHALOT_ALLOC_CONF", None)
        cachalot_torch._INSTALLED = cachalot_torch._INSTALLED_CONFIG = cachalot_torch._EXTENSION = None
        self.extensions = fake_extensions(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.extensions)
        for name, value in (("CACHALOT_TORCH_EXTENSIONS", self.extensions), ("FAKE_EXTENSION_TORCH_VERSION", "215"),
                            ("FAKE_EXTENSION_REFUSE", None)):
            env = EnvVar(name, value)
            env.__enter__()
            self.addCleanup(env.__exit__, None, None, None)

    def tearDown(self):
        sys.modules.pop("torch", None)
        cachalot_torch._INSTALLED = cachalot_torch._INSTALLED_CONFIG = cachalot_torch._EXTENSION = None
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
        for extension in (True, False):
            cachalot_torch._EXTENSION = None
            sys.modules["torch"] = fake_torch(refuse_swap=True)
            with EnvVar("FAKE_EXTENSION_REFUSE", "1"), self.assertRaises(RuntimeError) as e:
                cachalot_torch.install(config="policy:pytorch", extension=extension)
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

    def test_install_loads_the_extension_of_the_running_pytorch_minor(self):
        for minor, version in (("2.11", "2.11.0+cu130"), ("2.13", "2.13.0"), ("2.15", "2.15.0+cu132")):
            cachalot_torch._INSTALLED = cachalot_torch._INSTALLED_CONFIG = cachalot_torch._EXTENSION = None
            torch = sys.modules["torch"] = fake_torch(version=version)
            with EnvVar("FAKE_EXTENSION_TORCH_VERSION", minor.replace(".", "")), warnings.catch_warnings():
                warnings.simplefilter("error")  # nothing to warn about: no fallback
                ext = cachalot_torch.install(config="policy:pytorch")
            self.assertEqual(ext.minor, minor)
            self.assertEqual(os.path.basename(ext.path), "libcachalot_torch_" + minor.replace(".", "_") + ".so")
            self.assertTrue(ext.is_current(), "the extension made itself PyTorch's allocator")
            self.assertEqual(ext._dll.fake_extension_installs(), 1, "installed once")
            self.assertEqual(torch.calls["swapped"], [], "no pluggable allocator was swapped in")
            self.assertIs(cachalot_torch.install(), ext, "a second install() is a no-op")
            self.assertEqual(ext._dll.fake_extension_installs(), 1)
            self.assertEqual(os.environ["CACHALOT_ALLOC_CONF"], f"policy:pytorch,pytorch_version:{minor}",
                             "the config follows the running PyTorch's release")
            os.environ.pop("CACHALOT_ALLOC_CONF")

    def assert_refused(self, *needles, **torch_args):
        cachalot_torch._INSTALLED = cachalot_torch._INSTALLED_CONFIG = cachalot_torch._EXTENSION = None
        torch = sys.modules["torch"] = fake_torch(**torch_args)
        with warnings.catch_warnings(), self.assertRaises(RuntimeError) as e:
            warnings.simplefilter("error")
            cachalot_torch.install(config="policy:pytorch")
        for needle in needles:
            self.assertIn(needle, str(e.exception))
        self.assertEqual(torch.calls["swapped"], [], "never a silent fallback to the pluggable path")
        self.assertIsNone(cachalot_torch._INSTALLED)
        self.assertNotIn("CACHALOT_ALLOC_CONF", os.environ, "a failed install leaves the config as it was")
        return str(e.exception)

    def test_a_pytorch_outside_the_supported_minors_is_refused_naming_them(self):
        for version in ("2.10.0+cu128", "2.16.0.dev20261201", "3.0.0", "fake"):
            self.assert_refused(f"PyTorch {version} is not supported", "2.11, 2.12, 2.13, 2.14, 2.15",
                                "pip install 'torch>=2.11,<2.16'", "install(extension=False)", version=version)

    def test_a_cpu_only_pytorch_is_refused_naming_the_fix(self):
        self.assert_refused("built without CUDA", "torch.version.cuda is None", "pip install --force-reinstall",
                            "torch==2.15.*", version="2.15.0+cpu", cuda=None)

    def test_no_extension_shipped_is_refused_naming_the_wheel(self):
        with tempfile.TemporaryDirectory() as empty, EnvVar("CACHALOT_TORCH_EXTENSIONS", empty):
            self.assert_refused("no PyTorch extension in " + empty, "make torch-extensions", "cachalot's wheel")

    def test_only_the_minors_shipped_are_supported(self):
        with tempfile.TemporaryDirectory() as folder, EnvVar("CACHALOT_TORCH_EXTENSIONS", folder):
            fake_extensions(folder, ("2.11", "2.12"))
            self.assertEqual(cachalot_torch.supported_minors(), ["2.11", "2.12"])
            self.assert_refused("PyTorch 2.15.0 is not supported", "supports PyTorch 2.11, 2.12",
                                "'torch>=2.11,<2.13'", version="2.15.0")

    def test_an_extension_built_for_another_minor_is_refused(self):
        with EnvVar("FAKE_EXTENSION_TORCH_VERSION", "214"):
            self.assert_refused("was built for PyTorch 2.14, not 2.15", "make torch-extensions")

    def test_an_extension_newer_than_the_library_loaded_is_refused_naming_both(self):
        newer = FAKE_EXTENSION.replace(".so", "_newer.so")
        shutil.copy(newer, os.path.join(self.extensions, "libcachalot_torch_2_15.so"))
        message = self.assert_refused("needs a newer libcachalot than the one loaded",
                                      "cachalot_function_of_a_newer_build", "make torch-extensions")
        self.assertIn(cachalot_torch.load_library().path, message)

    def write_manifest(self, minors):
        entries = {}
        for minor, digest in minors.items():
            entries[minor] = {"file": "libcachalot_torch_" + minor.replace(".", "_") + ".so", "torch": minor + ".0",
                              "sha256": digest}
        with open(os.path.join(self.extensions, "extensions.json"), "w") as f:
            json.dump({"minors": entries}, f)

    def digest_of(self, minor):
        import hashlib
        with open(os.path.join(self.extensions, "libcachalot_torch_" + minor.replace(".", "_") + ".so"), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    def test_a_missing_extension_of_a_supported_minor_asks_for_a_reinstall_not_another_pytorch(self):
        self.write_manifest({m: self.digest_of(m) for m in MINORS})
        os.remove(os.path.join(self.extensions, "libcachalot_torch_2_15.so"))
        message = self.assert_refused("the extension for PyTorch 2.15 is missing from " + self.extensions,
                                      "make torch-extensions")
        self.assertNotIn("not supported", message)

    def test_a_damaged_extension_is_refused_before_it_is_loaded(self):
        self.write_manifest({m: self.digest_of(m) for m in MINORS})
        path = os.path.join(self.extensions, "libcachalot_torch_2_15.so")
        with open(path, "r+b") as f:
            f.truncate(4096)  # loading this would end the process (SIGBUS), not raise
        self.assert_refused("is damaged (its sha256 is not the one its build recorded)", "make torch-extensions")

    def test_the_manifest_names_the_supported_minors(self):
        self.write_manifest({"2.14": self.digest_of("2.14"), "2.15": self.digest_of("2.15")})
        self.assertEqual(cachalot_torch.supported_minors(), ["2.14", "2.15"])
        self.assert_refused("PyTorch 2.13.0 is not supported", "supports PyTorch 2.14, 2.15", version="2.13.0")

    def test_a_library_without_the_entry_points_is_refused_naming_them(self):
        shutil.copy(FAKE_CUDA, os.path.join(self.extensions, "libcachalot_torch_2_15.so"))
        self.assert_refused("is no cachalot extension (it lacks cachalot_torch_extension_torch_version")

    def test_a_pre_release_or_source_build_of_pytorch_is_refused_unless_asked_for(self):
        for version in ("2.15.0a0+git1234abc", "2.15.0rc1", "2.15.0.dev20261101+cu132", "2.15.0a0+872d972e41.nv26.10"):
            self.assert_refused(f"PyTorch {version} is not a release build", "CACHALOT_ANY_TORCH_BUILD=1",
                                "pip install 'torch==2.15.*'", version=version)
        cachalot_torch._INSTALLED = cachalot_torch._EXTENSION = None
        sys.modules["torch"] = fake_torch(version="2.15.0a0+git1234abc")
        with EnvVar("CACHALOT_ANY_TORCH_BUILD", "1"):
            self.assertTrue(cachalot_torch.install(config="policy:pytorch").is_current())

    def test_a_rocm_build_is_refused_as_such(self):
        cachalot_torch._INSTALLED = cachalot_torch._EXTENSION = None
        torch = sys.modules["torch"] = fake_torch(version="2.15.0+rocm6.4", cuda=None)
        torch.version.hip = "6.4"
        with self.assertRaisesRegex(RuntimeError, "is a ROCm build; cachalot drives CUDA only"):
            cachalot_torch.install()

    def test_the_config_follows_the_running_pytorch_unless_it_names_a_release(self):
        sys.modules["torch"] = fake_torch(version="2.12.1+cu130")
        with EnvVar("FAKE_EXTENSION_TORCH_VERSION", "212"):
            cachalot_torch.install()
        self.assertEqual(os.environ["CACHALOT_ALLOC_CONF"], "pytorch_version:2.12")
        cachalot_torch._INSTALLED = cachalot_torch._EXTENSION = None
        os.environ.pop("CACHALOT_ALLOC_CONF")
        sys.modules["torch"] = fake_torch()
        with self.assertWarnsRegex(UserWarning, "follows PyTorch 2.11's allocator \\(pytorch_version\\), while "
                                                "PyTorch 2.15 is running"):
            cachalot_torch.install(config="pytorch_version:2.11,policy:pytorch")
        self.assertEqual(os.environ["CACHALOT_ALLOC_CONF"], "pytorch_version:2.11,policy:pytorch")

    def test_pytorchs_own_config_variable_is_named_when_it_no_longer_applies(self):
        sys.modules["torch"] = fake_torch()
        with EnvVar("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"), \
                self.assertWarnsRegex(UserWarning, "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' does not apply "
                                                   "to cachalot; set CACHALOT_ALLOC_CONF"):
            cachalot_torch.install()

    def test_installs_from_two_threads_make_one_allocator(self):
        sys.modules["torch"] = fake_torch()
        results, barrier = [], threading.Barrier(4)

        def one(config):
            barrier.wait()
            try:
                results.append(cachalot_torch.install(config=config))
            except RuntimeError as e:
                results.append(e)

        threads = [threading.Thread(target=one, args=(c,)) for c in
                   ("policy:pytorch", "policy:pytorch", "lock_per_stream:True", "policy:pytorch")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        installed = [r for r in results if not isinstance(r, Exception)]
        self.assertEqual(len({id(r) for r in installed}), 1, "one allocator, whichever thread came first")
        self.assertEqual(installed[0]._dll.fake_extension_installs(), 1, "installed once")
        refused = [r for r in results if isinstance(r, Exception)]
        self.assertTrue(all("already installed with" in str(e) for e in refused), refused)
        self.assertEqual(len(installed) + len(refused), 4)

    def test_a_file_that_is_no_library_is_refused_naming_it(self):
        with open(os.path.join(self.extensions, "libcachalot_torch_2_15.so"), "wb") as f:
            f.write(b"not a shared library")
        self.assert_refused("the extension for PyTorch 2.15", "does not load into this PyTorch")

    def test_torch_versions_are_read_to_their_minor(self):
        for version, minor in (("2.15.0+cu132", "2.15"), ("2.11.0", "2.11"), ("2.12.1+cpu", "2.12"),
                               ("2.16.0a0+git1234", "2.16"), ("2.14", "2.14"), ("fake", None), ("", None)):
            self.assertEqual(cachalot_torch.torch_minor(version), minor, version)

    def test_the_pluggable_path_only_when_asked_for(self):
        torch = sys.modules["torch"] = fake_torch(version="2.10.0")  # a version the extension lacks
        alloc = cachalot_torch.install(config="policy:pytorch,max_split_size_mb:128", extension=False)
        lib = cachalot_torch.load_library()
        self.assertEqual(alloc.args, (lib.path, "cachalot_torch_malloc", "cachalot_torch_free"))
        self.assertEqual(torch.calls["swapped"], [alloc])
        self.assertEqual(torch.calls["hooks"], {setter: lib.address(symbol) for setter, symbol in cachalot_torch.HOOKS})
        self.assertTrue(all(torch.calls["hooks"].values()))
        self.assertEqual(os.environ["CACHALOT_ALLOC_CONF"], "policy:pytorch,max_split_size_mb:128")
        self.assertIs(cachalot_torch.install(extension=False), alloc, "a second install() is a no-op")
        with self.assertRaisesRegex(RuntimeError, "already installed through the pluggable path"):
            cachalot_torch.install()  # the extension cannot replace it, and no switch is silent
        with self.assertRaises(RuntimeError):
            cachalot_torch.install(config="policy:cachalot", extension=False)
        self.assertEqual(cachalot_torch.memory_stats(), collections.OrderedDict(), "CUDA not initialised yet")

    def test_a_second_install_compares_with_the_config_installed(self):
        sys.modules["torch"] = fake_torch()
        alloc = cachalot_torch.install(config="policy:pytorch,max_split_size_mb:128")
        self.assertIs(cachalot_torch.install(config=" policy : pytorch , max_split_size_mb:128 "), alloc,
                      "spaces around keys and values do not count, as in the core's parser")
        os.environ["CACHALOT_ALLOC_CONF"] = "policy:cachalot"  # changed behind install()'s back
        with self.assertRaises(RuntimeError) as e:
            cachalot_torch.install(config="policy:cachalot")
        self.assertIn("already installed with CACHALOT_ALLOC_CONF='policy:pytorch,max_split_size_mb:128,"
                      "pytorch_version:2.15'", str(e.exception))
        with self.assertRaises(RuntimeError):
            cachalot_torch.install(config="policy:pytorch")

    def test_a_second_install_without_a_path_keeps_the_library_loaded(self):
        sys.modules["torch"] = fake_torch()
        original = cachalot_torch.load_library()
        with tempfile.TemporaryDirectory() as tmp, EnvVar("CACHALOT_LIB", None):
            copied = shutil.copy(original.path, os.path.join(tmp, "libcachalot.so"))
            cachalot_torch._LIB = None
            try:
                alloc = cachalot_torch.install(lib_path=copied)
                self.assertIs(cachalot_torch.install(), alloc, "the library loaded, not the one found by default")
                self.assertIs(cachalot_torch.install(lib_path=copied), alloc)
                with self.assertRaisesRegex(RuntimeError, "already loaded in this process"):
                    cachalot_torch.install(lib_path=original.path)
            finally:
                cachalot_torch._LIB = original

    def test_a_config_is_split_as_the_core_splits_it(self):
        pairs = cachalot_torch._config_pairs
        self.assertEqual(pairs(" a : 1 ,b:[x:1,y:2] , c:3"), [("a", "1"), ("b", "[x:1,y:2]"), ("c", "3")])
        self.assertEqual(pairs(""), [])
        for refused in ["garbage", ":1", "a:", "a:[1", "a:[1]x"]:
            self.assertIsNone(pairs(refused), refused)

    def test_keys_without_effect_under_cachalots_policy_are_a_warning(self):
        sys.modules["torch"] = fake_torch()
        with self.assertWarnsRegex(UserWarning, "CACHALOT_ALLOC_CONF: max_split_size_mb has no effect under "
                                                "policy:cachalot.*add policy:pytorch"):
            cachalot_torch.install(config="max_split_size_mb:128")
        cachalot_torch._INSTALLED = cachalot_torch._INSTALLED_CONFIG = None
        sys.modules["torch"] = fake_torch()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # PyTorch's policy uses the key: nothing to say
            cachalot_torch.install(config="policy:pytorch,max_split_size_mb:128,expandable_segments:True")
        lib = cachalot_torch.load_library()
        self.assertEqual(lib.config_notes("policy:pytorch"), [])
        self.assertEqual(len(lib.config_notes("expandable_segments:True,max_non_split_rounding_mb:64")), 2)
        with self.assertRaises(cachalot_torch.CachalotError):
            lib.config_notes("bogus_key:1")

    def test_a_missing_hook_is_a_warning(self):
        torch = sys.modules["torch"] = fake_torch(lacking=("set_record_stream_fn",))
        with self.assertWarnsRegex(RuntimeWarning, "set_record_stream_fn: cachalot_torch_record_stream stays unwired"):
            alloc = cachalot_torch.install(extension=False)
        self.assertEqual(set(torch.calls["hooks"]), {"set_reset_fn", "set_memory_fraction_fn"})
        self.assertEqual(torch.calls["swapped"], [alloc])


if __name__ == "__main__":
    unittest.main(verbosity=2)
