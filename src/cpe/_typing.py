"""The names of cpe's choices, for type checkers (at run time every str is read and
a wrong one is a ValueError that lists the right ones), and the type variables of
the overloads that type a result by its ``dtype=`` or its ``out=``."""

from typing import TYPE_CHECKING, Any, Literal

Layout = Literal["interleaved", "sin_cos", "cos_sin"]
Convention = Literal["paper", "marian", "fairseq", "tensor2tensor", "whisper", "diffusers", "adm"]
RopeLayout = Literal["half", "interleaved"]
GridLayout = Literal["mae", "timm", "timm_interleaved"]

if TYPE_CHECKING:  # typing.TypeVar takes a default from Python 3.13 on
    import numpy as np
    from typing_extensions import TypeVar

    # The scalar type of a result; float64 when dtype= is not given.
    Float = TypeVar("Float", bound=np.floating[Any], default=np.float64)
    # out= (and RoPE's second one): returned as given, a torch tensor say.
    Out = TypeVar("Out")
    Out2 = TypeVar("Out2")
