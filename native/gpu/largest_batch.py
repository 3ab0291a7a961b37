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

import allocator_choice  # noqa: E402

allocator_choice.choose(ALLOCATOR)

import torch  # noqa: E402  (after install, as a user would)
from decoder_model import Decoder, generate  # noqa: E402

dev = torch.device("cuda")
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(min(1.0, CAP_GIB * 2**30 / total))


def stats():
    s = allocator_choice.memory_stats(ALLOCATOR)
    return {k: s.get(k) for k in ("reserved_bytes.all.peak", "allocated_bytes.all.peak", "num_device_alloc")}


def reset_peaks():
    allocator_choice.reset_peak_memory_stats(ALLOCATOR)


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


def llm_decode(bs):
    torch.manual_seed(0)
    model = Decoder().to(dev, torch.bfloat16).eval()
    return generate(model, bs, dev)


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
