# cachalot — two commands up front:
#   make demo   build and run the main job on the embedded default trace
#   make test   every test (formatting, lints, unit/property/parity tests, wasm build)

CARGO ?= cargo

.PHONY: demo test setup fmt-check clippy unit-tests wasm-core

demo:
	$(CARGO) run --release -p cachalot -- compare

test: setup fmt-check clippy unit-tests wasm-core

# What a fresh machine lacks: the wasm target (idempotent, quick when present).
setup:
	@rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit-tests:
	$(CARGO) test --workspace

# The core must build for the browser: no_std, no I/O.
wasm-core:
	$(CARGO) build -p cachalot-core --target wasm32-unknown-unknown --release
