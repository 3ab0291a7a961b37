"""What `pip install ./native/python` puts beside cachalot_torch: libcachalot.so, the C header
(include/cachalot.h) and the sources of the PyTorch extension (torch/), which cachalot_torch
builds with torch.utils.cpp_extension on first use. Nothing here is imported for its code."""
import os

ROOT = os.path.dirname(os.path.abspath(__file__))
