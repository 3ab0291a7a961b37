"""The serving loop's generations, recorded: serving_loop.py's model (decoder_model.py, batch
BATCH, a 256-token prompt, 256 steps, a KV cache grown by concatenation) generating GENERATIONS
times under PyTorch's default allocator with its memory history on, so that `cachalot replay`
can replay the very requests the loop makes (the same sizes and order under every allocator).

    python3 native/gpu/serving_trace.py OUTDIR

KV_CACHE (`pair` by default, or `each`) picks how the decoder regrows its cache, as in
serving_loop.py.

Writes OUTDIR/serving.policy_pytorch.snapshot.json.gz (segments and device_traces, the input
`cachalot replay` reads) and prints one JSON line with PyTorch's peak reserved.
"""
import gzip
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decoder_model import Decoder, generate  # noqa: E402

OUT = sys.argv[1]
GENERATIONS = int(os.environ.get("GENERATIONS", 2))
BATCH = int(os.environ.get("BATCH", 64))
KV_CACHE = os.environ.get("KV_CACHE", "pair")
if KV_CACHE not in ("pair", "each"):
    sys.exit(f"KV_CACHE={KV_CACHE!r}: 'pair' or 'each'")
dev = torch.device("cuda")
torch.manual_seed(0)
torch.cuda.memory._record_memory_history(context=None, max_entries=4_000_000)
model = Decoder(kv=KV_CACHE).to(dev, torch.bfloat16).eval()
for _ in range(GENERATIONS):
    generate(model, BATCH, dev)
torch.cuda.synchronize()
snap = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
os.makedirs(OUT, exist_ok=True)
with gzip.open(os.path.join(OUT, "serving.policy_pytorch.snapshot.json.gz"), "wt") as fh:
    json.dump(dict(segments=snap["segments"], device_traces=snap["device_traces"]), fh)
events = sum(len(t) for t in snap["device_traces"])
print(json.dumps(dict(generations=GENERATIONS, batch=BATCH, kv_cache=KV_CACHE, events=events,
                      peak_reserved=torch.cuda.max_memory_reserved())))
