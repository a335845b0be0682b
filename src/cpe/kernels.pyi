# cpe.kernels' API is for Cython (see kernels.pxd). From Python only the capsules
# of that C API are visible, _row_loop (which SIMD copy of the loops runs),
# _tile_rows (the grids' token copies) and _streams (whether an output would be
# written with streaming stores).
from typing import Any, Literal

__pyx_capi__: dict[str, Any]

def _row_loop() -> Literal["avx512", "avx2", "portable"]: ...
def _tile_rows(out: Any, first: Any, second: Any, segments: Any) -> None: ...
def _streams(out: Any) -> bool: ...
