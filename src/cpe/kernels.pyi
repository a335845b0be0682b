# cpe.kernels' API is for Cython (see kernels.pxd). From Python only the capsules
# of that C API are visible.
from typing import Any

__pyx_capi__: dict[str, Any]
