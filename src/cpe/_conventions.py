"""The sinusoidal conventions in use (``_core._resolve`` maps them onto the kernels).

Every convention is a choice of frequencies and of column layout:

* paper frequencies (``freq_shift=None``): ``w_j = base ** (-2j / D)`` for
  ``j < ceil(D / 2)``; an odd ``D`` ends with a sine column;
* shifted half-width frequencies (``freq_shift=s``): with ``n = D // 2``,
  ``w_j = base ** (-j / (n - s))`` for ``j < n``; an odd ``D`` ends with a zero
  column;

and in both cases the angle is ``scale * p * w_j``. The layout puts
``sin(angle_j)`` and ``cos(angle_j)`` either in alternate columns
(``"interleaved"``), or in two blocks (``"sin_cos"``, ``"cos_sin"``).
"""

from __future__ import annotations

from typing import NamedTuple

LAYOUTS = {"interleaved": 0, "sin_cos": 1, "cos_sin": 2}


class Convention(NamedTuple):
    """A named preset: its layout and frequency shift (a tuple: _core._resolve unpacks it)."""

    layout: str
    freq_shift: float | None


# Who uses each (the README's table of conventions says more).
CONVENTIONS = {
    # Vaswani et al. (2017), the PyTorch tutorial, the Annotated Transformer,
    # HF DistilBERT/XLM create_sinusoidal_embeddings, keras-hub SinePositionEncoding
    "paper": Convention("interleaved", None),
    "marian": Convention("sin_cos", None),  # HF Marian and Pegasus
    # fairseq SinusoidalPositionalEmbedding.get_embedding and its HF copies (M2M100, ...)
    "fairseq": Convention("sin_cos", 1.0),
    "tensor2tensor": Convention("sin_cos", 1.0),  # get_timing_signal_1d
    "whisper": Convention("sin_cos", 1.0),  # OpenAI Whisper's sinusoids
    "diffusers": Convention("sin_cos", 1.0),  # get_timestep_embedding's defaults
    # guided-diffusion/ADM timestep_embedding and the Stable Diffusion UNet
    # (diffusers flip_sin_to_cos=True, downscale_freq_shift=0)
    "adm": Convention("cos_sin", 0.0),
}
