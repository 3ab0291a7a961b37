"""cachalot plugged into PyTorch: a short training loop with cachalot as PyTorch's CUDA allocator
(torch.cuda.memory.CUDAPluggableAllocator over cachalot_torch_malloc / cachalot_torch_free), then
the optional hooks called directly: record_stream on a side stream, set_memory_fraction, empty_cache.

usage: CACHALOT_ALLOC_CONF=... python3 torch_plugin_check.py path/to/libcachalot.so
Prints one JSON line; exit 0 when the loss went down and cachalot reported no error.
"""
import ctypes, json, math, sys

import torch

lib_path = sys.argv[1]
alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "cachalot_torch_malloc", "cachalot_torch_free")
torch.cuda.memory.change_current_allocator(alloc)
lib = ctypes.CDLL(lib_path)
lib.cachalot_last_error_message.restype = ctypes.c_size_t
lib.cachalot_last_error_message.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
lib.cachalot_torch_set_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
lib.cachalot_torch_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]


def last_error():
    buf = ctypes.create_string_buffer(4096)
    lib.cachalot_last_error_message(buf, len(buf))
    return buf.value.decode()


torch.manual_seed(0)
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(512, 1024, device=dev)
target = torch.randn(512, 1024, device=dev)
losses = []
for step in range(40):
    big = torch.empty((step % 5 + 1) * (8 << 20), dtype=torch.uint8, device=dev)  # varying sizes: splits, reuse
    loss = (model(x) - target).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(float(loss))
    del big

# A tensor used on a side stream: record_stream keeps its memory from reuse until the side
# stream's work is done.
side = torch.cuda.Stream()
t = torch.ones(1 << 24, device=dev)
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    u = (t * 2).sum()
lib.cachalot_torch_record_stream(ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(side.cuda_stream))
del t
again = torch.zeros(1 << 24, device=dev)  # must not clobber t's memory while the side stream reads it
torch.cuda.synchronize()
side_ok = abs(float(u) - 2.0 * (1 << 24)) < 1e-6 * (1 << 24)
lib.cachalot_torch_set_memory_fraction(0.9, 0)
del again
lib.cachalot_torch_empty_cache()
torch.cuda.synchronize()
err = last_error()
ok = all(math.isfinite(v) for v in losses) and losses[-1] < losses[0] and side_ok and err == ""
print(json.dumps(dict(ok=ok, first_loss=round(losses[0], 4), last_loss=round(losses[-1], 4), side_stream_ok=side_ok,
                      last_error=err, torch=torch.__version__)))
sys.exit(0 if ok else 1)
