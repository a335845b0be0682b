"""Output buffers for the tests of paths whose choices depend on the buffer:
its offset from a cache line (streaming stores, rows read at the output's
offset) and whether its memory is mapped yet (large outputs are streamed only
into mapped memory). Plain Python and NumPy: test_paths also runs this file's
source in subprocesses."""

import mmap

import numpy as np


def on_line(shape, dtype, offset):
    """An array of ``shape`` that starts ``offset`` bytes past a 64-byte boundary,
    written once (with 0xFF bytes, NaN) so that its memory is mapped, as a reused
    buffer's is: cpe streams large outputs into such memory."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buffer = np.full(size + 128, 0xFF, np.uint8)
    skip = (-buffer.ctypes.data) % 64 + offset
    return buffer[skip : skip + size].view(dtype).reshape(shape)


def fresh(shape, dtype):
    """An array of ``shape`` on new anonymous memory (page-aligned) that nothing
    has written yet, as a new large array's is: its pages are mapped by the first
    write, and cpe writes such memory with ordinary stores."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    # Private, as malloc's memory is (a shared mapping is never given huge pages).
    if hasattr(mmap, "MAP_ANONYMOUS"):
        memory = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:
        memory = mmap.mmap(-1, max(size, 1))
    return np.frombuffer(memory, np.uint8, size).view(dtype).reshape(shape)


def mapped_pair(shape, dtype):
    """Two arrays as on_line(shape, dtype, 0) gives: rope_cos_sin's out=, streamed."""
    return on_line(shape, dtype, 0), on_line(shape, dtype, 0)


def fresh_pair(shape, dtype):
    """Two arrays as fresh(shape, dtype) gives: rope_cos_sin's out=, not streamed."""
    return fresh(shape, dtype), fresh(shape, dtype)
