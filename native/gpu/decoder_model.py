"""The decoder the GPU scripts generate text with: a language model whose KV cache grows by
concatenation (each layer's keys and values joined with the new token's in a new, longer
tensor, the old one freed), as a dynamic cache does, with random weights (no download).
Imported after the allocator is chosen: it imports torch.

  Decoder(layers=16, d=2048, heads=16, vocab=32000, kv="pair")
  generate(model, bs, device): a prompt of 256 tokens, then 256 greedy steps; returns a
      checksum of the prompt's and the first step's logits (the same under every allocator,
      up to the spread of the GPU's arithmetic).

kv="pair" makes each layer's longer keys and values before the cache lets the old ones go;
kv="each" regrows the keys, lets the old keys go, then does the same for the values, as
transformers' DynamicCache does (a stream cachalot's policy gives a region). The arithmetic is
the same either way. The prompt's keys and values are views of one projection, so the first
step after it frees them together either way; "each" differs from the second step on.
"""
import torch
import torch.nn.functional as F


class Decoder(torch.nn.Module):
    def __init__(self, layers=16, d=2048, heads=16, vocab=32000, kv="pair"):
        super().__init__()
        if kv not in ("pair", "each"):
            raise ValueError(f"kv={kv!r}: 'pair' or 'each'")
        self.kv = kv
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
                if self.kv == "each":
                    cache[i] = (k, cache[i][1])
                v = torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, is_causal=n > 1)
            h = h + self.proj[i](a.transpose(1, 2).reshape(bs, n, -1))
            h = h + self.down[i](F.gelu(self.up[i](F.layer_norm(h, h.shape[-1:]))))
        return self.head(self.norm(h[:, -1]))


def generate(model, bs, device, prompt_tokens=256, steps=256):
    """One generation at batch `bs` from a prompt drawn with seed 1; returns its checksum."""
    gen = torch.Generator(device=device).manual_seed(1)
    cache = [None] * len(model.qkv)
    with torch.no_grad():
        prompt = torch.randint(0, model.head.out_features, (bs, prompt_tokens), device=device, generator=gen)
        logits = model(prompt, cache)
        checksum = float(logits.float().sum())
        token = logits.argmax(-1, keepdim=True)
        for step in range(steps):
            logits = model(token, cache)
            if step == 0:
                checksum += float(logits.float().sum())
            token = logits.argmax(-1, keepdim=True)
    return checksum
