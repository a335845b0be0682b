"""The C API of cpe (``kernels.pxd``): each function one request of the engine.

See ``kernels.pxd`` for the signatures and statuses, ``_engine.pyx`` for how the
rows are computed and README.md for the definition.
"""
from libc.stdlib cimport free, malloc
from cpython.pyport cimport PY_SSIZE_T_MAX

from cpe cimport _engine
from cpe._engine cimport (
    ROW_FLOAT32,
    ROW_FLOAT64,
    STORE_ROPE_HALF,
    STORE_ROPE_INTERLEAVED,
    apply_request,
    apply_scratch,
    fill_request,
    rotation,
)


cdef int frequencies(double* w_hi, double* w_lo, Py_ssize_t n_freq,
                     double base, double exponent_den, double scale) noexcept nogil:
    return _engine.frequencies(w_hi, w_lo, n_freq, base, exponent_den, scale)


cdef inline int _engine_fill(void* out, void* sin_out, const double* positions,
                             double start, Py_ssize_t n, Py_ssize_t width,
                             const double* w_hi, const double* w_lo, Py_ssize_t n_freq,
                             int store, bint float32) noexcept nogil:
    # The request of one call (the engine computes what it does not know: w_max,
    # the levels).
    cdef fill_request r = fill_request(
        out=out, sin_out=sin_out, positions=positions, start=start, n=n, width=width,
        float32=float32, w_hi=w_hi, w_lo=w_lo, n_freq=n_freq, w_max=-1.0, levels=NULL,
        axes=NULL, n_axes=0, store=store, amplitude=1.0, columns=NULL, half_at=n_freq)
    return _engine.fill(&r)


cdef inline bint _encoding_layout(int layout) noexcept nogil:
    return (layout == CPE_LAYOUT_INTERLEAVED or layout == CPE_LAYOUT_SIN_COS
            or layout == CPE_LAYOUT_COS_SIN)


cdef int fill_table_f64(double* out, double start, Py_ssize_t n_rows,
                        Py_ssize_t width, const double* w_hi, const double* w_lo,
                        Py_ssize_t n_freq, int layout) noexcept nogil:
    if not _encoding_layout(layout):
        return CPE_ERR_ARGUMENT
    return _engine_fill(out, NULL, NULL, start, n_rows, width, w_hi, w_lo, n_freq, layout,
                        False)


cdef int fill_table_f32(float* out, double start, Py_ssize_t n_rows,
                        Py_ssize_t width, const double* w_hi, const double* w_lo,
                        Py_ssize_t n_freq, int layout) noexcept nogil:
    if not _encoding_layout(layout):
        return CPE_ERR_ARGUMENT
    return _engine_fill(out, NULL, NULL, start, n_rows, width, w_hi, w_lo, n_freq, layout,
                        True)


cdef int fill_positions_f64(double* out, const double* positions, Py_ssize_t n_positions,
                            Py_ssize_t width, const double* w_hi, const double* w_lo,
                            Py_ssize_t n_freq, int layout) noexcept nogil:
    if not _encoding_layout(layout) or (n_positions and positions == NULL):
        return CPE_ERR_ARGUMENT
    return _engine_fill(out, NULL, positions, 0.0, n_positions, width, w_hi, w_lo, n_freq,
                        layout, False)


cdef int fill_positions_f32(float* out, const double* positions, Py_ssize_t n_positions,
                            Py_ssize_t width, const double* w_hi, const double* w_lo,
                            Py_ssize_t n_freq, int layout) noexcept nogil:
    if not _encoding_layout(layout) or (n_positions and positions == NULL):
        return CPE_ERR_ARGUMENT
    return _engine_fill(out, NULL, positions, 0.0, n_positions, width, w_hi, w_lo, n_freq,
                        layout, True)


cdef int fill_rope_f64(double* cos_out, double* sin_out, const double* positions,
                       double start, Py_ssize_t n_rows, Py_ssize_t head_dim,
                       const double* w_hi, const double* w_lo, bint interleaved) noexcept nogil:
    if head_dim < 2 or head_dim % 2:
        return CPE_ERR_ARGUMENT
    return _engine_fill(cos_out, sin_out, positions, start, n_rows, head_dim, w_hi, w_lo,
                        head_dim // 2,
                        STORE_ROPE_INTERLEAVED if interleaved else STORE_ROPE_HALF, False)


cdef int fill_rope_f32(float* cos_out, float* sin_out, const double* positions,
                       double start, Py_ssize_t n_rows, Py_ssize_t head_dim,
                       const double* w_hi, const double* w_lo, bint interleaved) noexcept nogil:
    if head_dim < 2 or head_dim % 2:
        return CPE_ERR_ARGUMENT
    return _engine_fill(cos_out, sin_out, positions, start, n_rows, head_dim, w_hi, w_lo,
                        head_dim // 2,
                        STORE_ROPE_INTERLEAVED if interleaved else STORE_ROPE_HALF, True)


cdef inline Py_ssize_t _magnitude(Py_ssize_t stride) noexcept nogil:
    if stride < -PY_SSIZE_T_MAX:  # (its negative is not a Py_ssize_t)
        return PY_SSIZE_T_MAX
    return -stride if stride < 0 else stride


cdef inline int _engine_rotate(char* x, const double* positions, double start, Py_ssize_t n,
                               Py_ssize_t position_stride, Py_ssize_t n_heads,
                               Py_ssize_t head_stride, Py_ssize_t head_dim,
                               const double* w_hi, const double* w_lo, bint interleaved,
                               bint inverse, bint float32) noexcept nogil:
    # The apply request of one call: one axis, one array, its rows' offsets.
    cdef Py_ssize_t itemsize = 4 if float32 else 8, i
    if head_dim < 2 or head_dim % 2 or n < 0 or n_heads < 0:
        return CPE_ERR_ARGUMENT
    if ((n and _magnitude(position_stride) > PY_SSIZE_T_MAX // itemsize // n)
            or (n_heads and _magnitude(head_stride) > PY_SSIZE_T_MAX // itemsize // n_heads)
            or n > PY_SSIZE_T_MAX // 8 - n_heads):
        return CPE_ERR_ARGUMENT  # (offsets no memory could hold)
    cdef Py_ssize_t* offsets = <Py_ssize_t*>malloc(sizeof(Py_ssize_t) * (n + n_heads + 1))
    if offsets == NULL:
        return CPE_ERR_NOMEM
    for i in range(n):
        offsets[i] = i * position_stride * itemsize
    for i in range(n_heads):
        offsets[n + i] = i * head_stride * itemsize
    cdef rotation target = rotation(
        x=x, y=x, x_rows=offsets, y_rows=offsets, x_heads=offsets + n, y_heads=offsets + n,
        n_heads=n_heads, width=head_dim, dtype=ROW_FLOAT32 if float32 else ROW_FLOAT64,
        heads_inner=_magnitude(head_stride) < _magnitude(position_stride))
    cdef fill_request angles = fill_request(
        out=NULL, sin_out=NULL, positions=positions, start=start, n=n, width=head_dim,
        float32=False, w_hi=w_hi, w_lo=w_lo, n_freq=head_dim // 2, w_max=-1.0, levels=NULL,
        axes=NULL, n_axes=0, store=STORE_ROPE_HALF, amplitude=1.0, columns=NULL, half_at=0)
    cdef apply_request a = apply_request(
        angles=&angles, n=n, add=False, x_scale=1.0, interleaved=interleaved,
        inverse=inverse, targets=&target, n_targets=1)
    cdef apply_scratch s
    cdef int status = _engine.apply_check(&a)
    if status == CPE_OK:
        status = _engine.apply_scratch_new(&a, n, &s)
        if status == CPE_OK:
            _engine.apply_part(&a, &s, 0, n)
        _engine.apply_scratch_free(&s)
    free(offsets)
    return status


cdef int rotate_rope_f64(double* x, const double* positions, double start,
                         Py_ssize_t n_positions, Py_ssize_t position_stride,
                         Py_ssize_t n_heads, Py_ssize_t head_stride, Py_ssize_t head_dim,
                         const double* w_hi, const double* w_lo, bint interleaved,
                         bint inverse) noexcept nogil:
    return _engine_rotate(<char*>x, positions, start, n_positions, position_stride, n_heads,
                          head_stride, head_dim, w_hi, w_lo, interleaved, inverse, False)


cdef int rotate_rope_f32(float* x, const double* positions, double start,
                         Py_ssize_t n_positions, Py_ssize_t position_stride,
                         Py_ssize_t n_heads, Py_ssize_t head_stride, Py_ssize_t head_dim,
                         const double* w_hi, const double* w_lo, bint interleaved,
                         bint inverse) noexcept nogil:
    return _engine_rotate(<char*>x, positions, start, n_positions, position_stride, n_heads,
                          head_stride, head_dim, w_hi, w_lo, interleaved, inverse, True)
