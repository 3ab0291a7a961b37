"""The allocator a GPU script's process runs under, chosen before torch is imported (PyTorch
reads PYTORCH_CUDA_ALLOC_CONF once, and cachalot must be installed before CUDA starts), and
its statistics read from whichever holds them.

  choose(name): `pytorch` (PyTorch's default), `expandable`
      (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or `cachalot` (cachalot_torch.install(),
      its default config, from the wheel). Call it before importing torch.
  memory_stats(name): the allocator's statistics, in torch.cuda.memory_stats()'s keys.
  reset_peak_memory_stats(name).
"""
import os


def choose(name):
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if name == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if name == "cachalot":
        import cachalot_torch

        cachalot_torch.install()


def _holder(name):
    if name == "cachalot":
        import cachalot_torch

        return cachalot_torch
    import torch

    return torch.cuda


def memory_stats(name):
    return _holder(name).memory_stats()


def reset_peak_memory_stats(name):
    _holder(name).reset_peak_memory_stats()
