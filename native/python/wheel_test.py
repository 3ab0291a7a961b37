"""The wheel as a newcomer installs it, checked against every supported PyTorch minor
(`make wheel-test`): a fresh virtual environment with PyPI's newest supported torch and its CUDA
libraries (no GPU needed), then `pip install dist/cachalot-*.whl`; each older minor's torch
unpacked beside it (`pip install --no-deps --target`, sharing the environment's CUDA libraries,
plus the curand library the older minors load), and native/python/wheel_check.py run once per
minor from outside the checkout with only the environment's bin on PATH: no compiler, ninja,
nvcc or cargo.

usage: python3 native/python/wheel_test.py ENV_DIR --prepare
       python3 native/python/wheel_test.py ENV_DIR WHEEL [MINOR ...]   (default: every minor)

`--prepare` makes the environment without the wheel: PyTorch's packages only, which `make test`
installs while the browser tests run (pip unzips them on one core for over a minute). The second
form uses an environment so prepared once, for every minor, and prepares a fresh one otherwise;
it ends with 'N passed, N failed' over the minors and exits 1 on any failure.
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


def minors_oldest_first():
    return sorted(BUILDS, key=lambda m: tuple(map(int, m.split("."))))


# What a prepared environment holds, written into it last: an older list means a fresh one.
PINS = " ".join(f"{m}={BUILDS[m][0]}" for m in minors_oldest_first()) + "\n"


def prepare(env_dir):
    """A fresh environment: the newest minor's torch with its CUDA libraries, curand, and each
    older minor's torch unpacked under ENV_DIR/torch-MINOR. Writes ENV_DIR/prepared last, so an
    interrupted preparation is never taken for a finished one."""
    newest = minors_oldest_first()[-1]
    python = os.path.join(env_dir, "bin", "python")
    # No pip cache: it would keep a second copy of about 4 GB of wheels on a disk CI shares.
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir"]
    subprocess.run(["rm", "-rf", env_dir], check=True)
    run(sys.executable, "-m", "venv", env_dir)
    run(*pip, f"torch=={BUILDS[newest][0]}")
    toolkit = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('cuda-toolkit'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    run(*pip, f"cuda-toolkit[curand]=={toolkit}")  # the older minors load libcurand
    # pip spends a core unzipping each (14 s on the 2-core machine): two at a time.
    with ThreadPoolExecutor(max_workers=2) as unpacking:
        for done in [unpacking.submit(run, *pip, "--no-deps", "--target", os.path.join(env_dir, "torch-" + m),
                                      f"torch=={BUILDS[m][0]}") for m in BUILDS if m != newest]:
            done.result()
    with open(os.path.join(env_dir, "prepared"), "w") as f:
        f.write(PINS)


def main():
    env_dir = os.path.abspath(sys.argv[1])
    if sys.argv[2:] == ["--prepare"]:
        prepare(env_dir)
        return
    wheel = os.path.abspath(sys.argv[2])
    minors = sys.argv[3:] or minors_oldest_first()
    newest = minors_oldest_first()[-1]
    marker = os.path.join(env_dir, "prepared")
    try:
        fresh = open(marker).read() == PINS
    except OSError:
        fresh = False
    if not fresh:
        prepare(env_dir)
    # Used once: the next run starts from a fresh environment again.
    os.remove(marker)
    python = os.path.join(env_dir, "bin", "python")
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir", wheel)
    passed = failed = 0
    for minor in minors:
        extra = {}
        if minor != newest:
            extra["PYTHONPATH"] = os.path.join(env_dir, "torch-" + minor)
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
