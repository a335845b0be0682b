# cpe.kernels' API is for Cython (see kernels.pxd). From Python only the capsules
# of that C API are visible, and _row_loop (which SIMD copy of the loops runs).
from typing import Any, Literal

__pyx_capi__: dict[str, Any]

def _row_loop() -> Literal["avx512", "avx2", "portable"]: ...
