"""Checks what `pip install dist/cachalot-*.whl` installed in a fresh virtual environment beside
PyPI's torch, run with that environment's python from outside the repository, with no compiler,
ninja, nvcc or cargo on PATH (`make wheel-test`), as a PyTorch user's machine has it:

  - the modules import from site-packages, not from this checkout, and find the library the
    wheel installed;
  - the wheel carries an extension for every supported PyTorch minor;
  - cachalot_torch.install() loads the extension of this PyTorch into it (every symbol it needs
    resolves against this PyTorch's libraries) and makes cachalot PyTorch's current CUDA
    allocator, without a GPU (no CUDA call is made before the first allocation);
  - what needs no GPU of the interface each PyTorch added reaches the extension: the memory
    history's user metadata, kept per thread, and (2.14 on) the answer that it is recorded;
  - the `cachalot` command is on the environment's PATH and runs.

usage: python - MINORS EXPECTED_MINOR < wheel_check.py   (native/python/wheel_test.py runs it)
       MINORS: the minors the wheel must carry ("2.11,2.12,..."); EXPECTED_MINOR: the PyTorch
       minor this environment imports.

Prints one line per check, then 'N passed, N failed'; exits 1 on any failure.
"""
import os
import shutil
import subprocess
import sys
import threading
import warnings

import cachalot_native
import cachalot_replay  # noqa: F401  (imports without torch)
import cachalot_torch

EXPECTED_MINORS, EXPECTED_TORCH = sys.argv[1].split(","), sys.argv[2]
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")


site = os.path.dirname(os.path.dirname(cachalot_native.__file__))
check("imported from site-packages", os.path.dirname(cachalot_torch.__file__) == site, cachalot_torch.__file__)
tools = {t: shutil.which(t) for t in ("cc", "c++", "g++", "gcc", "nvcc", "ninja", "cargo")}
check("no compiler, ninja or cargo on PATH", not any(tools.values()),
      ", ".join(f"{t} at {p}" for t, p in tools.items() if p))
path = cachalot_torch.find_library()
check("the library is the wheel's", path.startswith(cachalot_native.ROOT), path)
check("an extension for each supported PyTorch", cachalot_torch.supported_minors() == EXPECTED_MINORS,
      ", ".join(cachalot_torch.supported_minors()))

import torch  # noqa: E402

check(f"this environment imports PyTorch {EXPECTED_TORCH}", cachalot_torch.torch_minor(torch.__version__) == EXPECTED_TORCH,
      f"{torch.__version__} from {torch.__file__}")
with warnings.catch_warnings():
    warnings.simplefilter("error")  # a fallback would warn; there is none
    ext = cachalot_torch.install(config="policy:pytorch")
check(f"install() loads the extension for PyTorch {torch.__version__}",
      isinstance(ext, cachalot_torch.Extension) and ext.minor == cachalot_torch.torch_minor(torch.__version__),
      ext.path)
check("cachalot is PyTorch's current CUDA allocator", ext.is_current())
memory = torch.cuda.memory
if hasattr(memory, "_set_memory_metadata"):  # the user metadata of memory history entries, per thread
    memory._set_memory_metadata("cachalot check")
    seen = []
    other = threading.Thread(target=lambda: seen.append(memory._get_memory_metadata()))
    other.start()
    other.join()
    check("user metadata is kept per thread by cachalot's extension",
          memory._get_memory_metadata() == "cachalot check" and seen == [""], f"{memory._get_memory_metadata()!r}, {seen}")
    memory._set_memory_metadata("")
if hasattr(memory, "_memory_metadata_supported"):  # 2.14 on
    check("the extension says it records user metadata", memory._memory_metadata_supported())
check("CUDA is not initialised by install()", not torch.cuda.is_initialized())
summary = cachalot_torch.memory_summary()
check("memory_summary() reads cachalot", "cachalot memory summary" in summary, summary.splitlines()[1].strip())
cli = shutil.which("cachalot")
run = subprocess.run([cli or "cachalot", "replay", "mixed_fc_conv", "--config", "policy:pytorch"],
                     capture_output=True, text=True) if cli else None
check("the cachalot command is on PATH and replays", run is not None and run.returncode == 0,
      (cli or "not found") + ("" if run is None else f" (exit {run.returncode}) {run.stderr.strip()[:200]}"))

failed = results.count(False)
print(f"{results.count(True)} passed, {failed} failed")
sys.exit(1 if failed else 0)
