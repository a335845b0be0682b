"""PyTorch's usual positional-encoding table, and the models' own rotary modules,
which cpe is measured against.

The table is the code of the PyTorch tutorials, with a ``start`` so that
successive calls encode different positions. Importing this module imports torch:
the benchmark imports it only when torch is installed, and pins torch to one
thread so that it is compared, like NumPy, single-threaded.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def torch_table(n: int, D: int, start: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``(n, D)`` table of positions ``start .. start + n - 1``."""
    pe = torch.zeros(n, D, dtype=dtype)
    position = torch.arange(start, start + n, dtype=dtype).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, D, 2, dtype=dtype) * (-math.log(10000.0) / D))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def model_module(
    model: str, head_dim: int, theta: int, axes_dim: tuple[int, ...], qwen2_vl: dict[str, Any]
) -> tuple[Any, Any]:
    """The rotary module a model calls, as a function of its ids, and how NumPy's
    ids are handed to it: diffusers' FluxPosEmbed ("flux", ``theta`` and
    ``axes_dim``) or transformers' Qwen2-VL rotary embedding (its config's
    ``rope_parameters``: ``qwen2_vl``). An ImportError when the package is absent."""
    torch.set_num_threads(1)
    if model == "flux":
        from diffusers.models.transformers.transformer_flux import FluxPosEmbed

        return FluxPosEmbed(theta=theta, axes_dim=list(axes_dim)), torch.from_numpy
    from transformers import Qwen2VLConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    settings: dict[str, Any] = {
        "hidden_size": head_dim * 2,
        "num_attention_heads": 2,
        "rope_parameters": qwen2_vl,
    }
    config: Any = Qwen2VLConfig(**settings).get_text_config()
    rotary = Qwen2VLRotaryEmbedding(config)
    x = torch.zeros((), dtype=torch.float32)  # (only its dtype and device are read)

    def call(ids: Any) -> Any:
        return rotary(x, ids)

    return call, torch.from_numpy


def llama_rotation(head_dim: int, rope_parameters: dict[str, Any]) -> tuple[Any, Any]:
    """transformers' Llama rotation, as its attention layer runs it: the rotary
    module's (cos, sin) of the position ids, then ``apply_rotary_pos_emb`` (the
    first, end to end), and ``apply_rotary_pos_emb`` alone (the second, fed
    tables). An ImportError when transformers is absent."""
    torch.set_num_threads(1)
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    settings: dict[str, Any] = {
        "hidden_size": head_dim * 2,
        "num_attention_heads": 2,
        "rope_parameters": rope_parameters,
        "max_position_embeddings": 131072,
    }
    rotary = LlamaRotaryEmbedding(LlamaConfig(**settings))

    def model(q: Any, k: Any, position_ids: Any) -> Any:
        cos, sin = rotary(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)

    return model, apply_rotary_pos_emb
