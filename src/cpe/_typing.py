"""The names of cpe's choices, for type checkers (at run time every str is read and
a wrong one is a ValueError that lists the right ones), and the type variables of
the overloads that type a result by its ``dtype=`` or its ``out=``."""

from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

Layout = Literal["interleaved", "sin_cos", "cos_sin"]
Convention = Literal["paper", "marian", "fairseq", "tensor2tensor", "whisper", "diffusers", "adm"]
RopeLayout = Literal["half", "interleaved"]
GridLayout = Literal["mae", "timm", "timm_interleaved"]

if TYPE_CHECKING:  # typing.TypeVar takes a default from Python 3.13 on
    import numpy as np
    import numpy.typing as npt
    from typing_extensions import Buffer, TypeVar

    class TorchDType(Protocol):
        """torch.float32 and the like, read by name (cpe never imports torch)."""

        @property
        def is_floating_point(self) -> bool: ...
        @property
        def itemsize(self) -> int: ...

    class SupportsDLPack(Protocol):
        """A CPU array that shares its memory through DLPack (a torch tensor, say)."""

        def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    # What dtype= reads: NumPy's dtype-likes, torch's dtypes, and None (float64).
    DType: TypeAlias = npt.DTypeLike | TorchDType | None
    # The scalar type of a result; float64 when dtype= is not given.
    Float = TypeVar("Float", bound=np.floating[Any], default=np.float64)
    # out= (and RoPE's second one): returned as given, a torch tensor say. (NumPy's
    # stubs make an ndarray a Buffer from Python 3.12 on, and it has __dlpack__.)
    Out = TypeVar("Out", bound=Buffer | SupportsDLPack)
    Out2 = TypeVar("Out2", bound=Buffer | SupportsDLPack)
