"""Writes cachalot's wheel from what `make wheel` built: one file that a machine with only
`pip install torch` (any supported minor, no Rust, compiler, ninja or CUDA toolkit) installs
with `pip install cachalot-*.whl`.

usage: python3 native/python/build_wheel.py --lib target/release/libcachalot.so \
           --cli target/release/cachalot --extensions target/torch-ext --out dist

What it holds:
  cachalot_torch.py, cachalot_replay.py            the Python modules
  cachalot_native/libcachalot.so.0.x               the library, under its SONAME, debug info stripped
  cachalot_native/libcachalot_torch_<M>_<m>.so     the PyTorch extension for each minor built
  cachalot_native/extensions.json                  each extension's minor, PyTorch release, sha256
  cachalot_native/include/cachalot.h               the C header
  cachalot-<version>.dist-info/licenses/           LICENSE-MIT and LICENSE-APACHE
  cachalot-<version>.data/scripts/cachalot         the command-line tool, on the user's PATH

Tag: py3-none-manylinux_<glibc>_x86_64, no Python ABI (nothing is a Python extension module),
the glibc floor read from the binaries' own symbol versions, so pip refuses it where they would
not load. torch is not a dependency (cachalot_replay works without it); the extra [torch] names
the supported range.

Invariant: the wheel's RECORD lists every file with its sha256 and size, and the wheel holds
an extension for each minor build_extensions.py builds, or the build fails here.
"""
import argparse
import base64
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "native", "torch"))
from build_extensions import BUILDS, write_manifest  # noqa: E402  (the one list of supported minors)


def cargo_version():
    with open(os.path.join(REPO, "Cargo.toml")) as f:
        return re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)


def soname(lib):
    out = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True, text=True).stdout
    return re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out).group(1)


def glibc_floor(paths):
    """The newest GLIBC_x.y symbol version any of `paths` needs, as (x, y)."""
    newest = (2, 17)
    for path in paths:
        out = subprocess.run(["objdump", "-T", path], check=True, capture_output=True, text=True).stdout
        for major, minor in re.findall(r"GLIBC_(\d+)\.(\d+)", out):
            newest = max(newest, (int(major), int(minor)))
    return newest


def stripped(path, into):
    target = os.path.join(into, os.path.basename(path))
    shutil.copy(path, target)
    subprocess.run(["strip", "--strip-debug", target], check=True)
    return target


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--extensions", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    if platform.machine() != "x86_64":  # the tag and the PyTorch wheels built against are x86_64's
        sys.exit(f"build_wheel: this builds x86_64 wheels only (this machine is {platform.machine()})")
    version = cargo_version()
    extensions = {m: os.path.join(args.extensions, "libcachalot_torch_" + m.replace(".", "_") + ".so") for m in BUILDS}
    missing = [p for p in extensions.values() if not os.path.isfile(p)]
    if missing:
        sys.exit(f"build_wheel: missing {', '.join(missing)}: run `make torch-extensions` first")
    minors = sorted(BUILDS, key=lambda m: tuple(int(x) for x in m.split(".")))
    low, high = minors[0], minors[-1]
    next_minor = f"{high.split('.')[0]}.{int(high.split('.')[1]) + 1}"

    with tempfile.TemporaryDirectory() as tmp:
        manifest_dir = os.path.join(tmp, "manifest")
        os.makedirs(manifest_dir)
        for p in extensions.values():
            shutil.copy(p, manifest_dir)
        write_manifest(manifest_dir)
        with open(os.path.join(manifest_dir, "extensions.json")) as f:
            if sorted(json.load(f)["minors"]) != sorted(BUILDS):
                sys.exit("build_wheel: the manifest does not list every minor built")
        lib = stripped(args.lib, tmp)
        cli = stripped(args.cli, tmp)
        floor = glibc_floor([lib, cli, *extensions.values()])
        tag = f"py3-none-manylinux_{floor[0]}_{floor[1]}_x86_64"
        dist_info = f"cachalot-{version}.dist-info"
        files = [  # (name in the wheel, source path, executable)
            ("cachalot_torch.py", os.path.join(HERE, "cachalot_torch.py"), False),
            ("cachalot_replay.py", os.path.join(HERE, "cachalot_replay.py"), False),
            ("cachalot_native/__init__.py", os.path.join(HERE, "cachalot_native", "__init__.py"), False),
            (f"cachalot_native/{soname(args.lib)}", lib, True),
            ("cachalot_native/include/cachalot.h", os.path.join(REPO, "include", "cachalot.h"), False),
            ("cachalot_native/extensions.json", os.path.join(manifest_dir, "extensions.json"), False),
            (f"{dist_info}/licenses/LICENSE-MIT", os.path.join(REPO, "LICENSE-MIT"), False),
            (f"{dist_info}/licenses/LICENSE-APACHE", os.path.join(REPO, "LICENSE-APACHE"), False),
            (f"cachalot-{version}.data/scripts/cachalot", cli, True),
        ] + [(f"cachalot_native/{os.path.basename(p)}", p, True) for p in extensions.values()]
        metadata = "\n".join([
            "Metadata-Version: 2.1",
            "Name: cachalot",
            f"Version: {version}",
            "Summary: cachalot, a GPU caching allocator, as PyTorch's CUDA allocator (cachalot_torch), "
            "trace replay (cachalot_replay) and the cachalot command",
            "License: MIT OR Apache-2.0",
            "License-File: LICENSE-MIT",
            "License-File: LICENSE-APACHE",
            "Requires-Python: >=3.9",
            "Provides-Extra: torch",
            f'Requires-Dist: torch<{next_minor},>={low}; extra == "torch"',
            "",
            f"cachalot_torch.install() makes cachalot PyTorch {low} to {high}'s CUDA allocator; "
            "see README.md and docs/pytorch.md of the cachalot repository.",
            "",
        ])
        wheel_meta = f"Wheel-Version: 1.0\nGenerator: cachalot build_wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"cachalot-{version}-{tag}.whl")
        if os.path.exists(path):
            os.remove(path)
        records = []
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
            def add(name, data, executable):
                info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr = (0o100755 if executable else 0o100644) << 16  # a regular file: pip keeps +x
                info.compress_type = zipfile.ZIP_DEFLATED
                whl.writestr(info, data)
                records.append(record_line(name, data))

            for name, source, executable in files:
                with open(source, "rb") as f:
                    add(name, f.read(), executable)
            add(f"{dist_info}/METADATA", metadata.encode(), False)
            add(f"{dist_info}/WHEEL", wheel_meta.encode(), False)
            records.append(f"{dist_info}/RECORD,,")
            record = zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0))
            record.external_attr = 0o100644 << 16
            record.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(record, "\n".join(records) + "\n")
    print(f"{path} ({os.path.getsize(path) / 2**20:.1f} MiB): PyTorch {', '.join(minors)}")


if __name__ == "__main__":
    main()
