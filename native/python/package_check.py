"""Checks what `pip install ./native/python` installed, run with that environment's python from
outside the repository (`make python-package`): the modules import from site-packages, not from
this checkout; cachalot_torch finds the library pip built and loads it; the PyTorch extension's
sources and the header it includes are installed beside it, so install() can build it with no
checkout at hand."""
import os
import sys

import cachalot_native
import cachalot_replay  # noqa: F401  (imports without torch)
import cachalot_torch

site = os.path.dirname(os.path.dirname(cachalot_native.__file__))
failures = []
if os.path.dirname(cachalot_torch.__file__) != site:
    failures.append(f"cachalot_torch imported from {cachalot_torch.__file__}, not {site}")
path = cachalot_torch.find_library()
if not path.startswith(cachalot_native.ROOT):
    failures.append(f"the library found is {path}, not the one pip installed in {cachalot_native.ROOT}")
lib = cachalot_torch.load_library()
if not lib.version():
    failures.append("the installed library reports no version")
for part in ("torch/cachalot_allocator.cpp", "torch/private_pools.h", "torch/memory_history.h", "include/cachalot.h"):
    if not os.path.isfile(os.path.join(cachalot_native.ROOT, part)):
        failures.append(f"{part} is not installed in {cachalot_native.ROOT}")
print("\n".join(failures) or f"package ok: {path} (cachalot {lib.version()})")
sys.exit(1 if failures else 0)
