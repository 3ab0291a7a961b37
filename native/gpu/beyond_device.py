"""The CUDA path of a request larger than the device: through the C ABI on a real GPU, under
the default policy, a 150 GiB request must fail as out of memory at once (no driver calls).

    CACHALOT_LIB=target/release/libcachalot.so python3 native/gpu/beyond_device.py
"""
import ctypes, json, os, time

lib = ctypes.CDLL(os.environ.get("CACHALOT_LIB", "target/release/libcachalot.so"))
# Sizes past 2 GiB need size_t: ctypes would pass a plain int, truncated to 32 bits.
lib.cachalot_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.cachalot_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.cachalot_allocator_new_cuda.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
lib.cachalot_allocator_free.argtypes = [ctypes.c_void_p]
OUT_OF_MEMORY = 5
rows = []
for conf in [b"", b"policy:pytorch"]:
    a = ctypes.c_void_p()
    assert lib.cachalot_allocator_new_cuda(0, conf, ctypes.byref(a)) == 0
    p = ctypes.c_void_p()
    assert lib.cachalot_malloc(a, 3 << 20, None, ctypes.byref(p)) == 0
    assert lib.cachalot_free(a, p) == 0
    t = time.perf_counter()
    status = lib.cachalot_malloc(a, 150 << 30, None, ctypes.byref(p))
    ms = (time.perf_counter() - t) * 1e3
    rows.append(dict(conf=conf.decode() or "default", status=status, ms=round(ms, 3)))
    lib.cachalot_allocator_free(a)
ok = all(r["status"] == OUT_OF_MEMORY for r in rows) and rows[0]["ms"] < 5
print(json.dumps(dict(beyond_device=rows)))
print("BEYOND DEVICE", "PASS" if ok else "FAIL")
