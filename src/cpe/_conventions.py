"""The sinusoidal conventions in use, and how each maps onto cpe's kernels.

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

from collections.abc import Sequence
from dataclasses import dataclass

LAYOUTS = {"interleaved": 0, "sin_cos": 1, "cos_sin": 2}


@dataclass(frozen=True)
class Convention:
    """A named preset: its layout and frequency shift, and who uses it."""

    layout: str
    freq_shift: float | None
    used_by: str


CONVENTIONS = {
    "paper": Convention(
        "interleaved",
        None,
        "Vaswani et al. (2017), the PyTorch tutorial, the Annotated Transformer, "
        "HF DistilBERT/XLM create_sinusoidal_embeddings, keras-hub SinePositionEncoding",
    ),
    "marian": Convention("sin_cos", None, "HF Marian and Pegasus sinusoidal positional embeddings"),
    "fairseq": Convention(
        "sin_cos",
        1.0,
        "fairseq SinusoidalPositionalEmbedding.get_embedding and its HF copies (M2M100, ...)",
    ),
    "tensor2tensor": Convention("sin_cos", 1.0, "tensor2tensor get_timing_signal_1d"),
    "whisper": Convention("sin_cos", 1.0, "OpenAI Whisper sinusoids"),
    "diffusers": Convention(
        "sin_cos", 1.0, "diffusers get_timestep_embedding with its default arguments"
    ),
    "adm": Convention(
        "cos_sin",
        0.0,
        "guided-diffusion/ADM timestep_embedding and the Stable Diffusion UNet "
        "(diffusers flip_sin_to_cos=True, downscale_freq_shift=0)",
    ),
}


def is_one_of(value: object, options: Sequence[str]) -> bool:
    """``value`` is one of the strings ``options`` (arrays and other objects are not)."""
    return isinstance(value, str) and value in options


def resolve(
    D: int, convention: object, layout: object, freq_shift: float | None
) -> tuple[int, int, float]:
    """``(layout code, number of frequencies, exponent denominator)`` for the kernels.

    ``convention`` and ``layout`` come from the caller as they are (they are
    checked here); ``freq_shift`` has already been checked to be a finite float
    or None.
    """
    if convention is not None:
        if not isinstance(convention, str) or convention not in CONVENTIONS:
            names = ", ".join(repr(name) for name in CONVENTIONS)
            raise ValueError(f"convention must be one of {names}, got {convention!r}")
        if layout is not None or freq_shift is not None:
            raise ValueError(
                f"convention={convention!r} sets layout and freq_shift; "
                "pass either convention or layout/freq_shift, not both"
            )
        preset = CONVENTIONS[convention]
        layout, freq_shift = preset.layout, preset.freq_shift
    if layout is None:
        layout = "interleaved"
    if not isinstance(layout, str) or layout not in LAYOUTS:
        names = ", ".join(repr(name) for name in LAYOUTS)
        raise ValueError(f"layout must be one of {names}, got {layout!r}")
    if freq_shift is None:
        return LAYOUTS[layout], (D + 1) // 2, D / 2.0
    half = D // 2
    if half <= 1:
        # At most one frequency, w_0 = base ** 0 = 1, whatever the denominator:
        # tensor2tensor's guarded formula (max(D // 2 - 1, 1)). fairseq divides
        # by zero there, Whisper and diffusers give NaN; there is no other value.
        return LAYOUTS[layout], half, 1.0
    # (Every preset's shift, 0 or 1, passes from D = 4 on.)
    if not half - freq_shift > 0:
        raise ValueError(
            f"freq_shift={freq_shift!r} needs D // 2 - freq_shift > 0, got D={D} "
            f"(D // 2 - freq_shift = {half - freq_shift!r})"
        )
    return LAYOUTS[layout], half, half - freq_shift
