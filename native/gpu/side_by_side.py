"""Times cachalot and PyTorch's allocator side by side: one process, one trace, passes that
alternate between the two, so that whatever the shared host does to its speed (which moves
single timings by up to 2x from one minute to the next) falls on both alike.

Both run warm over real memory on device 0's legacy default stream: PyTorch's CUDA caching
allocator from C++ (c10 raw_alloc/raw_delete, the loop of replay_torch.py, in this process's
PYTORCH_CUDA_ALLOC_CONF), and cachalot through its C ABI (cachalot_malloc/cachalot_free,
libcachalot.so, CONFIG). After one cold pass each, ROUNDS rounds each time one pass of both,
the order turning every round. Prints `RESULT {json}`: each side's median ns/op, the ratio of
the medians, and the median, lowest and highest of the rounds' ratios (PyTorch / cachalot).
With SIDE_BY_SIDE_BLOCKS=1 each side runs its ROUNDS passes in one block instead (cachalot's
first), which shows what each pass's cache left to the next costs.

usage: python3 side_by_side.py LIBCACHALOT TRACE.csv.gz [ROUNDS] [CONFIG]
(ROUNDS defaults to 21, CONFIG to policy:pytorch; run from the repository root, which holds
include/cachalot.h.)
"""
import ctypes, json, os, statistics, sys

import torch
from torch.utils.cpp_extension import load_inline

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replay_torch import SRC, load_ops  # noqa: E402

CACHALOT_SRC = r"""
#include "cachalot.h"

static cachalot_allocator *cachalot = nullptr;

// Creates the cachalot allocator of device 0 with `config`; throws with cachalot's message.
void cachalot_open(const std::string &config) {
  if (cachalot_allocator_new_cuda(0, config.c_str(), &cachalot) != CACHALOT_STATUS_OK) {
    std::string m(cachalot_last_error_message(nullptr, 0) + 1, '\0');
    cachalot_last_error_message(&m[0], m.size());
    throw std::runtime_error("cachalot_allocator_new_cuda: " + m);
  }
}

// One pass through cachalot, timed as replay_pass times PyTorch's allocator.
double cachalot_pass(const std::vector<int64_t>& ops, const std::vector<int64_t>& sizes, int64_t slots) {
  std::vector<void*> ptr(slots, nullptr);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < ops.size(); ++i) {
    int64_t o = ops[i];
    if (o >= 0) {
      if (cachalot_malloc(cachalot, sizes[i], nullptr, &ptr[o]) != CACHALOT_STATUS_OK) throw std::runtime_error("cachalot_malloc failed");
    } else { cachalot_free(cachalot, ptr[-o - 1]); ptr[-o - 1] = nullptr; }
  }
  auto t1 = std::chrono::steady_clock::now();
  for (auto p : ptr) if (p) cachalot_free(cachalot, p);
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / ops.size();
}
"""


def main():
    lib, path = os.path.abspath(sys.argv[1]), sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 21
    config = sys.argv[4] if len(sys.argv) > 4 else "policy:pytorch"
    libdir = os.path.dirname(lib)
    # The extension loads the library by its SONAME (native/build.rs); loaded by path first,
    # the library answers to that name, with no link beside it needed.
    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    ext = load_inline(name="side_by_side_ext", cpp_sources=SRC + CACHALOT_SRC,
                      functions=["replay_pass", "cachalot_open", "cachalot_pass"], with_cuda=True,
                      extra_cflags=["-O2"], extra_include_paths=[os.path.abspath("include")],
                      extra_ldflags=[f"-L{libdir}", "-lcachalot", f"-Wl,-rpath,{libdir}"], verbose=False)
    ops, sizes, nslots = load_ops(path)
    torch.cuda.init()
    ext.cachalot_open(config)
    passes = {"torch": ext.replay_pass, "cachalot": ext.cachalot_pass}
    cold = {name: run(ops, sizes, nslots) for name, run in passes.items()}
    times = {name: [] for name in passes}
    blocks = os.environ.get("SIDE_BY_SIDE_BLOCKS") == "1"
    if blocks:
        for name in ("cachalot", "torch"):
            times[name] = [passes[name](ops, sizes, nslots) for _ in range(rounds)]
    for r in range(0 if blocks else rounds):
        order = ("torch", "cachalot") if r % 2 == 0 else ("cachalot", "torch")
        for name in order:
            times[name].append(passes[name](ops, sizes, nslots))
    ratios = sorted(t / c for t, c in zip(times["torch"], times["cachalot"]))
    med = {name: statistics.median(v) for name, v in times.items()}
    print("RESULT " + json.dumps(dict(
        trace=os.path.basename(path), config=config, ops=len(ops), rounds=rounds, blocks=blocks,
        torch_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default") or "default",
        torch_ns_per_op_cold=round(cold["torch"], 1), cachalot_ns_per_op_cold=round(cold["cachalot"], 1),
        torch_ns_per_op_warm_median=round(med["torch"], 1), cachalot_ns_per_op_warm_median=round(med["cachalot"], 1),
        ratio_of_medians=round(med["torch"] / med["cachalot"], 2), ratio_median=round(statistics.median(ratios), 2),
        ratio_min=round(ratios[0], 2), ratio_max=round(ratios[-1], 2))))


if __name__ == "__main__":
    main()
