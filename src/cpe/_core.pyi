from typing import Any

import numpy as np
import numpy.typing as npt

def positional_encoding(
    position: npt.ArrayLike,
    D: int,
    *,
    base: float = 10000.0,
    dtype: npt.DTypeLike = np.float64,
    out: npt.NDArray[np.floating[Any]] | None = None,
) -> npt.NDArray[np.floating[Any]]: ...
def positional_encoding_table(
    n: int,
    D: int,
    *,
    start: int = 0,
    base: float = 10000.0,
    dtype: npt.DTypeLike = np.float64,
    out: npt.NDArray[np.floating[Any]] | None = None,
) -> npt.NDArray[np.floating[Any]]: ...
