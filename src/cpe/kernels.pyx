"""The C API of cpe (``kernels.pxd``): each function one request of the engine.

See ``kernels.pxd`` for the signatures and statuses, ``_engine.pyx`` for how the
rows are computed and README.md for the definition.
"""
from cpe cimport _engine
from cpe._engine cimport STORE_ROPE_HALF, STORE_ROPE_INTERLEAVED, fill_request


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
        row_stride=width, float32=float32, w_hi=w_hi, w_lo=w_lo, n_freq=n_freq, w_max=-1.0,
        levels=NULL, store=store, amplitude=1.0, columns=NULL, half_at=n_freq)
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
