from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

def positional_encoding(
    position: npt.ArrayLike,
    D: int,
    *,
    base: float = 10000.0,
    dtype: npt.DTypeLike = ...,
    out: npt.NDArray[np.floating[Any]] | None = None,
    layout: str | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: str | None = None,
) -> npt.NDArray[np.floating[Any]]: ...
def positional_encoding_table(
    n: int,
    D: int,
    *,
    start: int = 0,
    base: float = 10000.0,
    dtype: npt.DTypeLike = ...,
    out: npt.NDArray[np.floating[Any]] | None = None,
    layout: str | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: str | None = None,
) -> npt.NDArray[np.floating[Any]]: ...
def _huge_page_bytes() -> int: ...
def _check_count(value: object, name: str, minimum: int) -> int: ...
def _check_real(value: object, name: str) -> float: ...
def _check_start(start: object) -> int: ...
def _check_table_start(start: object, rows: int) -> int: ...
def _check_base(base: object) -> float: ...
def _check_dtype(dtype: object) -> np.dtype[Any]: ...
def _check_out(
    out: object, shape: tuple[int, ...], dtype: np.dtype[Any], sizes: str
) -> npt.NDArray[np.floating[Any]]: ...
def _overlap(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> bool: ...
def _fill_rope(
    cos: npt.NDArray[np.floating[Any]],
    sin: npt.NDArray[np.floating[Any]],
    start: int,
    base: float,
    interleaved: bool,
) -> None: ...
def _rope_positions(
    position: object,
    head_dim: int,
    base: object,
    dtype: object,
    interleaved: bool,
    check_out: Callable[
        [tuple[int, ...], np.dtype[Any]],
        tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]],
    ]
    | None = None,
) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]: ...
