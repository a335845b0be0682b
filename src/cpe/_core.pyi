from typing import Any, SupportsIndex, TypeVar, final, overload

import numpy as np
import numpy.typing as npt

from cpe._typing import Convention, DType, Float, Layout, Out

_T = TypeVar("_T")

@overload
def positional_encoding(
    position: npt.ArrayLike,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    dtype: type[Float] | np.dtype[Float] = ...,
    out: None = None,
    layout: Layout | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: Convention | None = None,
    workers: SupportsIndex | None = None,
) -> npt.NDArray[Float]: ...
@overload
def positional_encoding(
    position: npt.ArrayLike,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    dtype: DType = ...,
    out: None = None,
    layout: Layout | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: Convention | None = None,
    workers: SupportsIndex | None = None,
) -> npt.NDArray[np.floating[Any]]: ...
@overload
def positional_encoding(
    position: npt.ArrayLike,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    dtype: DType = ...,
    out: Out,
    layout: Layout | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: Convention | None = None,
    workers: SupportsIndex | None = None,
) -> Out: ...
@overload
def positional_encoding_table(
    n: SupportsIndex,
    D: SupportsIndex,
    *,
    start: SupportsIndex = 0,
    base: float = 10000.0,
    dtype: type[Float] | np.dtype[Float] = ...,
    out: None = None,
    layout: Layout | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: Convention | None = None,
    workers: SupportsIndex | None = None,
) -> npt.NDArray[Float]: ...
@overload
def positional_encoding_table(
    n: SupportsIndex,
    D: SupportsIndex,
    *,
    start: SupportsIndex = 0,
    base: float = 10000.0,
    dtype: DType = ...,
    out: None = None,
    layout: Layout | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: Convention | None = None,
    workers: SupportsIndex | None = None,
) -> npt.NDArray[np.floating[Any]]: ...
@overload
def positional_encoding_table(
    n: SupportsIndex,
    D: SupportsIndex,
    *,
    start: SupportsIndex = 0,
    base: float = 10000.0,
    dtype: DType = ...,
    out: Out,
    layout: Layout | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: Convention | None = None,
    workers: SupportsIndex | None = None,
) -> Out: ...
def _huge_page_bytes() -> int: ...

@final
class Cache:
    nbytes: int
    budget: int
    def __init__(self, budget: int) -> None: ...
    def get(self, key: object) -> Any: ...
    def keep(self, key: object, value: _T, nbytes: int) -> _T: ...
    def snapshot(self) -> tuple[list[Any], list[int], int, int]: ...

def prepare_out(
    out: object, shape: tuple[int, ...], dt: np.dtype[Any], sizes: str, name: str = "out"
) -> npt.NDArray[np.floating[Any]]: ...
def rope_outputs(
    out: tuple[object, object], shape: tuple[int, ...], dt: np.dtype[Any], sizes: str
) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]: ...
def new_tables(
    shape: tuple[int, ...], dt: np.dtype[Any], sizes: str
) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]: ...
def axis_encoding(
    size: int,
    step: float,
    width: int,
    base: float,
    dt: np.dtype[Any],
    names: str,
    freq_shift: float = 0.0,
) -> npt.NDArray[np.floating[Any]]: ...
def blend_frequencies(
    w: npt.ArrayLike, divisor: npt.ArrayLike, weight: npt.ArrayLike, kept: npt.ArrayLike
) -> npt.NDArray[np.float64]: ...
def paper_frequencies(
    width: int, base: float, name: str, base_name: str = "base"
) -> npt.NDArray[np.float64]: ...
def rope_tables(
    out: tuple[object, object] | None, shape: tuple[int, ...], dt: np.dtype[Any], sizes: str
) -> tuple[Any, Any]: ...
def rope_fill(
    cos: Any,
    sin: Any,
    dt: np.dtype[Any],
    positions: npt.NDArray[Any] | None,
    start: float,
    axes: tuple[Any, ...] | None,
    interleaved: bool,
    amplitude: float,
    workers: int,
    name: str,
) -> None: ...

MAX_AXES: int

def rope_axes(
    axes: list[Any],
    base: object,
    base_name: str,
    n_freq: int,
    pairs: bool = False,
    half_at: int = 0,
) -> tuple[Any, ...]: ...
def encoding_axes(
    D: object,
    base: float,
    scale: float,
    convention: object,
    layout: object,
    freq_shift: object,
) -> tuple[Any, ...]: ...
def apply_rows(
    targets: list[tuple[Any, ...]],
    positions: npt.NDArray[Any] | None,
    start: float,
    n: int,
    axes: tuple[Any, ...],
    interleaved: bool,
    inverse: bool,
    amplitude: float,
    x_scale: float,
    workers: int,
    name: str,
) -> None: ...
