"""A two-stream training run, recorded: a small ViT whose side stream computes part of each step.

    python3 native/gpu/two_stream.py OUTDIR        (PYTORCH_CUDA_ALLOC_CONF picks PyTorch's config)

Each step, the side stream makes the next batch (augmented on the GPU) and runs a frozen
teacher over the current one for distillation targets; the main stream trains the student.
Tensors cross streams both ways with wait_stream and record_stream, so frees of tensors used on
the other stream wait for its events, as in real pipelines. Batch sizes vary by step. Writes
OUTDIR/two_stream.CONF.snapshot.json.gz (PyTorch's snapshot: segments and device_traces, the
input `cachalot replay` reads) and prints one JSON line with PyTorch's peak figures.
"""
import gzip, json, os, random, sys, time

import torch
import torch.nn as nn

OUT = sys.argv[1]
CONF = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or "default"
torch.manual_seed(0)
random.seed(0)
dev = torch.device("cuda")


class ViT(nn.Module):
    def __init__(self, dim, depth, heads=8, patch=16, classes=1000):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, 197, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.blocks(x)[:, 0])


student = ViT(768, 12).to(dev)
teacher = ViT(384, 6).to(dev).eval().requires_grad_(False)
opt = torch.optim.AdamW(student.parameters(), lr=1e-4)
side = torch.cuda.Stream()
main = torch.cuda.current_stream()


def make_batch(bs):
    raw = torch.rand(bs, 3, 256, 256, device=dev)
    i, j = random.randint(0, 32), random.randint(0, 32)
    x = raw[:, :, i:i + 224, j:j + 224].contiguous()
    if random.random() < 0.5:
        x = x.flip(3)
    return (x - 0.45) / 0.225


torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=5_000_000)
t0 = time.time()
with torch.cuda.stream(side):
    nxt = make_batch(32)
loss_value = None
for step in range(30):
    main.wait_stream(side)
    x = nxt
    x.record_stream(main)
    bs = x.shape[0]
    side.wait_stream(main)
    with torch.cuda.stream(side):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            target = teacher(x).float().softmax(-1)
        nxt = make_batch(random.choice([16, 32, 48, 64]))
    x.record_stream(side)
    main.wait_stream(side)
    target.record_stream(main)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = student(x)
        loss = torch.nn.functional.kl_div(logits.float().log_softmax(-1), target, reduction="batchmean")
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del x, target, logits
    loss_value = float(loss)
torch.cuda.synchronize()
secs = time.time() - t0
snap = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
stats = torch.cuda.memory_stats()
tag = CONF.replace(":", "-").replace(",", "_")
os.makedirs(OUT, exist_ok=True)
keep = dict(segments=snap["segments"], device_traces=snap["device_traces"])
with gzip.open(os.path.join(OUT, f"two_stream.{tag}.snapshot.json.gz"), "wt") as fh:
    json.dump(keep, fh)
counts = {}
for e in snap["device_traces"][0]:
    counts[e["action"]] = counts.get(e["action"], 0) + 1
print(json.dumps(dict(workload="two_stream", conf=CONF, secs=round(secs, 1), final_loss=loss_value,
                      peak_reserved=stats["reserved_bytes.all.peak"], peak_allocated=stats["allocated_bytes.all.peak"],
                      peak_requested=stats["requested_bytes.all.peak"], num_device_alloc=stats["num_device_alloc"],
                      retries=stats["num_alloc_retries"], actions=counts)))
