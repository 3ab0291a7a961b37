#!/usr/bin/env bash
# The two-stream fidelity recording and the CUDA check of a request past the device, on the
# H200 (from the repo root; build here with `cargo build --release -p cachalot`, carry
# target/release/libcachalot.so, or name another library in CACHALOT_LIB):
#   OUT=dir bash native/gpu/two_stream_check.sh
set -uo pipefail
out=${OUT:-/tmp/two_stream}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
CACHALOT_LIB=${CACHALOT_LIB:-target/release/libcachalot.so} python3 native/gpu/beyond_device.py 2>&1 | tee "$out/beyond_device.log"
for conf in "" "max_split_size_mb:128"; do
    PYTORCH_CUDA_ALLOC_CONF=$conf python3 native/gpu/two_stream.py "$out" 2>&1 | tail -3 | tee -a "$out/two_stream.jsonl"
done
