"""How many address ranges of a regrowing stream's size a process can reserve on this GPU, and
what the driver answers past the last: cachalot's large pool reserves 11 times the device's
memory a stream under `regrow_region` (core/src/engine/paged/vm.rs, `REGION_RANGES`), and falls
back to the device's memory and an eighth more when the driver answers out of memory.

    python3 native/gpu/address_space_check.py

Reserves ranges of 11 times the device's total memory with cuMemAddressReserve until the driver
refuses one (at most 200), then one plain range (1.125 times), prints the counts and error
codes, and frees everything. Needs PyTorch only to create the CUDA context.
"""
import ctypes, json, sys

import torch

torch.cuda.init()
torch.zeros(1, device="cuda")  # the primary context, current on this thread
cuda = ctypes.CDLL("libcuda.so.1")
total = torch.cuda.get_device_properties(0).total_memory
granule = 2 << 20


def whole(n):
    return (n + granule - 1) // granule * granule


def reserve(size):
    ptr = ctypes.c_uint64(0)
    rc = cuda.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                  ctypes.c_uint64(0), ctypes.c_uint64(0))
    return rc, ptr.value


region, plain = whole(11 * total), whole(total + total // 8)
held, refusal = [], None
while len(held) < 200:
    rc, ptr = reserve(region)
    if rc != 0:
        refusal = rc
        break
    held.append((ptr, region))
plain_rc, plain_ptr = reserve(plain)
if plain_rc == 0:
    held.append((plain_ptr, plain))
for ptr, size in held:
    cuda.cuMemAddressFree(ctypes.c_uint64(ptr), ctypes.c_size_t(size))
result = dict(device=torch.cuda.get_device_name(0), total_bytes=total, region_range_bytes=region,
              region_ranges_reserved=len(held) - (plain_rc == 0), refusal_code=refusal,
              plain_range_bytes=plain, plain_range_after_refusal_code=plain_rc)
print("RESULT " + json.dumps(result))
# CUDA_ERROR_OUT_OF_MEMORY (2) is what the fallback in vm.rs expects.
sys.exit(0 if refusal in (None, 2) else 1)
