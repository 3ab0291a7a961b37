"""The wheel as a newcomer installs it, checked against every supported PyTorch minor
(`make wheel-test`): a fresh virtual environment with PyPI's newest supported torch and its CUDA
libraries (no GPU needed), then `pip install dist/cachalot-*.whl`; each older minor's torch
unpacked beside it (`pip install --no-deps --target`, sharing the environment's CUDA libraries,
plus the curand library the older minors load), and native/python/wheel_check.py run once per
minor from outside the checkout with only the environment's bin on PATH: no compiler, ninja,
nvcc or cargo.

usage: python3 native/python/wheel_test.py ENV_DIR WHEEL [MINOR ...]   (default: every minor)

Ends with 'N passed, N failed' over the minors; exits 1 on any failure.
"""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "torch"))
from build_extensions import BUILDS  # noqa: E402  (the one list of supported minors and their pins)


def run(*args, **kwargs):
    print("+", " ".join(args), flush=True)
    subprocess.run(args, check=True, **kwargs)


def main():
    env_dir, wheel = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    minors = sys.argv[3:] or sorted(BUILDS, key=lambda m: tuple(map(int, m.split("."))))
    newest = max(BUILDS, key=lambda m: tuple(map(int, m.split("."))))
    python = os.path.join(env_dir, "bin", "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(["rm", "-rf", env_dir], check=True)
    run(sys.executable, "-m", "venv", env_dir)
    run(*pip, f"torch=={BUILDS[newest][0]}", wheel)
    toolkit = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('cuda-toolkit'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    if any(m != newest for m in minors):
        run(*pip, f"cuda-toolkit[curand]=={toolkit}")  # the older minors load libcurand
    passed = failed = 0
    targets = {m: os.path.join(env_dir, "torch-" + m) for m in minors if m != newest}
    # The older minors' torch unpacked two at a time, beside the checks: pip spends a core
    # unzipping one (14 s each on the 2-core machine), and the checks wait only for their own.
    with ThreadPoolExecutor(max_workers=2) as unpacking:
        unpacked = {m: unpacking.submit(run, *pip, "--no-deps", "--target", t, f"torch=={BUILDS[m][0]}")
                    for m, t in targets.items()}
        for minor in minors:
            extra = {}
            if minor in targets:
                unpacked[minor].result()
                extra["PYTHONPATH"] = targets[minor]
            print(f"== PyTorch {BUILDS[minor][0]}", flush=True)
            env = {"HOME": os.environ.get("HOME", "/tmp"), "PATH": os.path.join(env_dir, "bin"),
                   "PYTHONDONTWRITEBYTECODE": "1", **extra}
            with open(os.path.join(HERE, "wheel_check.py")) as script:
                ok = subprocess.run([python, "-", ",".join(sorted(BUILDS)), minor], stdin=script, cwd="/tmp",
                                    env=env).returncode == 0
            passed, failed = passed + ok, failed + (not ok)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
