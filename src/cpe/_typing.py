"""The names of cpe's choices, for type checkers (at run time every str is read and
a wrong one is a ValueError that lists the right ones)."""

from typing import Literal

Layout = Literal["interleaved", "sin_cos", "cos_sin"]
Convention = Literal["paper", "marian", "fairseq", "tensor2tensor", "whisper", "diffusers", "adm"]
RopeLayout = Literal["half", "interleaved"]
GridLayout = Literal["mae", "timm", "timm_interleaved"]
