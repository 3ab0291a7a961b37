#!/usr/bin/env python3
"""Writes an RMM CSV trace of a language model generating text with a KV cache grown by
concatenation, as Hugging Face's generate() did before static caches: the allocations a
decoder-only model's forward passes make, layer by layer.

The model's weights are allocated first and stay live. The prefill runs the prompt through
every layer: per layer the input's norm, the fused q/k/v projection, the attention scores
(batch x heads x prompt x prompt), the attention output, the MLP's intermediate (4x hidden) and
the layer's output, each freed once the next needs it; the layer's K and V caches
(batch x prompt x hidden each) stay. Then each decoding step runs one token through every
layer: the same temporaries for one token (the scores over the whole length so far), and K
and V grown by one token: torch.cat allocates the longer tensor and the shorter one is freed.
Each step ends with the logits (batch x vocab, in float32) and the sampled tokens.

Sizes are in bf16 (2 bytes) unless said; pointers are unique (replay with
--no-follow-addresses: they say nothing about where a run placed its segments).

Usage: decode_trace.py --batch B --prompt P --new N [--layers L] [--hidden H] [--vocab V] > t.csv
   or: decode_trace.py ... --out t.csv.gz
Example: decode_trace.py --batch 64 --prompt 256 --new 256 --layers 16 --hidden 2048
(the decoding job of native/gpu/largest_batch.py, 16 layers of 2048 with 256 + 256 tokens).
"""
import argparse
import gzip
import sys


class Trace:
    def __init__(self, out):
        self.out = out
        self.time = 0
        self.next_pointer = 0x7F0000000000
        self.out.write("Thread,Time,Action,Pointer,Size,Stream\n")

    def _row(self, action, pointer, size):
        self.time += 1
        self.out.write(f"0,{self.time},{action},{pointer:#x},{size},0x0\n")

    def alloc(self, size):
        pointer = self.next_pointer
        # Unique, aligned pointers, never reused.
        self.next_pointer += (size + 0xFFFFF) // 0x100000 * 0x100000 + 0x100000
        self._row("allocate", pointer, size)
        return (pointer, size)

    def free(self, block):
        self._row("free", block[0], block[1])


def layer(t, batch, tokens, length, hidden, caches, i):
    """One decoder layer over `tokens` new tokens with `length` tokens of context; grows
    layer i's K and V caches (or makes them, in the prefill)."""
    act = batch * tokens * hidden * 2
    norm = t.alloc(act)
    qkv = t.alloc(3 * act)
    t.free(norm)
    for kv in (0, 1):
        grown = t.alloc(batch * length * hidden * 2)
        if caches[i][kv] is not None:
            t.free(caches[i][kv])
        caches[i][kv] = grown
    heads = hidden // 128
    scores = t.alloc(batch * heads * tokens * length * 2)
    probs = t.alloc(batch * heads * tokens * length * 2)
    t.free(scores)
    attn = t.alloc(act)
    t.free(probs)
    t.free(qkv)
    out = t.alloc(act)
    t.free(attn)
    norm = t.alloc(act)
    up = t.alloc(4 * act)
    gate = t.alloc(4 * act)
    t.free(norm)
    t.free(up)
    down = t.alloc(act)
    t.free(gate)
    residual = t.alloc(act)
    t.free(out)
    t.free(down)
    return residual


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--prompt", type=int, required=True)
    p.add_argument("--new", type=int, required=True)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--out", help="a .csv or .csv.gz file (default stdout)")
    a = p.parse_args()
    if a.out:
        out = gzip.open(a.out, "wt", compresslevel=6) if a.out.endswith(".gz") else open(a.out, "w")
    else:
        out = sys.stdout
    t = Trace(out)
    h = a.hidden
    weights = [t.alloc(a.vocab * h * 2)]
    for _ in range(a.layers):
        weights += [t.alloc(3 * h * h * 2), t.alloc(h * h * 2), t.alloc(4 * h * h * 2), t.alloc(4 * h * h * 2), t.alloc(4 * h * h * 2)]
        weights += [t.alloc(h * 2), t.alloc(h * 2)]
    caches = [[None, None] for _ in range(a.layers)]
    for step in range(a.new + 1):
        tokens = a.prompt if step == 0 else 1
        length = a.prompt + step
        x = t.alloc(a.batch * tokens * h * 2)
        for i in range(a.layers):
            y = layer(t, a.batch, tokens, length, h, caches, i)
            t.free(x)
            x = y
        logits = t.alloc(a.batch * a.vocab * 4)
        t.free(x)
        sampled = t.alloc(a.batch * 8)
        t.free(logits)
        t.free(sampled)
    for c in caches:
        for block in c:
            t.free(block)
    for w in weights:
        t.free(w)
    out.close()


if __name__ == "__main__":
    main()
