"""The largest batch a job runs at on a capped device, under PyTorch's default allocator, its
expandable segments and cachalot: the question "which card does my run fit on", asked of the
real thing.

usage: python3 native/gpu/largest_batch.py WORKLOAD ALLOCATOR OUTFILE
       (native/gpu/largest_batch.sh runs every pair, one process each)

WORKLOAD is one of
  gpt2          GPT-2 small training (AdamW, bf16 autocast), sequences of 256 tokens
  bert_ckpt     BERT-large masked-LM training with activation checkpointing, 512 tokens
  llm_decode    decoding with a KV cache that grows by one token a step (each layer's keys and
                values concatenated with the new token's, as a dynamic cache does): a prompt of
                256 tokens, then 256 steps, 16 layers of width 2048
ALLOCATOR is `pytorch`, `expandable` (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or
`cachalot` (cachalot_torch.install(), its default config).

The device is capped with torch.cuda.set_per_process_memory_fraction at CAP_GIB (default 24)
of its memory. A trial builds the model afresh from seed 0, runs the job at batch B, and
frees everything (torch.cuda.empty_cache()), so each trial starts from an empty cache: an
out-of-memory in one trial leaves nothing behind for the next. Batch sizes are searched by
doubling, then bisection, to the exact largest B that ran without an out-of-memory (given
memory that grows with B, which the trials also check: a larger B that ran after a smaller one
failed is reported). Each trial's loss (decoding: a checksum of the prompt's and the first
step's logits) is kept, so the allocators' runs at the same B can be compared.

Output: OUTFILE, one JSON object: workload, allocator, cap, largest batch, the trials (batch,
ok, loss, peak reserved, peak allocated, device allocations, seconds).
"""
import gc
import json
import os
import sys
import time

WORKLOAD, ALLOCATOR, OUTFILE = sys.argv[1], sys.argv[2], sys.argv[3]
CAP_GIB = float(os.environ.get("CAP_GIB", 24))
MAX_TRIALS = int(os.environ.get("MAX_TRIALS", 14))

os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
if ALLOCATOR == "expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
if ALLOCATOR == "cachalot":
    import cachalot_torch

    cachalot_torch.install()

import torch  # noqa: E402  (after install, as a user would)
import torch.nn.functional as F  # noqa: E402

dev = torch.device("cuda")
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(min(1.0, CAP_GIB * 2**30 / total))


def stats():
    if ALLOCATOR == "cachalot":
        s = cachalot_torch.memory_stats()
    else:
        s = torch.cuda.memory_stats()
    return {k: s.get(k) for k in ("reserved_bytes.all.peak", "allocated_bytes.all.peak", "num_device_alloc")}


def reset_peaks():
    if ALLOCATOR == "cachalot":
        cachalot_torch.reset_peak_memory_stats()
    else:
        torch.cuda.reset_peak_memory_stats()


def gpt2(bs):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=dev).manual_seed(1)
    loss = None
    for _ in range(3):
        x = torch.randint(0, 50257, (bs, 256), device=dev, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return float(loss)


def bert_ckpt(bs):
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    model = BertForMaskedLM(cfg).to(dev)
    model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=dev).manual_seed(1)
    loss = None
    for _ in range(3):
        x = torch.randint(0, cfg.vocab_size, (bs, 512), device=dev, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return float(loss)


class Decoder(torch.nn.Module):
    def __init__(self, layers=16, d=2048, heads=16, vocab=32000):
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(d, 3 * d, bias=False) for _ in range(layers))
        self.proj = torch.nn.ModuleList(torch.nn.Linear(d, d, bias=False) for _ in range(layers))
        self.up = torch.nn.ModuleList(torch.nn.Linear(d, 4 * d, bias=False) for _ in range(layers))
        self.down = torch.nn.ModuleList(torch.nn.Linear(4 * d, d, bias=False) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, cache):
        """Appends the tokens' keys and values to each layer's cache (a new, longer tensor: the
        old one is freed) and returns the last position's logits."""
        bs, n = tokens.shape
        h = self.emb(tokens)
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](F.layer_norm(h, h.shape[-1:])).view(bs, n, 3, self.heads, -1).unbind(2)
            k, v = k.transpose(1, 2), v.transpose(1, 2)
            if cache[i] is not None:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, is_causal=n > 1)
            h = h + self.proj[i](a.transpose(1, 2).reshape(bs, n, -1))
            h = h + self.down[i](F.gelu(self.up[i](F.layer_norm(h, h.shape[-1:]))))
        return self.head(self.norm(h[:, -1]))


def llm_decode(bs):
    torch.manual_seed(0)
    model = Decoder().to(dev, torch.bfloat16).eval()
    gen = torch.Generator(device=dev).manual_seed(1)
    cache = [None] * len(model.qkv)
    with torch.no_grad():
        prompt = torch.randint(0, 32000, (bs, 256), device=dev, generator=gen)
        logits = model(prompt, cache)
        checksum = float(logits.float().sum())
        token = logits.argmax(-1, keepdim=True)
        for step in range(256):
            logits = model(token, cache)
            if step == 0:
                checksum += float(logits.float().sum())
            token = logits.argmax(-1, keepdim=True)
    return checksum


JOBS = {"gpt2": (gpt2, 8), "bert_ckpt": (bert_ckpt, 16), "llm_decode": (llm_decode, 32)}
job, first = JOBS[WORKLOAD]
trials = []


def trial(bs):
    torch.manual_seed(0)
    reset_peaks()
    t = time.time()
    ok, loss, error = True, None, None
    try:
        loss = job(bs)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:
        ok, error = False, str(e).splitlines()[0][:200]
    gc.collect()
    s = stats()
    torch.cuda.empty_cache()
    row = dict(batch=bs, ok=ok, loss=loss, secs=round(time.time() - t, 2), error=error, **s)
    trials.append(row)
    print(json.dumps(row), flush=True)
    return ok


# Doubling to the first failure, then bisection between the largest that ran and it. BRACKET=LO:HI
# starts the bisection there instead, once a trial at LO has run and one at HI has failed (else
# it doubles from LO as usual), so a search cut short can go on without the trials below LO.
lo, hi, bs = 0, None, first
if os.environ.get("BRACKET"):
    lo_given, hi_given = (int(x) for x in os.environ["BRACKET"].split(":"))
    if trial(lo_given):
        lo, bs = lo_given, lo_given * 2
        if trial(hi_given):
            lo, bs = hi_given, hi_given * 2
        else:
            hi = hi_given
    else:
        bs = first
while hi is None and len(trials) < MAX_TRIALS:
    if trial(bs):
        lo, bs = bs, bs * 2
    else:
        hi = bs
while hi is not None and hi - lo > 1 and len(trials) < MAX_TRIALS:
    mid = (lo + hi) // 2
    if trial(mid):
        lo = mid
    else:
        hi = mid
non_monotone = [r["batch"] for r in trials if r["ok"] and hi is not None and r["batch"] >= hi]
result = dict(workload=WORKLOAD, allocator=ALLOCATOR, cap_gib=CAP_GIB, bracket=os.environ.get("BRACKET"), device=torch.cuda.get_device_name(0),
              torch=torch.__version__, largest_batch=lo, first_failing=hi, exact=hi is not None and hi - lo == 1,
              non_monotone=non_monotone, trials=trials)
with open(OUTFILE, "w") as f:
    json.dump(result, f)
print("RESULT " + json.dumps({k: v for k, v in result.items() if k != "trials"}), flush=True)
