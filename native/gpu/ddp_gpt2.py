"""One rank of data-parallel GPT-2 training, with PyTorch's allocator or with cachalot plugged in;
torchrun starts one per GPU (ddp_check.py does):

    torchrun --standalone --nproc_per_node 2 native/gpu/ddp_gpt2.py native|cachalot --out DIR
             [--lib PATH] [--config CONF] [--steps N]

The training is workloads.py's gpt2_train, made data parallel: the same model (GPT-2 small from
transformers: 12 layers, 768 wide, 12 heads), optimizer (AdamW, lr 1e-4), seeds
(torch.manual_seed(0), random.seed(0)), step schedule (24 steps of random.choice of sequence
length and batch size) and bf16 autocast. Every rank draws the same batch, as the one-GPU run
does, and trains on its own slice of it (`tensor_split(world)[rank]`), so the ranks together
see the one-GPU batches; DistributedDataParallel over NCCL averages the gradients.

cachalot: cachalot_torch.install() runs first, before any CUDA tensor, in every rank (config
CONF as CACHALOT_ALLOC_CONF, "" = the defaults); each rank's process then has one cachalot
allocator, for its own GPU. NCCL_NVLS_ENABLE defaults to 0 (kept if the machine sets it) and
TORCH_SYMM_MEM_DISABLE_MULTICAST to 1.

Timed span: from just before the model is built to the end of the last step (after a
synchronize), as workloads.py's, minus importing transformers; `wall_secs` is the longest
rank's. Peak figures are read before anything else touches the GPU after training:
torch.cuda.memory_stats(device) for native, cachalot_torch.memory_stats(device) for cachalot.

Output: each rank writes DIR/rank<R>.json and prints `RESULT {json}`: its final loss (its own
slice), the mean of the ranks' final losses (all-reduced), its span and the longest, its peak
figures. Exit 2 when not started by torchrun.
"""
import argparse
import gc
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "native", "python"))
KEEP = ("reserved_bytes.all.peak", "allocated_bytes.all.peak", "requested_bytes.all.peak", "active_bytes.all.peak",
        "segment.all.peak", "reserved_bytes.all.current", "num_device_alloc", "num_device_free", "num_alloc_retries",
        "num_ooms", "allocation.all.allocated")

ap = argparse.ArgumentParser(description="one rank of data-parallel gpt2_train (start it with torchrun)")
ap.add_argument("allocator", choices=["native", "cachalot"])
ap.add_argument("--out", required=True, help="folder for rank<R>.json")
ap.add_argument("--lib", default=os.path.join(ROOT, "target", "release", "libcachalot.so"))
ap.add_argument("--config", default="", help="CACHALOT_ALLOC_CONF for cachalot ('' = the defaults)")
ap.add_argument("--steps", type=int, default=24)
args = ap.parse_args()
if not all(k in os.environ for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")):
    print("ddp_gpt2.py: start it with torchrun (RANK, LOCAL_RANK and WORLD_SIZE are unset)", file=sys.stderr)
    sys.exit(2)
RANK, LOCAL, WORLD = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.pop("CACHALOT_LIB", None)
os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # PyTorch's default config for the native runs
if args.allocator == "cachalot":
    import cachalot_torch
    cachalot_torch.install(args.lib, config=args.config)

import torch  # noqa: E402  (after install, as a user would)
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

torch.cuda.set_device(LOCAL)
dev = torch.device("cuda", LOCAL)
dist.init_process_group("nccl", device_id=dev)
torch.manual_seed(0)
random.seed(0)
FINAL = {}

dist.barrier()
torch.cuda.synchronize()
t0 = time.time()
model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).to(dev)
ddp = DDP(model, device_ids=[LOCAL])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
for step in range(args.steps):
    seq = random.choice([128, 192, 256, 384, 512, 640, 768, 1024])
    bs = random.choice([4, 8, 12])
    x = torch.randint(0, 50257, (bs, seq), device=dev).tensor_split(WORLD)[RANK]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = ddp(x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    FINAL["loss"] = float(loss)
torch.cuda.synchronize()
secs = time.time() - t0

gc.collect()  # tensors in reference cycles go now, not between the reads below
stats = cachalot_torch.memory_stats(LOCAL) if args.allocator == "cachalot" else torch.cuda.memory_stats(dev)
free, total = torch.cuda.mem_get_info(dev)
NCCL = torch.cuda.nccl.version()  # (major, minor, patch) in recent releases, an int in old ones
figures = torch.tensor([FINAL["loss"], secs], dtype=torch.float64, device=dev)
mean_loss = figures[:1].clone()
dist.all_reduce(mean_loss)
longest = figures[1:].clone()
dist.all_reduce(longest, op=dist.ReduceOp.MAX)
result = dict(rank=RANK, local_rank=LOCAL, world=WORLD, allocator=args.allocator, config=args.config,
              steps=args.steps, final_loss=FINAL["loss"], mean_loss=float(mean_loss) / WORLD, secs=round(secs, 3),
              wall_secs=round(float(longest), 3), stats={k: stats.get(k) for k in KEEP}, capacity=total,
              gpu=torch.cuda.get_device_name(dev), torch=torch.__version__,
              nccl=".".join(map(str, NCCL)) if isinstance(NCCL, tuple) else str(NCCL),
              env={k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                  "CACHALOT_ALLOC_CONF")})
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, f"rank{RANK}.json"), "w") as fh:
    json.dump(result, fh, indent=1)
print("RESULT " + json.dumps(result), flush=True)
dist.destroy_process_group()
