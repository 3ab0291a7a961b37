"""Builds cachalot's PyTorch extension (native/torch/cachalot_allocator.cpp) once per supported
PyTorch minor, on a machine with no PyTorch, no CUDA toolkit and no GPU: each build compiles
against that PyTorch's headers and links against its libraries, both taken from its wheel on
PyPI, with the CUDA runtime's headers from NVIDIA's wheels there.

usage: python3 native/torch/build_extensions.py --lib target/release/libcachalot.so \
           --sdk target/torch-sdk --out target/torch-ext [--syntax-only] [MINOR ...]
       (make torch-extensions and make wheel call it; MINOR such as 2.15, default every one)

Why prebuilt: a PyTorch extension's C++ ABI is that of one PyTorch minor, and a user's machine
with `pip install torch` has no compiler, ninja or CUDA toolkit. The extension has no Python
module (cachalot_torch loads it with ctypes), so one build serves every Python version.

Each build, `libcachalot_torch_<MAJOR>_<MINOR>.so`:
  - is compiled with the C++ standard PyTorch's own extension builds use for that minor
    (torch.utils.cpp_extension), warnings as errors, -O2;
  - links PyTorch's libraries by name (the running PyTorch has loaded them) and
    libcachalot.so.0.x by its SONAME beside it ($ORIGIN), and links no CUDA runtime: the
    one PyTorch loaded (CUDA 12 or 13) serves its calls;
  - is linked a second time, thrown away, with every symbol required to resolve against that
    PyTorch's libraries, the CUDA runtime and libcachalot, so a symbol that version lacks
    fails here and not in a user's process.

OUT/extensions.json lists each minor whose extension is in OUT, with its file, the PyTorch
release it was built against and its sha256: cachalot_torch reads its supported minors from it
and refuses a file whose hash differs (a damaged install), naming the reinstall.

Invariant: SDK/<version>/.complete exists only once that version's headers and libraries are
all in place, so an interrupted download is fetched again, never half used.
"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# minor: (the PyPI release built against, the CUDA headers of its wheels' CUDA, C++ standard).
# A patch release keeps its minor's ABI; the newest patch is the one `pip install` picks.
BUILDS = {
    "2.11": ("2.11.0", "13.0.*", "c++17"),
    "2.12": ("2.12.1", "13.0.*", "c++20"),  # PyTorch's own extension builds take C++20 from 2.12
    "2.13": ("2.13.0", "13.0.*", "c++20"),  # (its headers use <=> from 2.14, and 2.15's require it)
    "2.14": ("2.14.1", "13.0.*", "c++20"),
    "2.15": ("2.15.0", "13.2.*", "c++20"),
}
# The libraries of torch/lib the extension links against (those it uses are kept, --as-needed).
TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch_cuda.so", "libtorch_cpu.so")
WARNINGS = ["-Wall", "-Wextra", "-Werror"]


def fetch(sdk, minor):
    """The folder holding `minor`'s headers and libraries, downloaded on first use."""
    torch_version, cuda_version, _ = BUILDS[minor]
    root = os.path.join(sdk, torch_version)
    if os.path.exists(os.path.join(root, ".complete")):
        return root
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    # (wheel, the folder inside it whose files are kept, the files kept (None: all), where they go)
    cuda_dir = "nvidia/cu13/"
    wanted = [(f"torch=={torch_version}", "torch/include/", None, "torch/include"),
              (f"torch=={torch_version}", "torch/lib/", TORCH_LIBS, "torch/lib"),
              (f"nvidia-cuda-runtime=={cuda_version}", cuda_dir + "include/", None, "cuda/include"),
              (f"nvidia-cuda-runtime=={cuda_version}", cuda_dir + "lib/", ("libcudart_static.a",), "cuda/lib"),
              (f"nvidia-cuda-crt=={cuda_version}", cuda_dir + "include/", None, "cuda/include")]
    with tempfile.TemporaryDirectory() as wheels:
        for requirement in dict.fromkeys(w[0] for w in wanted):
            # Any Python's wheel of torch holds the same headers and libraries.
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                            "--no-cache-dir", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
                            "-d", wheels, requirement], check=True)
        for wheel in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
            with zipfile.ZipFile(wheel) as z:
                for _, inside, only, to in wanted:
                    for name in z.namelist():
                        rest = name[len(inside):]
                        if not name.startswith(inside) or name.endswith("/") or (only and rest not in only):
                            continue
                        target = os.path.join(root, to, rest)
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                        with z.open(name) as src, open(target, "wb") as dst:
                            shutil.copyfileobj(src, dst)
    for lib in TORCH_LIBS:
        if not os.path.isfile(os.path.join(root, "torch", "lib", lib)):
            sys.exit(f"torch {torch_version}'s wheel has no torch/lib/{lib}")
    open(os.path.join(root, ".complete"), "w").close()
    return root


def build(minor, sdk, lib, out, syntax_only):
    root = fetch(sdk, minor)
    standard = BUILDS[minor][2]
    source = os.path.join(HERE, "cachalot_allocator.cpp")
    includes = ["-I" + os.path.join(REPO, "include"), "-isystem", os.path.join(root, "torch", "include"),
                "-isystem", os.path.join(root, "cuda", "include")]
    compile_flags = [f"-std={standard}", "-O2", "-fPIC", "-fvisibility=hidden", "-D_GLIBCXX_USE_CXX11_ABI=1",
                     *WARNINGS, *includes]
    cxx = os.environ.get("CXX", "c++")
    if syntax_only:
        subprocess.run([cxx, "-fsyntax-only", *compile_flags, source], check=True)
        return f"{minor}: compiles ({standard}, torch {BUILDS[minor][0]})"
    os.makedirs(out, exist_ok=True)
    name = "libcachalot_torch_" + minor.replace(".", "_") + ".so"
    obj = os.path.join(out, name[:-3] + ".o")
    subprocess.run([cxx, "-c", *compile_flags, source, "-o", obj], check=True)
    torch_lib = os.path.join(root, "torch", "lib")
    links = ["-L" + torch_lib, *("-l" + l[3:-3] for l in TORCH_LIBS), "-L" + os.path.dirname(lib), "-lcachalot"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([cxx, "-shared", obj, "-o", os.path.join(tmp, "check.so"), "-Wl,--no-undefined", *links,
                        os.path.join(root, "cuda", "lib", "libcudart_static.a"), "-ldl", "-lpthread", "-lrt"],
                       check=True)
    target = os.path.join(out, name)
    subprocess.run([cxx, "-shared", obj, "-o", target, "-Wl,--as-needed", *links, "-Wl,-rpath,$ORIGIN", "-s"],
                   check=True)
    os.remove(obj)
    return f"{minor}: {target} (torch {BUILDS[minor][0]}, {standard})"


def write_manifest(out):
    """OUT/extensions.json for the extensions present in OUT (written whole, then renamed)."""
    minors = {}
    for minor, (torch_version, _, _) in sorted(BUILDS.items()):
        name = "libcachalot_torch_" + minor.replace(".", "_") + ".so"
        path = os.path.join(out, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                minors[minor] = {"file": name, "torch": torch_version, "sha256": hashlib.sha256(f.read()).hexdigest()}
    with open(os.path.join(out, "extensions.json.tmp"), "w") as f:
        json.dump({"minors": minors}, f, indent=1, sort_keys=True)
    os.replace(os.path.join(out, "extensions.json.tmp"), os.path.join(out, "extensions.json"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", required=True, help="libcachalot.so to link against")
    parser.add_argument("--sdk", required=True, help="where the wheels' headers and libraries are kept")
    parser.add_argument("--out", required=True, help="where the extensions are written")
    parser.add_argument("--syntax-only", action="store_true", help="compile each, write nothing")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("minors", nargs="*", default=sorted(BUILDS))
    args = parser.parse_args()
    unknown = [m for m in args.minors if m not in BUILDS]
    if unknown:
        sys.exit(f"no build for PyTorch {', '.join(unknown)}; supported: {', '.join(sorted(BUILDS))}")
    # Downloads one at a time (the disk and the network are shared), compiles in parallel.
    for minor in args.minors:
        fetch(args.sdk, minor)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = pool.map(lambda m: build(m, args.sdk, os.path.abspath(args.lib), args.out, args.syntax_only),
                        args.minors)
        for line in done:
            print(line)
    if not args.syntax_only:
        write_manifest(args.out)


if __name__ == "__main__":
    main()
