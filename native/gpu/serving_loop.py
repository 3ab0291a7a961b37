"""A server generating text again and again, as a user's program runs it: one model loaded
once, then GENERATIONS generations at batch BATCH (decoder_model.py: a 256-token prompt, 256
steps, a KV cache grown by concatenation), each timed alone, under PyTorch's default
allocator, its expandable segments or cachalot. What a generation costs once the allocator
has seen several, which a learned layout that moved memory every generation made slow.

usage: python3 native/gpu/serving_loop.py ALLOCATOR OUTFILE
       (native/gpu/serving_loop.sh runs each allocator, one process each)

ALLOCATOR is `pytorch`, `expandable` (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or
`cachalot` (cachalot_torch.install(), its default config). GENERATIONS (default 10), BATCH
(default 64) and CAP_BYTES (default none: the whole device; else the device capped with
torch.cuda.set_per_process_memory_fraction at that many bytes) come from the environment, and
so does the model's shape: MODEL_LAYERS (16), MODEL_HIDDEN (2048, a multiple of 128: heads of
128), PROMPT_TOKENS (256) and NEW_TOKENS (256), and KV_CACHE (`pair`, the default: each
layer's keys and values regrown both before either old one is let go; `each`: one after the
other, as transformers' DynamicCache does). A generation that runs out of memory is recorded as
such and ends the run.

Output: OUTFILE, one JSON object: allocator, batch, and per generation its seconds, checksum,
peak reserved and allocated bytes and the device allocations and frees it made.
"""
import json
import os
import sys
import time

ALLOCATOR, OUTFILE = sys.argv[1], sys.argv[2]
GENERATIONS = int(os.environ.get("GENERATIONS", 10))
BATCH = int(os.environ.get("BATCH", 64))
CAP_BYTES = int(os.environ.get("CAP_BYTES", 0))
SHAPE = {k: int(os.environ.get(k, d)) for k, d in
         (("MODEL_LAYERS", 16), ("MODEL_HIDDEN", 2048), ("PROMPT_TOKENS", 256), ("NEW_TOKENS", 256))}
if min(SHAPE.values()) < 1:
    sys.exit(f"the model's shape {SHAPE}: every figure must be at least 1")
KV_CACHE = os.environ.get("KV_CACHE", "pair")
if KV_CACHE not in ("pair", "each"):
    sys.exit(f"KV_CACHE={KV_CACHE!r}: 'pair' or 'each'")
if SHAPE["MODEL_HIDDEN"] % 128:
    sys.exit(f"MODEL_HIDDEN={SHAPE['MODEL_HIDDEN']}: the model's heads are 128 wide, so it must be a multiple of 128")

import allocator_choice  # noqa: E402

allocator_choice.choose(ALLOCATOR)

import torch  # noqa: E402  (after install, as a user would)
from decoder_model import Decoder, generate  # noqa: E402

dev = torch.device("cuda")
if CAP_BYTES:
    # Half a byte over: both allocators truncate fraction x total to whole bytes, and a quotient
    # rounded down would cap the device a byte short of CAP_BYTES.
    torch.cuda.set_per_process_memory_fraction(
        min(1.0, (CAP_BYTES + 0.5) / torch.cuda.get_device_properties(0).total_memory))


def stats():
    s = allocator_choice.memory_stats(ALLOCATOR)
    keys = ("reserved_bytes.all.peak", "allocated_bytes.all.peak", "num_device_alloc", "num_device_free")
    return {k: s.get(k, 0) for k in keys}


torch.manual_seed(0)
model = Decoder(layers=SHAPE["MODEL_LAYERS"], d=SHAPE["MODEL_HIDDEN"], heads=SHAPE["MODEL_HIDDEN"] // 128, kv=KV_CACHE)
model = model.to(dev, torch.bfloat16).eval()
rows = []
for g in range(GENERATIONS):
    before = stats()
    torch.cuda.synchronize()
    start = time.perf_counter()
    try:
        checksum = generate(model, BATCH, dev, prompt_tokens=SHAPE["PROMPT_TOKENS"], steps=SHAPE["NEW_TOKENS"])
    except torch.cuda.OutOfMemoryError as e:
        # What was asked and what was held when it ran out, for a cap near the edge.
        rows.append(dict(generation=g + 1, out_of_memory=True, message=str(e).split("\n")[0][:600],
                         reserved=torch.cuda.memory_reserved(), allocated=torch.cuda.memory_allocated()))
        print(json.dumps(rows[-1]), flush=True)
        break
    torch.cuda.synchronize()
    secs = time.perf_counter() - start
    after = stats()
    row = dict(generation=g + 1, secs=round(secs, 4), checksum=checksum,
               peak_reserved=after["reserved_bytes.all.peak"],
               peak_allocated=after["allocated_bytes.all.peak"],
               device_allocs=after["num_device_alloc"] - before["num_device_alloc"],
               device_frees=after["num_device_free"] - before["num_device_free"])
    rows.append(row)
    print(json.dumps(row), flush=True)
with open(OUTFILE, "w") as f:
    json.dump(dict(allocator=ALLOCATOR, batch=BATCH, cap_bytes=CAP_BYTES, shape=SHAPE, kv_cache=KV_CACHE,
                   generations=rows), f)
print("RESULT " + json.dumps(dict(allocator=ALLOCATOR, batch=BATCH, cap_bytes=CAP_BYTES,
                                  secs=[r.get("secs") for r in rows])))
