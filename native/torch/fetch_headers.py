"""Fetches the headers the PyTorch extension (native/torch/) compiles against, for a machine
without PyTorch or CUDA: PyTorch's from its wheel on PyPI, and the CUDA runtime's from NVIDIA's
wheels there. Only the include folders are kept.

usage: python3 native/torch/fetch_headers.py DIR TORCH_VERSION CUDA_VERSION
       (make torch-extension calls it; DIR/torch/include and DIR/cuda/include result)

Invariant: DIR/.complete exists only once every header folder is in place, so an interrupted
fetch is fetched again, never half used.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

out, torch_version, cuda_version = sys.argv[1], sys.argv[2], sys.argv[3]
done = os.path.join(out, ".complete")
if os.path.exists(done):
    sys.exit(0)
shutil.rmtree(out, ignore_errors=True)
os.makedirs(out)
# (wheel, the folder inside it whose files are kept, where they go under DIR)
wanted = [(f"torch=={torch_version}", "torch/include/", "torch/include"),
          (f"nvidia-cuda-runtime=={cuda_version}", "nvidia/cu13/include/", "cuda/include"),
          (f"nvidia-cuda-crt=={cuda_version}", "nvidia/cu13/include/", "cuda/include")]
with tempfile.TemporaryDirectory() as wheels:
    for requirement, inside, to in wanted:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                        "--only-binary=:all:", "-d", wheels, requirement], check=True)
    for wheel in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
        with zipfile.ZipFile(wheel) as z:
            for requirement, inside, to in wanted:
                for name in z.namelist():
                    if name.startswith(inside) and not name.endswith("/"):
                        target = os.path.join(out, to, name[len(inside):])
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                        with z.open(name) as src, open(target, "wb") as dst:
                            shutil.copyfileobj(src, dst)
open(done, "w").close()
print(f"PyTorch {torch_version} and CUDA {cuda_version} headers in {out}")
