# cython: language_level=3
# cython: freethreading_compatible=True
from libc.stdlib cimport malloc, free

from cpe.kernels cimport (
    CPE_ANGLE_LIMIT,
    CPE_ERR_ARGUMENT,
    CPE_ERR_NOMEM,
    CPE_ERR_RANGE,
    CPE_LAYOUT_COS_SIN,
    CPE_LAYOUT_INTERLEAVED,
    CPE_LAYOUT_SIN_COS,
    CPE_OK,
    fill_rope_f32,
    fill_rope_f64,
    fill_positions_f32,
    fill_positions_f64,
    fill_table_f32,
    fill_table_f64,
    frequencies,
    rotate_rope_f32,
    rotate_rope_f64,
)

CONSTANTS = {
    "CPE_OK": CPE_OK,
    "CPE_ERR_ARGUMENT": CPE_ERR_ARGUMENT,
    "CPE_ERR_NOMEM": CPE_ERR_NOMEM,
    "CPE_ERR_RANGE": CPE_ERR_RANGE,
    "CPE_ANGLE_LIMIT": CPE_ANGLE_LIMIT,
    "CPE_LAYOUT_INTERLEAVED": CPE_LAYOUT_INTERLEAVED,
    "CPE_LAYOUT_SIN_COS": CPE_LAYOUT_SIN_COS,
    "CPE_LAYOUT_COS_SIN": CPE_LAYOUT_COS_SIN,
}


cdef double* _frequencies(Py_ssize_t width, double base, int* status) noexcept nogil:
    # w_hi in the first n_freq doubles, w_lo in the next: the paper's frequencies.
    cdef Py_ssize_t n_freq = (width + 1) // 2
    cdef double* w = <double*>malloc(sizeof(double) * 2 * n_freq)
    if w == NULL:
        status[0] = CPE_ERR_NOMEM
        return NULL
    status[0] = frequencies(w, w + n_freq, n_freq, base, width / 2.0, 1.0)
    return w


# The example of the README's section "Using cpe from Cython", verbatim.
def encoding_table(float[:, ::1] out, Py_ssize_t start=0, double base=10000.0):
    """Fill ``out[i]`` with the encoding of position ``start + i``; return ``out``."""
    cdef Py_ssize_t n_rows = out.shape[0], width = out.shape[1]
    cdef Py_ssize_t n_freq = (width + 1) // 2
    cdef double* w
    cdef int status = CPE_OK
    if n_rows == 0 or width == 0:
        return out.base
    w = <double*>malloc(2 * n_freq * sizeof(double))
    if w == NULL:
        raise MemoryError()
    with nogil:
        status = frequencies(w, w + n_freq, n_freq, base, width / 2.0, 1.0)
        if status == CPE_OK:
            status = fill_table_f32(&out[0, 0], <double>start, n_rows, width,
                                    w, w + n_freq, n_freq, CPE_LAYOUT_INTERLEAVED)
    free(w)
    if status != CPE_OK:
        raise ValueError(f"cpe rejected the arguments (status {status})")
    return out.base


def table_f64(double[:, ::1] out, double start, int layout, double base=10000.0):
    cdef Py_ssize_t n_rows = out.shape[0], width = out.shape[1]
    cdef Py_ssize_t n_freq = (width + 1) // 2
    cdef int status
    cdef double* w
    with nogil:
        w = _frequencies(width, base, &status)
        if status == CPE_OK:
            status = fill_table_f64(&out[0, 0], start, n_rows, width,
                                    w, w + n_freq, n_freq, layout)
        free(w)
    return status


def table_f32(float[:, ::1] out, double start, int layout, double base=10000.0):
    cdef Py_ssize_t n_rows = out.shape[0], width = out.shape[1]
    cdef Py_ssize_t n_freq = (width + 1) // 2
    cdef int status
    cdef double* w
    with nogil:
        w = _frequencies(width, base, &status)
        if status == CPE_OK:
            status = fill_table_f32(&out[0, 0], start, n_rows, width,
                                    w, w + n_freq, n_freq, layout)
        free(w)
    return status


def positions_f64(double[:, ::1] out, const double[::1] positions, int layout):
    cdef Py_ssize_t width = out.shape[1]
    cdef Py_ssize_t n_freq = (width + 1) // 2
    cdef int status
    cdef double* w
    with nogil:
        w = _frequencies(width, 10000.0, &status)
        if status == CPE_OK:
            status = fill_positions_f64(&out[0, 0], &positions[0], positions.shape[0],
                                        width, w, w + n_freq, n_freq, layout)
        free(w)
    return status


def positions_f32(float[:, ::1] out, const double[::1] positions, int layout):
    cdef Py_ssize_t width = out.shape[1]
    cdef Py_ssize_t n_freq = (width + 1) // 2
    cdef int status
    cdef double* w
    with nogil:
        w = _frequencies(width, 10000.0, &status)
        if status == CPE_OK:
            status = fill_positions_f32(&out[0, 0], &positions[0], positions.shape[0],
                                        width, w, w + n_freq, n_freq, layout)
        free(w)
    return status


def table_with_n_freq(double[:, ::1] out, Py_ssize_t n_freq):
    # Calls the kernel with a caller-chosen n_freq, to see it refuse bad ones.
    cdef double w[64]
    cdef int status
    with nogil:
        status = frequencies(w, w + 32, 32, 10000.0, 16.0, 1.0)
        if status == CPE_OK:
            status = fill_table_f64(&out[0, 0], 0.0, out.shape[0], out.shape[1],
                                    w, w + 32, n_freq, CPE_LAYOUT_INTERLEAVED)
    return status


def rope_tables(cos, sin, positions, double start, double base, bint interleaved):
    """fill_rope_f64/_f32 on the caller's (n, head_dim) arrays: the rows of
    ``positions`` (a float64 array), or of start + i when it is None."""
    cdef double[:, ::1] cos64, sin64
    cdef float[:, ::1] cos32, sin32
    cdef const double[::1] ids
    cdef const double* ids_data = NULL
    cdef Py_ssize_t n_rows = cos.shape[0], head_dim = cos.shape[1]
    cdef Py_ssize_t n_freq = head_dim // 2
    cdef int status = CPE_OK
    if positions is not None:
        ids = positions
        ids_data = &ids[0]
    cdef double* w = <double*>malloc(sizeof(double) * 2 * n_freq)
    if w == NULL:
        raise MemoryError()
    status = frequencies(w, w + n_freq, n_freq, base, head_dim / 2.0, 1.0)
    if status == CPE_OK and cos.dtype.itemsize == 8:
        cos64, sin64 = cos, sin
        with nogil:
            status = fill_rope_f64(&cos64[0, 0], &sin64[0, 0], ids_data, start, n_rows,
                                   head_dim, w, w + n_freq, interleaved)
    elif status == CPE_OK:
        cos32, sin32 = cos, sin
        with nogil:
            status = fill_rope_f32(&cos32[0, 0], &sin32[0, 0], ids_data, start, n_rows,
                                   head_dim, w, w + n_freq, interleaved)
    free(w)
    return status


def rotate(x, positions, double start, double base, bint interleaved, bint inverse,
           bint null_x=False):
    """rotate_rope_f64/_f32 in place on the caller's (seq, heads, head_dim) array
    (any strides of whole values, rows contiguous): positions along its first axis
    (a float64 array), or start + i when ``positions`` is None."""
    cdef double[:, :, :] x64
    cdef float[:, :, :] x32
    cdef const double[::1] ids
    cdef const double* ids_data = NULL
    cdef Py_ssize_t n = x.shape[0], n_heads = x.shape[1], head_dim = x.shape[2]
    cdef Py_ssize_t n_freq = max(head_dim // 2, 1), itemsize = x.dtype.itemsize
    cdef Py_ssize_t position_stride = x.strides[0] // itemsize
    cdef Py_ssize_t head_stride = x.strides[1] // itemsize
    cdef int status = CPE_OK
    if positions is not None:
        ids = positions
        ids_data = &ids[0] if ids.shape[0] else NULL
    cdef double* w = <double*>malloc(sizeof(double) * 2 * n_freq)
    if w == NULL:
        raise MemoryError()
    status = frequencies(w, w + n_freq, n_freq, base, head_dim / 2.0, 1.0)
    if status == CPE_OK and itemsize == 8:
        x64 = x
        with nogil:
            status = rotate_rope_f64(NULL if null_x else &x64[0, 0, 0], ids_data, start, n,
                                     position_stride, n_heads, head_stride, head_dim, w,
                                     w + n_freq, interleaved, inverse)
    elif status == CPE_OK:
        x32 = x
        with nogil:
            status = rotate_rope_f32(NULL if null_x else &x32[0, 0, 0], ids_data, start, n,
                                     position_stride, n_heads, head_stride, head_dim, w,
                                     w + n_freq, interleaved, inverse)
    free(w)
    return status


def frequencies_status(Py_ssize_t n_freq, double base, double exponent_den):
    cdef double w[8]
    cdef int status
    with nogil:
        status = frequencies(w, w + 4, n_freq, base, exponent_den, 1.0)
    return status


def statuses(bint null_out, bint null_second, double position, double scale,
             bint nan_frequency, bint nan_low=False, Py_ssize_t rows=3, Py_ssize_t width=8):
    """The status of every fill function for ``rows`` rows of ``width`` (4
    frequencies), at ``position`` (a table starting there, or positions equal to
    it), with the frequencies of base 10000 times ``scale`` (NaN in the middle
    with ``nan_frequency``, its low part NaN with ``nan_low``) and, if asked, a
    NULL first or second output. Rows and widths beyond 3 and 8 are for sizes
    the functions must refuse before they write or read a position."""
    cdef double w[8]
    cdef double out64[24]
    cdef double sin64[24]
    cdef float out32[24]
    cdef float sin32[24]
    cdef double positions[3]
    cdef int status = frequencies(w, w + 4, 4, 10000.0, 4.0, scale)
    if nan_frequency:
        w[3] = float("nan")
    if nan_low:
        w[4 + 2] = float("nan")
    positions[0] = positions[1] = positions[2] = position
    cdef double* o64 = NULL if null_out else out64
    cdef float* o32 = NULL if null_out else out32
    cdef double* s64 = NULL if null_second else sin64
    cdef float* s32 = NULL if null_second else sin32
    result = {"frequencies": status}
    with nogil:
        status = fill_table_f64(o64, position, rows, width, w, w + 4, 4, CPE_LAYOUT_INTERLEAVED)
    result["fill_table_f64"] = status
    with nogil:
        status = fill_table_f32(o32, position, rows, width, w, w + 4, 4, CPE_LAYOUT_INTERLEAVED)
    result["fill_table_f32"] = status
    with nogil:
        status = fill_positions_f64(o64, positions, rows, width, w, w + 4, 4,
                                    CPE_LAYOUT_INTERLEAVED)
    result["fill_positions_f64"] = status
    with nogil:
        status = fill_positions_f32(o32, positions, rows, width, w, w + 4, 4,
                                    CPE_LAYOUT_INTERLEAVED)
    result["fill_positions_f32"] = status
    with nogil:
        status = fill_rope_f64(o64, s64, NULL, position, rows, width, w, w + 4, False)
    result["fill_rope_f64"] = status
    with nogil:
        status = fill_rope_f32(o32, s32, positions, position, rows, width, w, w + 4, False)
    result["fill_rope_f32"] = status
    return result


def table_of_width(Py_ssize_t width):
    """fill_table_f64 of 2 rows at start 10**6 into a new buffer, with its own
    frequencies: made before the call, so that only the kernel's scratch memory
    is allocated during it."""
    cdef Py_ssize_t n_freq = (width + 1) // 2
    cdef double* w = <double*>malloc(sizeof(double) * 2 * n_freq)
    cdef double* out = <double*>malloc(sizeof(double) * 2 * width)
    cdef int status = CPE_ERR_NOMEM
    if w != NULL and out != NULL:
        for i in range(2 * width):
            out[i] = 0.0  # mapped before the call
        status = frequencies(w, w + n_freq, n_freq, 10000.0, width / 2.0, 1.0)
    return <size_t>w, <size_t>out, status


def table_status(size_t w_address, size_t out_address, Py_ssize_t width):
    cdef Py_ssize_t n_freq = (width + 1) // 2
    cdef double* w = <double*>w_address
    cdef int status
    with nogil:
        status = fill_table_f64(<double*>out_address, 1e6, 2, width, w, w + n_freq, n_freq,
                                CPE_LAYOUT_INTERLEAVED)
    free(w)
    free(<double*>out_address)
    return status
