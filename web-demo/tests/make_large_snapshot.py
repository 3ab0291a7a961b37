"""Writes a large PyTorch snapshot, as JSON or as the pickle torch.cuda.memory._dump_snapshot
writes, of about the size asked for, to measure how large a snapshot the page opens and how
long it takes (web-demo/tests/large_snapshot.mjs runs it). Written as a stream, a record at a
time, so a 1 GB file needs no more memory than a small one. No torch needed.

The run it records: a training loop on one GPU that allocates tensors of 512 B to 64 MiB in
20 MiB and larger segments, frees most of them a little later, and keeps a few; every event
carries a Python stack of FRAMES frames, drawn from a few hundred distinct ones, as
_record_memory_history(stacks="python") records them (the frames are most of the bytes, as in
a real snapshot). The segments list holds what is live at the end.

Run: python3 web-demo/tests/make_large_snapshot.py MEGABYTES OUT.json|OUT.pickle [FRAMES]"""
import json
import random
import struct
import sys

MiB = 1 << 20
BASE = 0x7F0000000000


def frames_pool(rng):
    files = [f"/home/user/project/model/layer_{i}.py" for i in range(40)] + [
        "/usr/lib/python3/site-packages/torch/nn/modules/module.py",
        "/usr/lib/python3/site-packages/torch/_tensor.py",
        "/usr/lib/python3/site-packages/torch/autograd/__init__.py"]
    names = ["forward", "backward", "_call_impl", "_wrapped_call_impl", "step", "attention", "mlp", "layer_norm"]
    return [{"filename": rng.choice(files), "line": rng.randrange(1, 3000), "name": rng.choice(names)}
            for _ in range(300)]


def events(rng, pool, depth):
    """Endless history: segment_alloc, alloc, free_requested, free_completed, with stacks."""
    live = []
    segment_end = BASE
    room = 0
    t = 1_700_000_000_000_000
    while True:
        stack = [pool[rng.randrange(len(pool))] for _ in range(depth)]
        if live and (len(live) > 200 or rng.random() < 0.48):
            addr, size = live.pop(rng.randrange(len(live)))
            t += 1
            yield {"action": "free_requested", "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": stack}
            yield {"action": "free_completed", "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": stack}
            continue
        size = 512 * rng.choice([1, 2, 8, 64, 512, 2048, 8192, 32768, 131072])
        if size > room:
            seg = max(20 * MiB, (size + 2 * MiB - 1) // (2 * MiB) * (2 * MiB))
            t += 1
            yield {"action": "segment_alloc", "addr": segment_end, "size": seg, "stream": 0, "time_us": t,
                   "frames": stack}
            room = seg
            segment_end += seg
        addr = segment_end - room
        room -= size
        live.append((addr, size))
        t += 1
        yield {"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": stack}


class JsonOut:
    def __init__(self, f):
        self.f = f

    def begin(self):
        self.f.write(b'{"device_traces": [[')
        self.first = True

    def event(self, e):
        self.f.write((b"" if self.first else b",\n") + json.dumps(e).encode())
        self.first = False

    def end(self, segments):
        self.f.write(b']], "segments": ' + json.dumps(segments).encode() + b"}")


class PickleOut:
    """Protocol 4 opcodes, as pickle.dump writes them (without the memo: every value in full)."""

    def __init__(self, f):
        self.f = f
        self.batch = 0

    def value(self, v):
        w = self.f.write
        if isinstance(v, dict):
            w(b"}(")
            for k, x in v.items():
                self.value(k)
                self.value(x)
            w(b"u")
        elif isinstance(v, list):
            w(b"](")
            for x in v:
                self.value(x)
            w(b"e")
        elif isinstance(v, str):
            b = v.encode()
            w(b"\x8c" + bytes([len(b)]) + b if len(b) < 256 else b"X" + struct.pack("<I", len(b)) + b)
        elif isinstance(v, int) and 0 <= v < 1 << 31:
            w(b"J" + struct.pack("<i", v))
        elif isinstance(v, int):
            b = v.to_bytes(9, "little", signed=True).rstrip(b"\x00")
            w(b"\x8a" + bytes([len(b) + 1]) + b + b"\x00")
        else:
            raise TypeError(v)

    def begin(self):
        self.f.write(b"\x80\x04}(\x8c\x0ddevice_traces](](")

    def event(self, e):
        self.value(e)
        self.batch += 1
        if self.batch == 1000:
            self.f.write(b"e(")
            self.batch = 0

    def end(self, segments):
        self.f.write(b"ee\x8c\x08segments")
        self.value(segments)
        self.f.write(b"u.")


def main():
    megabytes, out = float(sys.argv[1]), sys.argv[2]
    depth = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    rng = random.Random(43)
    pool = frames_pool(rng)
    with open(out, "wb") as f:
        w = PickleOut(f) if out.endswith(".pickle") else JsonOut(f)
        w.begin()
        live = {}
        segs = []
        for e in events(rng, pool, depth):
            w.event(e)
            if e["action"] == "alloc":
                live[e["addr"]] = e
            elif e["action"] == "free_completed":
                live.pop(e["addr"], None)
            elif e["action"] == "segment_alloc":
                segs.append(e)
            if f.tell() >= megabytes * 1000 * 1000:
                break
        segments = []
        for s in segs:
            blocks = [{"address": a, "size": x["size"], "requested_size": x["size"], "state": "active_allocated",
                       "frames": x["frames"]} for a, x in sorted(live.items()) if s["addr"] <= a < s["addr"] + s["size"]]
            segments.append({"device": 0, "address": s["addr"], "total_size": s["size"], "stream": 0,
                             "segment_type": "large", "frames": s["frames"], "blocks": blocks})
        w.end(segments)


if __name__ == "__main__":
    main()
