"""cachalot_torch's readers against real PyTorch and CUDA: with cachalot plugged in, each
reader takes the device forms torch.cuda's take, gives figures that follow the tensors, and
refuses what torch refuses. On every GPU visible (one or more).

usage (from the repo root; carry target/release/libcachalot.so):
    CACHALOT_LIB=target/release/libcachalot.so python3 native/gpu/python_api_check.py
Prints one line per check and a VERDICT line; exit 0 when every check passed.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

import cachalot_torch as ct  # noqa: E402

ct.install()
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + str(detail) if detail else ''}")


def raises(kind, f):
    try:
        f()
    except kind as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - the wrong kind is a failure, shown
        return f"wrong kind {type(e).__name__}: {e}"
    return None


count = torch.cuda.device_count()
for d in range(count):
    before = ct.memory_allocated(d)
    x = torch.empty(64 << 20, dtype=torch.uint8, device=f"cuda:{d}")
    forms = [d, f"cuda:{d}", torch.device("cuda", d)]
    seen = [ct.memory_allocated(f) for f in forms]
    check(f"cuda:{d}: memory_allocated follows a 64 MiB tensor, every device form",
          all(s - before == 64 << 20 for s in seen), seen)
    stats = ct.memory_stats(d)
    check(f"cuda:{d}: memory_stats has torch's keys, sorted", list(stats) == sorted(stats)
          and stats["allocated_bytes.all.current"] == ct.memory_allocated(d) and "num_alloc_retries" in stats, len(stats))
    check(f"cuda:{d}: reserved >= allocated", ct.memory_reserved(d) >= ct.memory_allocated(d))
    ct.reset_peak_memory_stats(d)
    check(f"cuda:{d}: peak reset to current", ct.max_memory_allocated(d) == ct.memory_allocated(d))
    del x
    ct.empty_cache()
    check(f"cuda:{d}: empty_cache returns the freed tensor's memory", ct.memory_allocated(d) == before)
    check(f"cuda:{d}: memory_summary names the device", f"device ID {d}" in ct.memory_summary(d))

with torch.cuda.device(count - 1):
    check("the current device is torch's", ct.memory_stats() == ct.memory_stats(count - 1))
snap = ct.snapshot()
check("snapshot has one history list per device", len(snap["device_traces"]) >= count, len(snap["device_traces"]))
e = raises(ValueError, lambda: ct.memory_stats("cpu"))
check("'cpu' is a ValueError", e is not None and "wrong kind" not in e, e)
e = raises(RuntimeError, lambda: ct.memory_stats(count))
check(f"ordinal {count} (past the device count) is a RuntimeError", e is not None and "wrong kind" not in e, e)
e = raises(RuntimeError, lambda: ct.memory_stats("cuda:x"))
check("'cuda:x' is a RuntimeError", e is not None and "wrong kind" not in e, e)
ok = all(results)
print("VERDICT", "PASS" if ok else "FAIL", f"({sum(results)} of {len(results)} checks, {count} GPU(s))")
sys.exit(0 if ok else 1)
