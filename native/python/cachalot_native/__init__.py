"""What cachalot's wheel puts beside cachalot_torch: libcachalot.so.0.x, the PyTorch extension
built for each supported PyTorch minor (libcachalot_torch_<M>_<m>.so, loaded by
cachalot_torch.install()) and the C header (include/cachalot.h). Nothing here is imported for
its code."""
import os

ROOT = os.path.dirname(os.path.abspath(__file__))
