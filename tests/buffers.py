"""Output buffers at a chosen offset from a cache line, for the tests of paths
whose choices depend on alignment (streaming stores, rows read at the output's
offset). Plain Python and NumPy: test_paths also runs this file's source in
subprocesses."""

import numpy as np


def on_line(shape, dtype, offset):
    """An empty array of ``shape`` that starts ``offset`` bytes past a 64-byte boundary."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buffer = np.empty(size + 128, np.uint8)
    skip = (-buffer.ctypes.data) % 64 + offset
    return buffer[skip : skip + size].view(dtype).reshape(shape)
