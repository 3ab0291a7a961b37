#!/usr/bin/env bash
# cachalot on two GPUs: data-parallel GPT-2 training (torchrun, DistributedDataParallel, NCCL)
# with PyTorch's allocator and with cachalot plugged in on every rank, on the nvidia-h200-x2
# machine, from the repo root:
#
#   bash native/gpu/ddp_check.sh
#
# It builds nothing: build here with `cargo build --release -p cachalot -p cachalot-cli`, then carry
#   target/release/libcachalot.so  target/release/cachalot
# It refuses (exit 2, one line) unless at least 2 CUDA GPUs are visible to torch. Then
# ddp_check.py runs an untimed warm-up launch and REPS rounds (default 3) of one native and one
# cachalot launch of native/gpu/ddp_gpt2.py on 2 GPUs (workloads.py's gpt2_train, data parallel),
# alternating, inside BUDGET_S (default 450 s; no launch runs past BUDGET_S + 30), and prints
# the table — final loss (rank 0 and mean of ranks), wall time median and ratio, peak reserved
# and allocated per rank — then one PASS/FAIL line per requirement: same loss (or within bf16
# noise), per-rank peak reserved <= PyTorch's, wall time <= 1.02x PyTorch's. About 5-7 minutes.
# Results go to $OUT (default ./gpu-out): ddp_check.log (every launch's output), summary.md,
# results.json. Exit 0 when every requirement passed, 1 when one did not, 2 when refused.
#
# Environment: BUDGET_S, REPS, STEPS (default 24), WARMUP (0 skips it), TORCHRUN (launcher,
# default `python3 -m torch.distributed.run`). NCCL_NVLS_ENABLE is left as the machine sets it
# (0 when unset); TORCH_SYMM_MEM_DISABLE_MULTICAST=1.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
RESULTS=${OUT:-gpu-out}

gpus=$(python3 -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null) || {
    echo "ddp_check: refused: python3 cannot import torch, so no GPU is visible; 2 CUDA GPUs needed (the nvidia-h200-x2 machine)"
    exit 2
}
if [ "${gpus:-0}" -lt 2 ]; then
    echo "ddp_check: refused: 2 CUDA GPUs needed, ${gpus:-0} visible to torch (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}); run it on the nvidia-h200-x2 machine"
    exit 2
fi
for f in target/release/libcachalot.so target/release/cachalot; do
    [ -f "$f" ] || { echo "ddp_check: missing $f: build it with 'cargo build --release -p cachalot -p cachalot-cli' and carry it"; exit 2; }
done
mkdir -p "$RESULTS"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=1

# Importing what the runs import warms the file cache (the warm-up launch then warms the rest).
VERSIONS=$(python3 -c 'import torch, transformers as t; print("torch", torch.__version__, "transformers", t.__version__, "NCCL", torch.cuda.nccl.version())' 2>&1 | tail -n 1)
echo "GPUs: $(nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>/dev/null | paste -sd ';' - || echo "$gpus")"
echo "$VERSIONS; $(target/release/cachalot --version); NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
exec python3 native/gpu/ddp_check.py "$RESULTS"
