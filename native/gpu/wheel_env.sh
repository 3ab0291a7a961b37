# Sourced by wheel_check.sh, largest_batch.sh and serving_loop.sh: a fresh virtual environment
# at $ENV_DIR (default /tmp/cachalot-wheel-env) holding dist/cachalot-*.whl, installed offline,
# that sees the machine's PyTorch. The machine's python3 may itself be a virtual environment,
# whose packages --system-site-packages does not reach (it names the base interpreter's), so its
# site folders are added by a .pth file.
ENV_DIR=${ENV_DIR:-/tmp/cachalot-wheel-env}
make_wheel_env() {
    local wheel site
    wheel=$(ls dist/cachalot-*.whl 2>/dev/null | head -n 1)
    [ -n "$wheel" ] || { echo "missing: dist/cachalot-*.whl (make wheel here, carry dist)"; return 2; }
    rm -rf "$ENV_DIR"
    python3 -m venv --system-site-packages "$ENV_DIR" || return 2
    site=$("$ENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 2
    python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$site/machine_site_packages.pth" || return 2
    "$ENV_DIR/bin/pip" install -q --no-index --no-deps --disable-pip-version-check "$wheel" || return 2
    echo "installed $(basename "$wheel") into $ENV_DIR"
}
