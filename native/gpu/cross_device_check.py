"""A tensor of GPU 0 read by a stream of GPU 1 (`Tensor.record_stream` across devices, which
PyTorch allows), with cachalot plugged in as PyTorch's allocator: freeing the tensor must not
fail, and its memory must not be handed out again before GPU 1's stream has read it.

GPU 1's stream sleeps, then copies the tensor; the tensor is freed at once and a tensor of the
same size, filled with other values, is allocated on GPU 0 straight after. The copy must still
see the old values. An event of GPU 0 cannot be recorded on GPU 1's stream, so cachalot's free
waits for that stream instead: the free takes about as long as the sleep.

usage (the nvidia-h200-x2 machine, from the repo root; carry target/release/libcachalot.so):
    CACHALOT_LIB=target/release/libcachalot.so python3 native/gpu/cross_device_check.py
Prints one JSON line and a VERDICT line; exit 0 when every check passed, 1 when one failed,
2 when fewer than 2 GPUs are visible.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

if torch.cuda.device_count() < 2:
    print(f"cross_device_check: refused: 2 GPUs needed, {torch.cuda.device_count()} visible")
    sys.exit(2)

import cachalot_torch  # noqa: E402

cachalot_torch.install()
lib = cachalot_torch.load_library().dll

SLEEP_CYCLES = 1_000_000_000  # about half a second on an H200
n = (64 << 20) // 4
x = torch.full((n,), 1.0, device="cuda:0")
torch.cuda.synchronize(0)
before = cachalot_torch.memory_stats(0)
other = torch.cuda.Stream(device="cuda:1")
with torch.cuda.device(1), torch.cuda.stream(other):
    torch.cuda._sleep(SLEEP_CYCLES)
    y = x.to("cuda:1", non_blocking=True)  # runs on `other`, after the sleep
x.record_stream(other)
address = x.data_ptr()
t0 = time.perf_counter()
del x
free_s = time.perf_counter() - t0
z = torch.full((n,), 7.0, device="cuda:0")
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
after = cachalot_torch.memory_stats(0)
message_len = lib.cachalot_last_error_message(None, 0)

checks = {
    "copy_saw_the_old_values": bool((y == 1.0).all().item()),
    "new_tensor_holds_new_values": bool((z == 7.0).all().item()),
    "no_cachalot_error": message_len == 0,
    "free_waited_for_the_other_gpu": free_s > 0.05,
    "memory_not_leaked": after["reserved_bytes.all.current"] == before["reserved_bytes.all.current"],
}
result = {
    "free_s": round(free_s, 4),
    "reused_the_block": z.data_ptr() == address,
    "reserved_before": before["reserved_bytes.all.current"],
    "reserved_after": after["reserved_bytes.all.current"],
    "checks": checks,
}
print(json.dumps(result))
ok = all(checks.values())
print("VERDICT", "PASS" if ok else "FAIL", *[k for k, v in checks.items() if not v])
sys.exit(0 if ok else 1)
