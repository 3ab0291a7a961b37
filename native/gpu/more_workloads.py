"""Five more PyTorch workloads beside workloads.py's three, for the eight-workload comparison
(eight_workloads.py): each stresses the allocator in its own way.

  bert_large_ckpt   BERT-large masked-LM training with activation checkpointing (recomputed
                    activations: many short-lived blocks), variable sequence lengths
  vit_side_stream   ViT-B/16 training whose batches are made on a side stream and used on the
                    main one (record_stream: frees that wait on another stream)
  moe_train         a top-2 mixture of experts: each expert's token count changes every step,
                    so block sizes never repeat exactly
  t5_train          T5-base encoder-decoder training, input and target lengths varying apart
  llm_decode        LLM inference: eager prefill of prompts of varying length into a static
                    KV cache, then greedy decoding with each step a replayed CUDA graph (its
                    private memory pool)

Run one in one process:  python3 more_workloads.py NAME OUTDIR
The contract is workloads.py's: the timed span is in the global `secs`, the last loss (a
figure that must be the same under every allocator) in `FINAL["loss"]`; it prints one JSON
line. PyTorch reads PYTORCH_CUDA_ALLOC_CONF from the environment, so each allocator
configuration is its own process. Models are built from configs with random weights (no
download): the figures are the allocator's, not the models'.

With DETERMINISTIC=1, PyTorch is asked for deterministic kernels
(torch.use_deterministic_algorithms, CUBLAS_WORKSPACE_CONFIG=:4096:8, new tensors left
unfilled): whether a loss that varies from run to run varies with the kernels or with where the
allocator places tensors. The workspace setting changes what cuBLAS asks the allocator for, so
such runs' peaks and times are not those of the usual runs.
"""
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

import decoder_model

NAME, OUT = sys.argv[1], sys.argv[2]
if os.environ.get("DETERMINISTIC") == "1":
    # Read when cuBLAS makes its handle, at the first matrix product: set before any.
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(True)
    # Deterministic mode also fills every new tensor with NaN, which would hide a read of
    # memory left by an earlier tensor: one way where a tensor is placed could change a loss.
    torch.utils.deterministic.fill_uninitialized_memory = False
torch.manual_seed(0)
random.seed(0)
dev = torch.device("cuda")
FINAL = {}


def bert_large_ckpt():
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    model = BertForMaskedLM(cfg).to(dev)
    model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(8):
        seq = random.choice([128, 256, 384, 512])
        bs = random.choice([8, 16, 24])
        x = torch.randint(0, cfg.vocab_size, (bs, seq), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        FINAL["loss"] = float(loss)


def vit_side_stream():
    import torchvision
    model = torchvision.models.vit_b_16(weights=None).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    crit = torch.nn.CrossEntropyLoss()
    side, main = torch.cuda.Stream(), torch.cuda.current_stream()
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)

    def batch(step):
        # Made on the side stream, as a loader's prefetch would: the main stream waits for it
        # and record_stream keeps its memory from being reused on the side stream too early.
        bs = 96 if step % 3 == 0 else 64
        with torch.cuda.stream(side):
            raw = torch.randint(0, 256, (bs, 3, 224, 224), device=dev, dtype=torch.uint8)
            x = (raw.float() / 255 - mean) / 0.226
            y = torch.randint(0, 1000, (bs,), device=dev)
        return x, y

    nxt = batch(0)
    for step in range(8):
        main.wait_stream(side)
        x, y = nxt
        x.record_stream(main)
        y.record_stream(main)
        if step + 1 < 8:
            nxt = batch(step + 1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = crit(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y
        FINAL["loss"] = float(loss)


class MoE(torch.nn.Module):
    """Top-2 routing over `experts` feed-forward experts. Each token goes to two experts;
    outputs are put back by plain indexing (unique indices for each of the two choices), so
    the result does not depend on the order of atomic additions."""

    def __init__(self, d, ffn, experts):
        super().__init__()
        self.router = torch.nn.Linear(d, experts, bias=False)
        self.up = torch.nn.ModuleList(torch.nn.Linear(d, ffn) for _ in range(experts))
        self.down = torch.nn.ModuleList(torch.nn.Linear(ffn, d) for _ in range(experts))

    def forward(self, x):
        weights, chosen = torch.topk(torch.softmax(self.router(x), dim=-1), 2, dim=-1)
        out = 0
        for k in range(2):
            placed = torch.zeros_like(x)
            for e in range(len(self.up)):
                idx = (chosen[:, k] == e).nonzero(as_tuple=True)[0]
                if idx.numel() == 0:
                    continue
                placed = placed.index_put((idx,), self.down[e](F.gelu(self.up[e](x[idx]))).to(x.dtype))
            out = out + weights[:, k:k + 1] * placed
        return x + out


def moe_train():
    d, vocab = 1024, 8192
    emb = torch.nn.Embedding(vocab, d).to(dev)
    layers = torch.nn.ModuleList(MoE(d, 4096, 8) for _ in range(6)).to(dev)
    head = torch.nn.Linear(d, vocab).to(dev)
    params = list(emb.parameters()) + list(layers.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    for step in range(10):
        bs, seq = random.choice([8, 16, 32]), random.choice([128, 256, 512])
        tokens = torch.randint(0, vocab, (bs * seq,), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = emb(tokens)
            for layer in layers:
                h = layer(h)
            loss = F.cross_entropy(head(h).float(), tokens.roll(1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        FINAL["loss"] = float(loss)


def t5_train():
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config(d_model=768, d_ff=3072, d_kv=64, num_layers=12, num_decoder_layers=12, num_heads=12,
                   vocab_size=32128, decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(cfg).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(8):
        bs = random.choice([8, 16, 32])
        src, tgt = random.choice([128, 256, 384, 512]), random.choice([32, 64, 128])
        x = torch.randint(1, cfg.vocab_size, (bs, src), device=dev)
        y = torch.randint(1, cfg.vocab_size, (bs, tgt), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=y).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        FINAL["loss"] = float(loss)


class Decoder(decoder_model.Decoder):
    """decoder_model.py's pre-norm decoder-only transformer (the same layers, made in the same
    order, so the same weights from a seed), attending over a static KV cache instead: `forward`
    writes the keys and values of positions [start, start + len) and attends over [0, end)."""

    def __init__(self, layers, d, heads, vocab, max_len):
        super().__init__(layers=layers, d=d, heads=heads, vocab=vocab)
        self.max_len = max_len

    def cache(self, bs):
        shape = (len(self.qkv), 2, bs, self.heads, self.max_len, self.emb.embedding_dim // self.heads)
        return torch.zeros(shape, device=dev, dtype=torch.bfloat16)

    def forward(self, tokens, cache, start, mask):
        bs, n = tokens.shape
        h = self.emb(tokens)
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](F.layer_norm(h, h.shape[-1:])).view(bs, n, 3, self.heads, -1).unbind(2)
            cache[i, 0, :, :, start:start + n] = k.transpose(1, 2)
            cache[i, 1, :, :, start:start + n] = v.transpose(1, 2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), cache[i, 0], cache[i, 1], attn_mask=mask)
            h = h + self.proj[i](a.transpose(1, 2).reshape(bs, n, -1))
            h = h + self.down[i](F.gelu(self.up[i](F.layer_norm(h, h.shape[-1:]))))
        return self.head(self.norm(h[:, -1]))


def llm_decode():
    max_len, steps = 1536, 32
    model = Decoder(layers=16, d=2048, heads=16, vocab=32000, max_len=max_len).to(dev, torch.bfloat16).eval()
    pool = torch.cuda.graph_pool_handle()
    graphs = {}  # batch size -> (graph, its static token, position, logits, cache)
    positions = torch.arange(max_len, device=dev)
    checksum = 0
    with torch.no_grad():
        for request in range(5):
            bs, prompt = random.choice([4, 8, 16]), random.choice([128, 256, 512, 768, 1024])
            if bs not in graphs:
                cache = model.cache(bs)
                token = torch.zeros(bs, 1, dtype=torch.long, device=dev)
                pos = torch.zeros((), dtype=torch.long, device=dev)

                def step(token=token, cache=cache, pos=pos):
                    return decode_step(model, token, cache, pos, (positions <= pos).view(1, 1, 1, -1))

                warm = torch.cuda.Stream()
                warm.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(warm):
                    for _ in range(2):
                        step()
                torch.cuda.current_stream().wait_stream(warm)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    logits = step()
                graphs[bs] = (graph, token, pos, logits, cache)
            graph, token, pos, logits, cache = graphs[bs]
            prompt_tokens = torch.randint(0, 32000, (bs, prompt), device=dev)
            causal = torch.ones(prompt, max_len, dtype=torch.bool, device=dev).tril(0)
            first = model(prompt_tokens, cache, 0, causal.view(1, 1, prompt, max_len))
            token.copy_(first.argmax(-1, keepdim=True))
            for i in range(steps):
                pos.fill_(prompt + i)
                graph.replay()
                if i == 0:
                    # The prompt's logits and the first replayed step's: what decides them is
                    # the same under any allocator. Later steps feed each argmax back, so a
                    # last-bit difference of a non-deterministic kernel changes every later
                    # token, under PyTorch's allocator alone too.
                    checksum += float(first.float().sum()) + float(logits.float().sum())
                token.copy_(logits.argmax(-1, keepdim=True))
            FINAL["loss"] = checksum


def decode_step(model, token, cache, pos, mask):
    """One decoding step at position `pos` (a tensor, so a captured graph replays at any
    position): the keys and values go into the cache with index_copy."""
    bs = token.shape[0]
    h = model.emb(token)
    for i in range(len(model.qkv)):
        q, k, v = model.qkv[i](F.layer_norm(h, h.shape[-1:])).view(bs, 1, 3, model.heads, -1).unbind(2)
        cache[i, 0].index_copy_(2, pos.view(1), k.transpose(1, 2))
        cache[i, 1].index_copy_(2, pos.view(1), v.transpose(1, 2))
        a = F.scaled_dot_product_attention(q.transpose(1, 2), cache[i, 0], cache[i, 1], attn_mask=mask)
        h = h + model.proj[i](a.transpose(1, 2).reshape(bs, 1, -1))
        h = h + model.down[i](F.gelu(model.up[i](F.layer_norm(h, h.shape[-1:]))))
    return model.head(model.norm(h[:, -1]))


WORKLOADS = dict(bert_large_ckpt=bert_large_ckpt, vit_side_stream=vit_side_stream, moe_train=moe_train,
                 t5_train=t5_train, llm_decode=llm_decode)

t0 = time.time()
WORKLOADS[NAME]()
torch.cuda.synchronize()
secs = time.time() - t0
os.makedirs(OUT, exist_ok=True)
print(json.dumps(dict(workload=NAME, secs=round(secs, 1), final_loss=FINAL.get("loss"))))
