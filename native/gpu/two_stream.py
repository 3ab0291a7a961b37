"""A two-stream training run, recorded: a ViT whose side stream computes part of each step.

    python3 native/gpu/two_stream.py OUTDIR        (PYTORCH_CUDA_ALLOC_CONF picks PyTorch's config)

Each step, while the main stream trains the student (ViT-B/16) on this step's batch, the side
stream makes the next batch (augmented on the GPU), runs a frozen teacher over it for
distillation targets, and scores the previous step's logits. Tensors cross streams both ways
with wait_stream and record_stream, and the host never waits inside the loop, so frees of
tensors still used on the other stream wait for its events, as in real pipelines. Batch sizes
vary by step. Writes
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


# Recorded from the first allocation, so a replay starts from the same empty device.
torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=5_000_000)
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


t0 = time.time()
with torch.cuda.stream(side):
    nxt = make_batch(64)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        nxt_target = teacher(nxt).float().softmax(-1)
losses, hits, prev = [], [], None
# No host synchronisation inside the loop: the host runs ahead of the GPU, as a real training
# loop does, so a tensor freed on the host is often still in use on the other stream and its
# memory waits for that stream's event (free_requested long before free_completed).
for step in range(30):
    main.wait_stream(side)  # this step's batch and targets are ready
    x, target = nxt, nxt_target
    x.record_stream(main)
    target.record_stream(main)
    # The side stream prepares the next step while the main stream trains on this one, and
    # scores the previous step's student logits, which the main stream made.
    side.wait_stream(main)
    with torch.cuda.stream(side):
        nxt = make_batch(random.choice([64, 96, 128, 160]))
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            nxt_target = teacher(nxt).float().softmax(-1)
        if prev is not None:
            hits.append((prev[0].argmax(-1) == prev[1].argmax(-1)).float().mean())
    if prev is not None:
        prev[0].record_stream(side)
        prev[1].record_stream(side)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = student(x)
        loss = torch.nn.functional.kl_div(logits.float().log_softmax(-1), target, reduction="batchmean")
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.detach())
    prev = (logits.detach(), target)
    del x, target, logits, loss
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
# PyTorch's own statistics at the end, in the form of traces/recorded/*.stats.json, so a replay
# of the snapshot can be held to every one of them.
ours = "policy:pytorch" + ("" if CONF == "default" else "," + CONF)
with open(os.path.join(OUT, f"two_stream.{tag}.stats.json"), "w") as fh:
    json.dump(dict(capacity=torch.cuda.get_device_properties(0).total_memory, config=ours,
                   gpu=torch.cuda.get_device_name(0), pytorch=torch.__version__, stats=stats), fh, indent=0, sort_keys=True)
counts, trace = {}, snap["device_traces"][0]
for e in trace:
    counts[e["action"]] = counts.get(e["action"], 0) + 1
# Frees that waited for another stream: free_requested not followed at once by its free_completed.
waited = sum(1 for e, n in zip(trace, trace[1:] + [{}]) if e["action"] == "free_requested"
             and not (n.get("action") == "free_completed" and n.get("addr") == e["addr"]))
print(json.dumps(dict(workload="two_stream", conf=CONF, secs=round(secs, 1), final_loss=float(losses[-1]), first_loss=float(losses[0]),
                      peak_reserved=stats["reserved_bytes.all.peak"], peak_allocated=stats["allocated_bytes.all.peak"],
                      peak_requested=stats["requested_bytes.all.peak"], num_device_alloc=stats["num_device_alloc"],
                      retries=stats["num_alloc_retries"], frees_that_waited=waited, actions=counts)))
