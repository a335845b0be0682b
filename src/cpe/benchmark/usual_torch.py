"""PyTorch's usual positional-encoding table, which cpe is measured against.

This is the code of the PyTorch tutorials, with a ``start`` so that successive calls
encode different positions. Importing this module imports torch: the benchmark
imports it only when torch is installed, and pins torch to one thread so that it
is compared, like NumPy, single-threaded.
"""

from __future__ import annotations

import math

import torch


def torch_table(n: int, D: int, start: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``(n, D)`` table of positions ``start .. start + n - 1``."""
    pe = torch.zeros(n, D, dtype=dtype)
    position = torch.arange(start, start + n, dtype=dtype).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, D, 2, dtype=dtype) * (-math.log(10000.0) / D))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
