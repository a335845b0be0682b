"""Kernels of cpe: accurate sinusoid rows written straight into caller buffers.

See ``kernels.pxd`` for the API and README.md for the definition. Two ideas carry
the accuracy:

* the frequencies ``w_j`` are double-doubles (about 106 bits), so the angle
  ``p * w_j`` is formed exactly as ``th + tl``, and a row of sines and cosines
  of such angles is computed by the vectorized loop of ``cpe_rows.h`` (libm's
  ``sin``/``cos`` with ``sin(th + tl) = sin(th) + tl * cos(th)`` beyond its range);
* tables and arrays of integer positions use the angle-addition identity: a
  position's row is the complex product of a few "digit" rows
  ``(sin, cos)(d R**k w)``, each computed as above, so only a handful of rows
  need that loop and every value stays within a few ulp (see "digit tables" below).
"""
from libc.math cimport sin, cos, exp, log, fma, fabs, frexp, ldexp, floor, ceil, cbrt, isfinite
from libc.stdlib cimport malloc, free, getenv
from libc.string cimport memcpy
from libc.stdint cimport uintptr_t
from cpython.pyport cimport PY_SSIZE_T_MAX
from cython cimport floating

cdef extern from "cpe_memory.h":
    int cpe_mostly_mapped(const void* p, size_t n) noexcept nogil

cdef extern from "cpe_rows.h":
    bint CPE_HAVE_STREAM
    void cpe_stream_product_f64(double* row, const double* a, const double* b,
                                Py_ssize_t n_freq, Py_ssize_t n_pairs) noexcept nogil
    void cpe_stream_product_f32(float* row, const double* a, const double* b,
                                Py_ssize_t n_freq, Py_ssize_t n_pairs) noexcept nogil
    void cpe_stream_fence() noexcept nogil
    void cpe_stream_bytes(char* dst, const char* src, size_t n) noexcept nogil
    int cpe_rows_level
    void cpe_rows_init(int max_level) noexcept nogil
    int cpe_fast_element(double p, double w) noexcept nogil
    int cpe_sincos_row_fast(double* row, double p, const double* w_hi, const double* w_lo,
                            Py_ssize_t n) noexcept nogil
    void cpe_product_pairs(double* out, const double* a, const double* b,
                           Py_ssize_t n) noexcept nogil
    void cpe_store_interleaved_double(double* row, const double* a, const double* b,
                                      Py_ssize_t n_pairs, Py_ssize_t n_freq) noexcept nogil
    void cpe_store_interleaved_float(float* row, const double* a, const double* b,
                                     Py_ssize_t n_pairs, Py_ssize_t n_freq) noexcept nogil
    void cpe_store_blocked_double(double* sines, double* cosines, const double* a,
                                  const double* b, Py_ssize_t n_pairs,
                                  Py_ssize_t n_freq) noexcept nogil
    void cpe_store_blocked_float(float* sines, float* cosines, const double* a,
                                 const double* b, Py_ssize_t n_pairs,
                                 Py_ssize_t n_freq) noexcept nogil
    void cpe_rope_half_double(double* cos_row, double* sin_row, const double* a,
                              const double* b, Py_ssize_t n) noexcept nogil
    void cpe_rope_half_float(float* cos_row, float* sin_row, const double* a,
                             const double* b, Py_ssize_t n) noexcept nogil
    void cpe_rope_interleaved_double(double* cos_row, double* sin_row, const double* a,
                                     const double* b, Py_ssize_t n) noexcept nogil
    void cpe_rope_interleaved_float(float* cos_row, float* sin_row, const double* a,
                                    const double* b, Py_ssize_t n) noexcept nogil
    double cpe_chain_sine(const double* const* rows, int count, Py_ssize_t j,
                          Py_ssize_t n) noexcept nogil
    void cpe_chain_interleaved_double(double* row, const double* const* rows, int count,
                                      Py_ssize_t n_pairs, Py_ssize_t n_freq) noexcept nogil
    void cpe_chain_interleaved_float(float* row, const double* const* rows, int count,
                                     Py_ssize_t n_pairs, Py_ssize_t n_freq) noexcept nogil
    void cpe_chain_blocked_double(double* sines, double* cosines, const double* const* rows,
                                  int count, Py_ssize_t n_pairs,
                                  Py_ssize_t n_freq) noexcept nogil
    void cpe_chain_blocked_float(float* sines, float* cosines, const double* const* rows,
                                 int count, Py_ssize_t n_pairs, Py_ssize_t n_freq) noexcept nogil
    void cpe_copy_interleaved_double(double* row, const double* a, Py_ssize_t n_pairs,
                                     Py_ssize_t n_freq) noexcept nogil
    void cpe_copy_interleaved_float(float* row, const double* a, Py_ssize_t n_pairs,
                                    Py_ssize_t n_freq) noexcept nogil
    void cpe_copy_blocked_double(double* sines, double* cosines, const double* a,
                                 Py_ssize_t n_pairs, Py_ssize_t n_freq) noexcept nogil
    void cpe_copy_blocked_float(float* sines, float* cosines, const double* a,
                                Py_ssize_t n_pairs, Py_ssize_t n_freq) noexcept nogil

# The row loop uses the widest SIMD copy the CPU runs (they all give the same
# bits); CPE_DISABLE_SIMD=1 selects the portable copy, CPE_DISABLE_AVX512=1 stops
# at AVX2.
cpe_rows_init(0 if getenv("CPE_DISABLE_SIMD") != NULL
              else 1 if getenv("CPE_DISABLE_AVX512") != NULL else 2)


def _row_loop():
    """Which copy of the sine/cosine row loop this process uses:
    "avx512", "avx2" or "portable"."""
    return ("portable", "avx2", "avx512")[cpe_rows_level]


# Outputs of at least this many bytes bypass the caches (they would not stay
# there anyway). CPE_DISABLE_STREAM=1 in the environment turns this off.
cdef Py_ssize_t STREAM_BYTES = 16 * 1024 * 1024
cdef bint STREAM_ENABLED = CPE_HAVE_STREAM and getenv("CPE_DISABLE_STREAM") == NULL


def _tile_rows(unsigned char[:, ::1] out, const unsigned char[:, ::1] first,
               const unsigned char[:, ::1] second, segments):
    """Row ``i * len(second) + j`` of ``out`` from row ``i`` of ``first`` and row
    ``j`` of ``second``: the grids' tokens from the encodings of their axes.

    The arrays are bytes (any dtype, viewed as uint8). ``segments`` lists
    ``(source, src_start, dst_start, length)`` in bytes, ``source`` 0 for
    ``first`` and 1 for ``second``. NumPy's broadcast assignment does the same
    through glibc's memcpy, which was 2-3x slower than ``out.fill`` here for 32 MiB
    grids (AMD Zen 4): outputs of STREAM_BYTES and more are streamed, as tables are.
    """
    cdef Py_ssize_t rows = first.shape[0], columns = second.shape[0], width = out.shape[1]
    cdef Py_ssize_t spec[8][4]
    segments = tuple(segments)  # what is checked is what is copied
    cdef Py_ssize_t count = len(segments), k, i, j, s
    if (columns and rows > PY_SSIZE_T_MAX // columns) or out.shape[0] != rows * columns:
        raise ValueError(f"out has {out.shape[0]} rows, expected {rows} * {columns}")
    if count > 8:
        raise ValueError(f"at most 8 segments, got {count}")
    cdef bint aligned = width % 16 == 0 and (<uintptr_t>&out[0, 0] if out.shape[0] and width
                                             else 0) % 16 == 0
    for k, segment in enumerate(segments):
        spec[k][0], spec[k][1], spec[k][2], spec[k][3] = segment
        s = (first if spec[k][0] == 0 else second).shape[1]
        if (spec[k][0] not in (0, 1) or min(spec[k][1], spec[k][2], spec[k][3]) < 0
                or spec[k][1] > s - spec[k][3] or spec[k][2] > width - spec[k][3]):
            raise ValueError(f"segment {segment} is outside the rows")
        aligned = aligned and spec[k][2] % 16 == 0 and spec[k][3] % 16 == 0
    if not rows or not columns or not width:
        return
    cdef bint stream = aligned and _streaming(&out[0, 0], out.shape[0], width, 1)
    cdef char* row
    cdef const char* source
    with nogil:
        for i in range(rows):
            for j in range(columns):
                row = <char*>&out[i * columns + j, 0]
                for k in range(count):
                    if spec[k][3] == 0:
                        continue
                    source = <const char*>(&first[i, 0] if spec[k][0] == 0 else &second[j, 0])
                    if stream:
                        cpe_stream_bytes(row + spec[k][2], source + spec[k][1], spec[k][3])
                    else:
                        memcpy(row + spec[k][2], source + spec[k][1], spec[k][3])
        if stream:
            cpe_stream_fence()


# ln 2 as a double-double.
cdef double LN2_HI = 6.931471805599452862e-01
cdef double LN2_LO = 2.319046813846299558e-17


# ---- double-double arithmetic (Dekker / Knuth error-free transformations) ----

cdef struct dd:
    double hi
    double lo


cdef inline dd _two_sum(double a, double b) noexcept nogil:
    cdef double s = a + b
    cdef double bb = s - a
    return dd(hi=s, lo=(a - (s - bb)) + (b - bb))


cdef inline dd _quick_two_sum(double a, double b) noexcept nogil:
    cdef double s = a + b
    return dd(hi=s, lo=b - (s - a))


cdef inline dd _two_prod(double a, double b) noexcept nogil:
    # Dekker's product: inline arithmetic, where fma() is a library call on
    # baseline x86-64. For factors within 2**+-500 nothing overflows and the
    # error term is exact to ~2**-76 of itself (its smallest part may lose bits
    # to underflow), far below what the double-double needs; fma() beyond.
    cdef double p = a * b
    cdef double t, a_hi, a_lo, b_hi, b_lo
    if not (3.06e-151 < fabs(a) < 3.27e150 and 3.06e-151 < fabs(b) < 3.27e150):
        return dd(hi=p, lo=fma(a, b, -p))
    t = 134217729.0 * a
    a_hi = t - (t - a)
    a_lo = a - a_hi
    t = 134217729.0 * b
    b_hi = t - (t - b)
    b_lo = b - b_hi
    return dd(hi=p, lo=((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo)


cdef inline dd _dd_add(dd a, dd b) noexcept nogil:
    cdef dd s = _two_sum(a.hi, b.hi)
    cdef dd t = _two_sum(a.lo, b.lo)
    s = _quick_two_sum(s.hi, s.lo + t.hi)
    return _quick_two_sum(s.hi, s.lo + t.lo)


cdef inline dd _dd_mul(dd a, dd b) noexcept nogil:
    cdef dd p = _two_prod(a.hi, b.hi)
    return _quick_two_sum(p.hi, p.lo + (a.hi * b.lo + a.lo * b.hi))


cdef inline dd _dd_mul_d(dd a, double b) noexcept nogil:
    cdef dd p = _two_prod(a.hi, b)
    return _quick_two_sum(p.hi, p.lo + a.lo * b)


cdef inline dd _dd_div_d(dd a, double b) noexcept nogil:
    cdef double q1 = a.hi / b
    cdef dd p = _two_prod(q1, b)
    cdef dd r = _two_sum(a.hi, -p.hi)
    cdef double q2 = (r.hi + ((r.lo - p.lo) + a.lo)) / b
    return _quick_two_sum(q1, q2)


cdef dd _dd_exp(dd a) noexcept nogil:
    # exp(a) = 2**k * exp(r)**1024 with |r| <= ln2 / 2048; the Taylor series of
    # expm1(r) converges to 2**-110 in 11 terms, and expm1 doubles by
    # e(2x) = 2 e(x) + e(x)**2 without losing relative accuracy.
    if not fabs(a.hi) <= 708.0:  # beyond (or NaN): no reduction needed, none possible
        return dd(hi=exp(a.hi), lo=0.0)
    cdef double k = floor(a.hi / LN2_HI + 0.5)
    cdef dd r = _dd_add(a, _dd_mul_d(dd(hi=-LN2_HI, lo=-LN2_LO), k))
    r = dd(hi=ldexp(r.hi, -10), lo=ldexp(r.lo, -10))
    cdef dd term = r
    cdef dd s = r
    cdef int i, _
    for i in range(2, 13):
        term = _dd_div_d(_dd_mul(term, r), <double>i)
        s = _dd_add(s, term)
    for _ in range(10):
        s = _dd_add(_dd_mul_d(s, 2.0), _dd_mul(s, s))
    s = _dd_add(s, dd(hi=1.0, lo=0.0))
    return dd(hi=ldexp(s.hi, <int>k), lo=ldexp(s.lo, <int>k))


cdef dd _dd_log(double a) noexcept nogil:
    # a = m * 2**e with 0.5 <= m < 1, so that exp(-log m) stays in range even for
    # subnormal a; then one Newton step y + m * exp(-y) - 1 squares the error of
    # libm's log m, and log a = log m + e ln 2.
    cdef int e
    cdef double m = frexp(a, &e)
    cdef double y = log(m)
    cdef dd t = _dd_mul_d(_dd_exp(dd(hi=-y, lo=0.0)), m)
    t = _dd_add(t, dd(hi=-1.0, lo=0.0))
    t = _dd_add(dd(hi=y, lo=0.0), t)
    return _dd_add(t, _dd_mul_d(dd(hi=LN2_HI, lo=LN2_LO), <double>e))


cdef int frequencies(double* w_hi, double* w_lo, Py_ssize_t n_freq,
                     double base, double exponent_den, double scale) noexcept nogil:
    if n_freq < 0 or not (base > 0.0 and isfinite(base)):
        return CPE_ERR_ARGUMENT
    if not (exponent_den > 0.0 and isfinite(exponent_den)) or not isfinite(scale):
        return CPE_ERR_ARGUMENT
    if n_freq and (w_hi == NULL or w_lo == NULL):
        return CPE_ERR_ARGUMENT
    cdef dd step = _dd_div_d(_dd_log(base), exponent_den)
    cdef dd ratio = _dd_exp(dd(hi=-step.hi, lo=-step.lo))
    # w_{8q + r} = (scale ratio**(8q)) ratio**r: eight independent products per
    # step of the recurrence (the steps themselves are a dependent chain). Each
    # double-double product loses ~2**-105: 2**-96 after 512 steps, far below
    # what a double can show.
    cdef dd powers[8]
    cdef dd w = dd(hi=scale, lo=0.0)
    cdef dd step8, product
    cdef Py_ssize_t j, r
    powers[0] = dd(hi=1.0, lo=0.0)
    for r in range(1, 8):
        powers[r] = _dd_mul(powers[r - 1], ratio)
    step8 = _dd_mul(powers[7], ratio)
    j = 0
    while j < n_freq:
        w_hi[j] = w.hi
        w_lo[j] = w.lo
        for r in range(1, min(8, n_freq - j)):
            product = _dd_mul(w, powers[r])
            w_hi[j + r] = product.hi
            w_lo[j + r] = product.lo
        w = _dd_mul(w, step8)
        j += 8
    for j in range(n_freq):
        if not (isfinite(w_hi[j]) and isfinite(w_lo[j])):
            return CPE_ERR_RANGE
    return CPE_OK


# ---- layouts ----

cdef struct columns:
    Py_ssize_t n_sin
    Py_ssize_t n_cos
    Py_ssize_t sin_at
    Py_ssize_t sin_step
    Py_ssize_t cos_at
    Py_ssize_t cos_step
    Py_ssize_t zero_from


cdef inline int _columns(Py_ssize_t width, Py_ssize_t n_freq, int layout,
                         columns* c) noexcept nogil:
    if width < 0 or n_freq < 0 or 2 * n_freq > width + 1:
        return CPE_ERR_ARGUMENT
    c.n_sin = n_freq
    c.n_cos = min(n_freq, width - n_freq)
    c.zero_from = c.n_sin + c.n_cos
    if layout == CPE_LAYOUT_INTERLEAVED:
        c.sin_at, c.sin_step, c.cos_at, c.cos_step = 0, 2, 1, 2
    elif layout == CPE_LAYOUT_SIN_COS:
        c.sin_at, c.sin_step, c.cos_at, c.cos_step = 0, 1, c.n_sin, 1
    elif layout == CPE_LAYOUT_COS_SIN:
        c.sin_at, c.sin_step, c.cos_at, c.cos_step = c.n_cos, 1, 0, 1
    else:
        return CPE_ERR_ARGUMENT
    return CPE_OK


# ---- rows ----
# Pair tables are stored a row at a time as two runs: n_freq sines, then n_freq
# cosines, so that the product loops read contiguous memory and vectorize.

cdef inline void _sincos(double p, double w_hi, double w_lo,
                         double* s, double* c) noexcept nogil:
    # p * w as th + tl exactly (to ~2**-100 relative), then a first-order
    # correction: the neglected tl**2 / 2 is below 2**-57 while |tl| <= 2**-28,
    # which holds for every |th| < 2**24. Beyond, add the two angles in full.
    cdef double th = p * w_hi
    cdef double tl = fma(p, w_hi, -th) + p * w_lo
    cdef double sn = sin(th)
    cdef double cs = cos(th)
    cdef double sl, cl
    if fabs(tl) <= 3.725290298461914e-09:
        s[0] = sn + tl * cs
        c[0] = cs - tl * sn
    else:
        sl = sin(tl)
        cl = cos(tl)
        s[0] = sn * cl + cs * sl
        c[0] = cs * cl - sn * sl


cdef inline void _sincos_row(double* pair_row, double p, const double* w_hi,
                             const double* w_lo, Py_ssize_t n_freq) noexcept nogil:
    # The vectorized loop of cpe_rows.h; libm only for angles beyond its range.
    cdef Py_ssize_t j
    if cpe_sincos_row_fast(pair_row, p, w_hi, w_lo, n_freq):
        for j in range(n_freq):
            if not cpe_fast_element(p, w_hi[j]):
                _sincos(p, w_hi[j], w_lo[j], &pair_row[j], &pair_row[n_freq + j])


cdef inline void _product_pairs(double* pair_row, const double* a, const double* b,
                                Py_ssize_t n_freq) noexcept nogil:
    # (sin, cos)(x + y) from the pair rows of x (a) and y (b).
    cpe_product_pairs(pair_row, a, b, n_freq)


cdef inline void _store_product(floating* row, const double* a, const double* b,
                                const columns* c, Py_ssize_t width, bint stream) noexcept nogil:
    # Row of the encoding of x + y from the pair rows of x (a) and y (b); the
    # loops (cpe_rows.h) are specialized by layout so that their strides are
    # constants.
    cdef Py_ssize_t j, n_freq = c.n_sin
    cdef const double* a_c = a + n_freq
    cdef const double* b_c = b + n_freq
    cdef floating* sines = row + c.sin_at
    cdef floating* cosines = row + c.cos_at
    if c.sin_step == 2 and stream and (<uintptr_t>row) % (2 * sizeof(floating)) == 0:
        if floating is double:
            cpe_stream_product_f64(row, a, b, n_freq, c.n_cos)
        else:
            cpe_stream_product_f32(row, a, b, n_freq, c.n_cos)
    elif c.sin_step == 2:
        if floating is double:
            cpe_store_interleaved_double(row, a, b, c.n_cos, n_freq)
        else:
            cpe_store_interleaved_float(row, a, b, c.n_cos, n_freq)
    else:
        if floating is double:
            cpe_store_blocked_double(sines, cosines, a, b, c.n_cos, n_freq)
        else:
            cpe_store_blocked_float(sines, cosines, a, b, c.n_cos, n_freq)
    for j in range(c.n_cos, c.n_sin):
        sines[j * c.sin_step] = <floating>(b[j] * a_c[j] + b_c[j] * a[j])
    for j in range(c.zero_from, width):
        row[j] = 0


cdef inline void _store_rope_product(floating* cos_row, floating* sin_row, const double* a,
                                     const double* b, Py_ssize_t n_freq,
                                     int layout) noexcept nogil:
    # RoPE's rows of x + y from the pair rows of x (a) and y (b): the values of
    # _store_product, then _rope_split, written once.
    if layout == CPE_LAYOUT_SIN_COS:
        if floating is double:
            cpe_rope_half_double(cos_row, sin_row, a, b, n_freq)
        else:
            cpe_rope_half_float(cos_row, sin_row, a, b, n_freq)
    else:
        if floating is double:
            cpe_rope_interleaved_double(cos_row, sin_row, a, b, n_freq)
        else:
            cpe_rope_interleaved_float(cos_row, sin_row, a, b, n_freq)


# RoPE tables of 16 MiB and more (both together) are built a chunk of rows at a
# time in a buffer, from which they are streamed: both chunks stay in L1.
cdef Py_ssize_t _ROPE_CHUNK_BYTES = 8 * 1024


cdef struct rope_rows:
    # Where row i of RoPE's tables is built: in place (owned == NULL), or in the
    # next slot of the cos and sin chunks, streamed once full (rows must then be
    # built in order, 0, 1, 2, ...).
    char* owned             # malloc'd, freed by _rope_rows_free
    char* cos_chunk         # on a cache line
    char* sin_chunk
    Py_ssize_t chunk        # rows a chunk
    Py_ssize_t slot         # rows in the chunks
    Py_ssize_t row_bytes


cdef inline int _rope_rows_init(rope_rows* r, const void* cos_out, const void* sin_out,
                                Py_ssize_t n_rows, Py_ssize_t width,
                                size_t itemsize) noexcept nogil:
    """Streamed when there is a sin table, both tables together are large enough
    to stream and every row starts 16-byte aligned; else in place."""
    r.owned = r.cos_chunk = r.sin_chunk = NULL
    r.chunk = 1
    r.slot = 0
    r.row_bytes = width * <Py_ssize_t>itemsize
    if not (sin_out != NULL and _streaming(cos_out, n_rows, width, itemsize, sin_out)
            and r.row_bytes % 16 == 0
            and (<uintptr_t>cos_out) % 16 == 0 and (<uintptr_t>sin_out) % 16 == 0):
        return CPE_OK
    r.chunk = max(1, _ROPE_CHUNK_BYTES // r.row_bytes)
    r.owned = <char*>malloc(2 * r.chunk * r.row_bytes + 64)
    if r.owned == NULL:
        return CPE_ERR_NOMEM
    r.cos_chunk = <char*>_line_start(<double*>r.owned)
    r.sin_chunk = r.cos_chunk + r.chunk * r.row_bytes
    return CPE_OK


cdef inline floating* _rope_row(const rope_rows* r, floating* table, Py_ssize_t i,
                                Py_ssize_t width, bint sines) noexcept nogil:
    """Where row i of ``table`` (the cos table, or the sin table if ``sines``) is built."""
    if r.owned == NULL:
        return table + i * width
    return <floating*>((r.sin_chunk if sines else r.cos_chunk) + r.slot * r.row_bytes)


cdef inline void _rope_row_done(rope_rows* r, floating* cos_out, floating* sin_out,
                                Py_ssize_t i, Py_ssize_t last, Py_ssize_t width) noexcept nogil:
    """Row i of both tables is built: stream the chunks when full, or at row ``last``."""
    if r.owned == NULL:
        return
    r.slot += 1
    if r.slot == r.chunk or i == last:
        i -= r.slot - 1  # the first row in the chunks
        cpe_stream_bytes(<char*>(cos_out + i * width), r.cos_chunk, r.slot * r.row_bytes)
        cpe_stream_bytes(<char*>(sin_out + i * width), r.sin_chunk, r.slot * r.row_bytes)
        r.slot = 0


cdef inline void _rope_rows_free(rope_rows* r) noexcept nogil:
    """Fence the streamed stores (before anything else is written), then free."""
    if r.owned != NULL:
        cpe_stream_fence()
    free(r.owned)
    r.owned = NULL


cdef inline void _store_chain(floating* row, const double** chain, int count,
                              const columns* c, Py_ssize_t width) noexcept nogil:
    # Row of the encoding of the sum of the angles of 2 to 4 pair rows (see
    # cpe_rows.h): the bits of repeated _product_pairs, then _store_product.
    cdef Py_ssize_t j, n_freq = c.n_sin
    cdef floating* sines = row + c.sin_at
    if c.sin_step == 2:
        if floating is double:
            cpe_chain_interleaved_double(row, chain, count, c.n_cos, n_freq)
        else:
            cpe_chain_interleaved_float(row, chain, count, c.n_cos, n_freq)
    else:
        if floating is double:
            cpe_chain_blocked_double(sines, row + c.cos_at, chain, count, c.n_cos, n_freq)
        else:
            cpe_chain_blocked_float(sines, row + c.cos_at, chain, count, c.n_cos, n_freq)
    for j in range(c.n_cos, c.n_sin):
        sines[j * c.sin_step] = <floating>cpe_chain_sine(chain, count, j, n_freq)
    for j in range(c.zero_from, width):
        row[j] = 0


cdef inline void _store_pairs(floating* row, const double* a, const columns* c,
                              Py_ssize_t width) noexcept nogil:
    cdef Py_ssize_t j, n_freq = c.n_sin
    cdef floating* sines = row + c.sin_at
    if c.sin_step == 2:
        if floating is double:
            cpe_copy_interleaved_double(row, a, c.n_cos, n_freq)
        else:
            cpe_copy_interleaved_float(row, a, c.n_cos, n_freq)
    elif c.n_cos:
        if floating is double:
            cpe_copy_blocked_double(sines, row + c.cos_at, a, c.n_cos, n_freq)
        else:
            cpe_copy_blocked_float(sines, row + c.cos_at, a, c.n_cos, n_freq)
    for j in range(c.n_cos, c.n_sin):
        sines[j * c.sin_step] = <floating>a[j]
    for j in range(c.zero_from, width):
        row[j] = 0


# ---- digit tables ----
# A position start + d with 0 <= d < span is written in base R as
# d = d2 * R**2 + d1 * R + d0, and its pair row is the product of three rows:
#     (sin, cos)((start + d2 R**2) w)  (sin, cos)(d1 R w)  (sin, cos)(d0 w),
# each computed by _sincos. The "low" (d0 w) and "middle" (d1 R w) rows do not
# depend on the positions, so a caller may keep them: they are the first two
# "levels" made by digit_levels (level k, row d: (sin, cos)(d R**k w)). Only the
# ceil(span / R**2) "high" rows then need the row loop on every request; and a
# position |p| < R**n_levels needs none at all: it is the product of one row
# per non-zero digit.

cdef struct digits:
    Py_ssize_t radix
    Py_ssize_t n_high
    const double* low       # R pair rows: d0 w
    const double* middle    # R pair rows: d1 R w
    double* high            # n_high pair rows: (start + d2 R**2) w
    double* scratch         # 1 pair row
    double* owned           # what this struct allocated, freed by _digits_free


cdef inline double* _line_start(double* p) noexcept nogil:
    # The first cache-line (64-byte) boundary at or after p, for buffers allocated
    # with 8 doubles to spare. Rows that start on a line load without splitting
    # lines: the products were ~25% slower from the 16-byte alignment of malloc.
    return <double*>((<uintptr_t>p + 63) & ~(<uintptr_t>63))


cdef inline Py_ssize_t _radix_for(Py_ssize_t span) noexcept nogil:
    cdef Py_ssize_t radix = <Py_ssize_t>ceil(cbrt(<double>span))
    return radix if radix >= 2 else 2


cdef inline Py_ssize_t _levels_limit(Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil:
    """radix ** n_levels, or 0 when that exceeds 2**40 (or the arguments are invalid)."""
    cdef Py_ssize_t limit = 1, _
    if radix < 2 or n_levels < 1:
        return 0
    for _ in range(n_levels):
        if limit > (<Py_ssize_t>1 << 40) // radix:
            return 0
        limit *= radix
    return limit


cdef inline bint _angles_in_range(double largest_position, const double* w_hi,
                                  Py_ssize_t n_freq) noexcept nogil:
    """Whether every |p * w_j| is at most CPE_ANGLE_LIMIT for |p| <= largest_position.
    The frequencies are monotone in j (as frequencies() makes them): the ends are
    the extremes. A NaN anywhere is out of range."""
    if n_freq == 0:
        return True
    return (largest_position * fabs(w_hi[0]) <= CPE_ANGLE_LIMIT
            and largest_position * fabs(w_hi[n_freq - 1]) <= CPE_ANGLE_LIMIT)


cdef int sincos_row(double* pair_row, double position, const double* w_hi,
                    const double* w_lo, Py_ssize_t n_freq) noexcept nogil:
    if n_freq < 0 or not isfinite(position):
        return CPE_ERR_ARGUMENT
    if n_freq and (pair_row == NULL or w_hi == NULL or w_lo == NULL):
        return CPE_ERR_ARGUMENT
    _sincos_row(pair_row, position, w_hi, w_lo, n_freq)
    return CPE_OK


cdef int digit_levels(double* levels, Py_ssize_t radix, Py_ssize_t n_levels,
                      const double* w_hi, const double* w_lo, Py_ssize_t n_freq) noexcept nogil:
    if _levels_limit(radix, n_levels) == 0 or n_freq < 0 or (
            n_freq and (levels == NULL or w_hi == NULL or w_lo == NULL)):
        return CPE_ERR_ARGUMENT
    cdef Py_ssize_t d, k, step = 1
    for k in range(n_levels):
        for d in range(radix):
            _sincos_row(levels + 2 * n_freq * (k * radix + d), <double>(d * step),
                        w_hi, w_lo, n_freq)
        step *= radix
    return CPE_OK


cdef int _digits_init(digits* t, double start, Py_ssize_t span, const double* w_hi,
                      const double* w_lo, Py_ssize_t n_freq, const double* low,
                      const double* middle, Py_ssize_t radix, Py_ssize_t offset) noexcept nogil:
    """Point t at the caller's low/middle rows (or make them) and make the high rows.

    ``offset`` >= 0 asks for the scratch and low rows to start ``offset`` bytes past
    a cache line, the caller's low rows being copied there (see _stream_offset).
    """
    if low == NULL:
        radix = _radix_for(span)
    cdef bint copy_low = (low != NULL and offset >= 0
                          and <Py_ssize_t>((<uintptr_t>low) % 64) != offset)
    cdef Py_ssize_t n_low = min(radix, span)
    cdef Py_ssize_t n_high = (span + radix * radix - 1) // (radix * radix)
    cdef Py_ssize_t rows = (n_high + 1 + (2 * radix if low == NULL else 0)
                            + (n_low if copy_low else 0))
    if n_freq > (<Py_ssize_t>1 << 40) // rows:
        return CPE_ERR_NOMEM
    t.owned = <double*>malloc(sizeof(double) * (2 * n_freq * rows + 16))
    if t.owned == NULL:
        return CPE_ERR_NOMEM
    t.radix = radix
    t.n_high = n_high
    t.high = _line_start(t.owned) + (offset // 8 if offset > 0 else 0)
    t.scratch = t.high + 2 * n_freq * n_high
    if low == NULL:
        t.low = t.scratch + 2 * n_freq
        t.middle = t.low + 2 * n_freq * radix
        digit_levels(<double*>t.low, radix, 2, w_hi, w_lo, n_freq)
    elif copy_low:
        t.low = t.scratch + 2 * n_freq
        memcpy(<double*>t.low, low, sizeof(double) * 2 * n_freq * n_low)
        t.middle = middle
    else:
        t.low = low
        t.middle = middle
    cdef Py_ssize_t d
    for d in range(n_high):
        _sincos_row(t.high + 2 * n_freq * d, start + <double>(d * radix * radix),
                    w_hi, w_lo, n_freq)
    return CPE_OK


cdef inline Py_ssize_t _stream_offset(const void* out, Py_ssize_t width,
                                      size_t itemsize) noexcept nogil:
    """Where the rows a streamed table reads should start past a cache line, or -1.

    The stream loops (cpe_rows.h) first store pairs one at a time until the output
    row is on a boundary of their vector width (64 bytes for AVX-512); the rows
    they read from then start on a 64-byte line too when they begin this many bytes
    past one. (The AVX2 and SSE2 loops peel fewer pairs: their float64 reads may
    start 16 bytes off a 32-byte boundary.) Only when every output row starts at
    the same offset (width * itemsize a multiple of 64).
    """
    if (width * <Py_ssize_t>itemsize) % 64 or (<uintptr_t>out) % (2 * itemsize):
        return -1
    cdef Py_ssize_t peel = ((64 - <Py_ssize_t>((<uintptr_t>out) % 64)) % 64) // (2 * itemsize)
    return (64 - (8 * peel) % 64) % 64


cdef inline void _digits_free(digits* t) noexcept nogil:
    free(t.owned)


# ---- kernels ----

cdef inline bint _streaming(const void* out, Py_ssize_t rows, Py_ssize_t width,
                            size_t itemsize, const void* sin_out=NULL) noexcept nogil:
    """Whether ``rows`` rows at ``out`` (and as many at ``sin_out``, RoPE's sin
    table) are written with streaming stores: outputs of STREAM_BYTES and more
    whose memory is already mapped, or may be (see cpe_memory.h)."""
    cdef Py_ssize_t n_bytes = rows * width * <Py_ssize_t>itemsize
    if not (STREAM_ENABLED and width % 2 == 0
            and n_bytes >= (STREAM_BYTES if sin_out == NULL else STREAM_BYTES // 2)):
        return False
    return cpe_mostly_mapped(out, n_bytes) != 0 and (sin_out == NULL
                                                     or cpe_mostly_mapped(sin_out, n_bytes) != 0)


def _streams(const unsigned char[::1] out):
    """Whether the kernels would write ``out`` (bytes, viewed as uint8) with
    streaming stores. For the tests."""
    return _streaming(&out[0] if out.shape[0] else NULL, out.shape[0] // 2, 2, 1)


cdef inline void _store_rows(floating* row, const double** chain, Py_ssize_t count,
                             const columns* c, Py_ssize_t width, bint stream,
                             double* buffers) noexcept nogil:
    """The row whose angles are those of chain[0] + chain[1] + ... (pair rows),
    multiplied in that order: up to four in registers (_store_chain), longer
    chains and streamed rows through the two row ``buffers``. Streamed rows of a
    single pair row are its product with the third buffer, the identity row
    (sin, cos) = (0, 1), which gives its values exactly: a cache line written
    partly with ordinary stores and partly with streaming ones is slow."""
    cdef Py_ssize_t r, n_freq = c.n_sin
    cdef const double* four[4]
    cdef const double* acc
    cdef double* spare
    if count == 1 and stream:
        _store_product(row, chain[0], buffers + 4 * n_freq, c, width, stream)
        return
    if count == 1:
        _store_pairs(row, chain[0], c, width)
        return
    if count == 2:
        # The operations of _store_chain, in the loops of tables (float32: the
        # hand-written AVX-512 one, ~20% faster than the chain's).
        _store_product(row, chain[1], chain[0], c, width, stream)
        return
    if count <= 4 and not stream:
        four[0] = four[1] = four[2] = four[3] = chain[0]
        for r in range(1, count):
            four[r] = chain[r]
        _store_chain(row, four, <int>count, c, width)
        return
    acc = chain[0]
    spare = buffers
    for r in range(1, count - 1):
        _product_pairs(spare, chain[r], acc, n_freq)
        acc = spare
        spare = buffers + 2 * n_freq if spare == buffers else buffers
    _store_product(row, chain[count - 1], acc, c, width, stream)


cdef inline Py_ssize_t _digit_chain(const double** chain, Py_ssize_t d, const double* levels,
                                    Py_ssize_t radix, int shift, Py_ssize_t n_levels,
                                    Py_ssize_t row_doubles) noexcept nogil:
    """The level rows of the digits of d >= 0, highest first, skipping zero digits
    (the identity) except for d = 0; returns how many. ``shift`` is log2(radix)
    when radix is a power of two (a shift, not a division, per digit), else -1."""
    cdef Py_ssize_t digits[64]
    cdef Py_ssize_t k, top = 0, count = 0
    for k in range(n_levels):
        if shift >= 0:
            digits[k] = d & (radix - 1)
            d >>= shift
        else:
            digits[k] = d % radix
            d //= radix
        if digits[k]:
            top = k
        if d == 0:  # the digits above are zero
            break
    for k in range(top, -1, -1):
        if digits[k] or k == top:
            chain[count] = levels + row_doubles * (k * radix + digits[k])
            count += 1
    return count


cdef int _fill_from_levels(floating* out, const double* positions, Py_ssize_t n_positions,
                           Py_ssize_t width, Py_ssize_t n_freq, const columns* c,
                           const double* levels, Py_ssize_t radix, Py_ssize_t n_levels,
                           int layout, floating* rope_sin) noexcept nogil:
    """Integers |p| < radix**n_levels: one product per non-zero digit above the first.

    A negative position is written as its magnitude with the sines negated, so
    that p and -p give exactly opposite sines and equal cosines. With rope_sin,
    RoPE's rows: those of two digit rows (positive) written once where they go,
    the others made as encoding rows and split (_rope_split) while in the cache.
    """
    cdef Py_ssize_t row_doubles = 2 * n_freq
    cdef bint stream = rope_sin == NULL and _streaming(out, n_positions, width, sizeof(floating))
    cdef double* owned = NULL
    cdef double* buffers = NULL
    cdef Py_ssize_t i, count, negated = 0
    if stream or n_levels > 4:
        # Two rows for partial products, then the identity row (see _store_rows).
        owned = <double*>malloc(sizeof(double) * (3 * row_doubles + 8))
        if owned == NULL:
            return CPE_ERR_NOMEM
        buffers = _line_start(owned)
        for i in range(n_freq):
            buffers[2 * row_doubles + i] = 0.0
            buffers[2 * row_doubles + n_freq + i] = 1.0
    cdef rope_rows rope
    if _rope_rows_init(&rope, out, rope_sin, n_positions, width, sizeof(floating)) != CPE_OK:
        free(owned)
        return CPE_ERR_NOMEM
    cdef floating* cos_row
    cdef floating* sin_row
    cdef const double* chain[64]
    cdef int shift = 0
    while shift < 62 and (<Py_ssize_t>1) << shift < radix:
        shift += 1
    if (<Py_ssize_t>1) << shift != radix:
        shift = -1
    for i in range(n_positions):
        count = _digit_chain(chain, <Py_ssize_t>fabs(positions[i]), levels, radix, shift,
                             n_levels, row_doubles)
        cos_row = _rope_row(&rope, out, i, width, False)
        sin_row = NULL if rope_sin == NULL else _rope_row(&rope, rope_sin, i, width, True)
        if rope_sin != NULL and count == 2 and positions[i] > 0:
            # The values _store_rows then _rope_split would give, written once.
            _store_rope_product(cos_row, sin_row, chain[1], chain[0], n_freq, layout)
        else:
            _store_rows(cos_row, chain, count, c, width, stream, buffers)
            if rope_sin == NULL:
                negated += positions[i] < 0
                continue
            if positions[i] < 0:
                _negate_sines(cos_row, c)
            _rope_split(cos_row, sin_row, 1, width, layout)
        _rope_row_done(&rope, out, rope_sin, i, n_positions - 1, width)
    _rope_rows_free(&rope)
    if stream:
        cpe_stream_fence()
    free(owned)
    if negated:
        for i in range(n_positions):
            if positions[i] < 0:
                _negate_sines(out + i * width, c)
    return CPE_OK


cdef int _fill_angle_sum(floating* out, Py_ssize_t width, Py_ssize_t n_freq, int layout,
                         const double* const* pair_rows, Py_ssize_t count,
                         bint negate) noexcept nogil:
    cdef columns c
    if count < 1 or count > 64 or _columns(width, n_freq, layout, &c) != CPE_OK:
        return CPE_ERR_ARGUMENT
    if (width and out == NULL) or pair_rows == NULL:
        return CPE_ERR_ARGUMENT
    if n_freq == 0:
        _store_pairs(out, NULL, &c, width)
        return CPE_OK
    cdef double* buffers = NULL
    if count > 4:
        buffers = <double*>malloc(sizeof(double) * 4 * n_freq)
        if buffers == NULL:
            return CPE_ERR_NOMEM
    _store_rows(out, <const double**>pair_rows, count, &c, width, False, buffers)
    free(buffers)
    if negate:
        _negate_sines(out, &c)
    return CPE_OK


cdef int fill_angle_sum_f64(double* out, Py_ssize_t width, Py_ssize_t n_freq, int layout,
                            const double* const* pair_rows, Py_ssize_t count,
                            bint negate) noexcept nogil:
    return _fill_angle_sum(out, width, n_freq, layout, pair_rows, count, negate)


cdef int fill_angle_sum_f32(float* out, Py_ssize_t width, Py_ssize_t n_freq, int layout,
                            const double* const* pair_rows, Py_ssize_t count,
                            bint negate) noexcept nogil:
    return _fill_angle_sum(out, width, n_freq, layout, pair_rows, count, negate)


cdef inline void _negate_sines(floating* row, const columns* c) noexcept nogil:
    cdef Py_ssize_t j
    cdef floating* sines = row + c.sin_at
    if c.sin_step == 2:
        for j in range(c.n_sin):
            sines[2 * j] = -sines[2 * j]
    else:
        for j in range(c.n_sin):
            sines[j] = -sines[j]


cdef int _fill_positions(floating* out, const double* positions, Py_ssize_t n_positions,
                         Py_ssize_t width, const double* w_hi, const double* w_lo,
                         Py_ssize_t n_freq, int layout, const double* levels,
                         Py_ssize_t radix, Py_ssize_t n_levels,
                         floating* rope_sin) noexcept nogil:
    """The rows of the positions; with rope_sin, RoPE's cos table (in out) and
    sin table, as in _fill_table."""
    cdef columns c
    if n_positions < 0 or _columns(width, n_freq, layout, &c) != CPE_OK:
        return CPE_ERR_ARGUMENT
    if n_positions and (positions == NULL or (width and out == NULL)
                        or (n_freq and (w_hi == NULL or w_lo == NULL))):
        return CPE_ERR_ARGUMENT
    cdef Py_ssize_t limit = _levels_limit(radix, n_levels) if levels != NULL else 0
    if levels != NULL and (limit == 0 or n_levels < 2):
        return CPE_ERR_ARGUMENT
    cdef const double* low = levels
    cdef const double* middle = NULL
    if levels != NULL:  # (a conditional expression would be typed void*, without const)
        middle = levels + 2 * n_freq * radix
    cdef Py_ssize_t i, d, d0, d1, d2
    cdef double p, lowest = 0.0, highest = 0.0
    cdef bint integral = True
    for i in range(n_positions):
        p = positions[i]
        if not isfinite(p):
            return CPE_ERR_ARGUMENT
        integral = integral and floor(p) == p
        if i == 0 or p < lowest:
            lowest = p
        if i == 0 or p > highest:
            highest = p
    if not _angles_in_range(max(fabs(lowest), fabs(highest)), w_hi, n_freq):
        return CPE_ERR_RANGE

    cdef digits t
    cdef rope_rows rope
    cdef double* pairs
    cdef bint stream
    cdef Py_ssize_t span = 0, libm_rows, r
    if (levels != NULL and integral and -lowest < <double>limit and highest < <double>limit
            and n_freq):
        return _fill_from_levels(out, positions, n_positions, width, n_freq, &c,
                                 levels, radix, n_levels, layout, rope_sin)
    if integral and highest - lowest < 1099511627776.0:
        span = <Py_ssize_t>(highest - lowest) + 1
    # Digit tables pay off when their computed rows are few against the positions.
    if span and n_freq:
        r = radix if low != NULL else _radix_for(span)
        libm_rows = span // (r * r) + 1 + (0 if low != NULL else 2 * r)
        if 4 * libm_rows <= n_positions:
            if _digits_init(&t, lowest, span, w_hi, w_lo, n_freq, low, middle, radix,
                            -1) != CPE_OK:
                return CPE_ERR_NOMEM
            stream = rope_sin == NULL and _streaming(out, n_positions, width, sizeof(floating))
            if _rope_rows_init(&rope, out, rope_sin, n_positions, width,
                               sizeof(floating)) != CPE_OK:
                _digits_free(&t)
                return CPE_ERR_NOMEM
            for i in range(n_positions):
                d = <Py_ssize_t>(positions[i] - lowest)
                d2 = d // (t.radix * t.radix)
                d1 = (d // t.radix) % t.radix
                d0 = d % t.radix
                _product_pairs(t.scratch, t.middle + 2 * n_freq * d1,
                               t.high + 2 * n_freq * d2, n_freq)
                if rope_sin != NULL:
                    # The values of _store_product then _rope_split, written once.
                    _store_rope_product(_rope_row(&rope, out, i, width, False),
                                        _rope_row(&rope, rope_sin, i, width, True),
                                        t.low + 2 * n_freq * d0, t.scratch, n_freq, layout)
                    _rope_row_done(&rope, out, rope_sin, i, n_positions - 1, width)
                    continue
                _store_product(out + i * width, t.low + 2 * n_freq * d0, t.scratch, &c, width,
                               stream)
            _rope_rows_free(&rope)
            _digits_free(&t)
            if stream:
                cpe_stream_fence()
            if lowest < 0 and highest >= 0:
                for i in range(n_positions):
                    if positions[i] == 0:
                        _store_origin(out + i * width, &c, width,
                                      NULL if rope_sin == NULL else rope_sin + i * width,
                                      layout)
            return CPE_OK

    pairs = <double*>malloc(sizeof(double) * 2 * (n_freq + 1))
    if pairs == NULL:
        return CPE_ERR_NOMEM
    for i in range(n_positions):
        _sincos_row(pairs, positions[i], w_hi, w_lo, n_freq)
        _store_pairs(out + i * width, pairs, &c, width)
        if rope_sin != NULL:
            _rope_split(out + i * width, rope_sin + i * width, 1, width, layout)
    free(pairs)
    return CPE_OK


cdef inline void _rope_split(floating* cos_rows, floating* sin_rows, Py_ssize_t n_rows,
                             Py_ssize_t width, int layout) noexcept nogil:
    # Rows just written as [sin | cos] (sin_cos) or interleaved (sin, cos) become
    # RoPE's cos rows, and their sines go twice into the sin rows: the same
    # copies rope_cos_sin made with NumPy, done while the rows are in cache.
    cdef Py_ssize_t i, j, half = width // 2
    cdef floating* c
    cdef floating* s
    for i in range(n_rows):
        c = cos_rows + i * width
        s = sin_rows + i * width
        if layout == CPE_LAYOUT_SIN_COS:
            for j in range(half):
                s[j] = c[j]
                s[half + j] = c[j]
                c[j] = c[half + j]
        else:
            for j in range(half):
                s[2 * j] = c[2 * j]
                s[2 * j + 1] = c[2 * j]
                c[2 * j] = c[2 * j + 1]


cdef inline void _store_origin(floating* row, const columns* c, Py_ssize_t width,
                               floating* rope_sin, int layout) noexcept nogil:
    """The row of position 0 exactly: sines 0, cosines 1. A row built by angle
    addition from other positions (p = start + d, start < 0) is only within
    ~1e-16 of it, and a single position 0 gives it exactly."""
    cdef Py_ssize_t j
    for j in range(width):
        row[j] = 0
    for j in range(c.n_cos):
        row[c.cos_at + j * c.cos_step] = 1
    if rope_sin != NULL:
        _rope_split(row, rope_sin, 1, width, layout)


cdef int _fill_table(floating* out, double start, Py_ssize_t n_rows,
                     Py_ssize_t width, const double* w_hi, const double* w_lo,
                     Py_ssize_t n_freq, int layout, const double* levels,
                     Py_ssize_t radix, Py_ssize_t n_levels,
                     floating* rope_sin) noexcept nogil:
    """The table of positions start, start + 1, ...; with rope_sin, RoPE's cos
    table (in out) and sin table (see _rope_split), for width == 2 n_freq."""
    cdef columns c
    if n_rows < 0 or _columns(width, n_freq, layout, &c) != CPE_OK:
        return CPE_ERR_ARGUMENT
    if n_rows and ((width and out == NULL) or (n_freq and (w_hi == NULL or w_lo == NULL))):
        return CPE_ERR_ARGUMENT
    if levels != NULL and (_levels_limit(radix, n_levels) == 0 or n_levels < 2):
        return CPE_ERR_ARGUMENT
    cdef const double* low = levels
    cdef const double* middle = NULL
    if levels != NULL:  # (a conditional expression would be typed void*, without const)
        middle = levels + 2 * n_freq * radix
    if not (floor(start) == start and -9007199254740992.0 <= start
            and start + <double>n_rows <= 9007199254740992.0):
        return CPE_ERR_ARGUMENT
    if n_rows and not _angles_in_range(max(fabs(start), fabs(start + <double>(n_rows - 1))),
                                       w_hi, n_freq):
        return CPE_ERR_RANGE
    cdef Py_ssize_t i, d0, d1, d2, row0
    if n_rows == 0 or n_freq == 0:
        for i in range(n_rows):
            _store_pairs(out + i * width, NULL, &c, width)
        return CPE_OK

    cdef double* pairs
    cdef Py_ssize_t r = _radix_for(n_rows)
    if low == NULL and 2 * r + (n_rows + r * r - 1) // (r * r) >= n_rows:
        # So few rows that digit tables would compute more rows than they save.
        pairs = <double*>malloc(sizeof(double) * 2 * n_freq)
        if pairs == NULL:
            return CPE_ERR_NOMEM
        for i in range(n_rows):
            _sincos_row(pairs, start + <double>i, w_hi, w_lo, n_freq)
            _store_pairs(out + i * width, pairs, &c, width)
            if rope_sin != NULL:
                _rope_split(out + i * width, rope_sin + i * width, 1, width, layout)
        free(pairs)
        return CPE_OK

    cdef digits t
    cdef bint stream = rope_sin == NULL and _streaming(out, n_rows, width, sizeof(floating))
    cdef rope_rows rope
    if _rope_rows_init(&rope, out, rope_sin, n_rows, width, sizeof(floating)) != CPE_OK:
        return CPE_ERR_NOMEM
    cdef Py_ssize_t offset = -1
    if stream and c.sin_step == 2:
        offset = _stream_offset(out, width, sizeof(floating))
    if _digits_init(&t, start, n_rows, w_hi, w_lo, n_freq, low, middle, radix,
                    offset) != CPE_OK:
        _rope_rows_free(&rope)
        return CPE_ERR_NOMEM
    radix = t.radix
    for d2 in range(t.n_high):
        for d1 in range(radix):
            row0 = (d2 * radix + d1) * radix
            if row0 >= n_rows:
                break
            _product_pairs(t.scratch, t.middle + 2 * n_freq * d1,
                           t.high + 2 * n_freq * d2, n_freq)
            if rope_sin == NULL:
                for d0 in range(min(radix, n_rows - row0)):
                    _store_product(out + (row0 + d0) * width, t.low + 2 * n_freq * d0,
                                   t.scratch, &c, width, stream)
                continue
            for d0 in range(min(radix, n_rows - row0)):
                i = row0 + d0
                _store_rope_product(_rope_row(&rope, out, i, width, False),
                                    _rope_row(&rope, rope_sin, i, width, True),
                                    t.low + 2 * n_freq * d0, t.scratch, n_freq, layout)
                _rope_row_done(&rope, out, rope_sin, i, n_rows - 1, width)
    _digits_free(&t)
    _rope_rows_free(&rope)
    if stream:
        cpe_stream_fence()
    if start <= 0 and start + <double>n_rows > 0:
        i = <Py_ssize_t>(-start)
        _store_origin(out + i * width, &c, width,
                      NULL if rope_sin == NULL else rope_sin + i * width, layout)
    return CPE_OK


# ---- the exported, one-per-dtype entry points ----

cdef int fill_positions_f64(double* out, const double* positions, Py_ssize_t n_positions,
                            Py_ssize_t width, const double* w_hi, const double* w_lo,
                            Py_ssize_t n_freq, int layout) noexcept nogil:
    return _fill_positions(out, positions, n_positions, width, w_hi, w_lo, n_freq, layout,
                           NULL, 0, 0, NULL)


cdef int fill_positions_f32(float* out, const double* positions, Py_ssize_t n_positions,
                            Py_ssize_t width, const double* w_hi, const double* w_lo,
                            Py_ssize_t n_freq, int layout) noexcept nogil:
    return _fill_positions(out, positions, n_positions, width, w_hi, w_lo, n_freq, layout,
                           NULL, 0, 0, NULL)


cdef int fill_table_f64(double* out, double start, Py_ssize_t n_rows,
                        Py_ssize_t width, const double* w_hi, const double* w_lo,
                        Py_ssize_t n_freq, int layout) noexcept nogil:
    return _fill_table(out, start, n_rows, width, w_hi, w_lo, n_freq, layout, NULL, 0, 0, NULL)


cdef int fill_table_f32(float* out, double start, Py_ssize_t n_rows,
                        Py_ssize_t width, const double* w_hi, const double* w_lo,
                        Py_ssize_t n_freq, int layout) noexcept nogil:
    return _fill_table(out, start, n_rows, width, w_hi, w_lo, n_freq, layout, NULL, 0, 0, NULL)


cdef int fill_positions_levels_f64(double* out, const double* positions,
                                   Py_ssize_t n_positions, Py_ssize_t width,
                                   const double* w_hi, const double* w_lo, Py_ssize_t n_freq,
                                   int layout, const double* levels, Py_ssize_t radix,
                                   Py_ssize_t n_levels) noexcept nogil:
    return _fill_positions(out, positions, n_positions, width, w_hi, w_lo, n_freq, layout,
                           levels, radix, n_levels, NULL)


cdef int fill_positions_levels_f32(float* out, const double* positions,
                                   Py_ssize_t n_positions, Py_ssize_t width,
                                   const double* w_hi, const double* w_lo, Py_ssize_t n_freq,
                                   int layout, const double* levels, Py_ssize_t radix,
                                   Py_ssize_t n_levels) noexcept nogil:
    return _fill_positions(out, positions, n_positions, width, w_hi, w_lo, n_freq, layout,
                           levels, radix, n_levels, NULL)


cdef int fill_table_levels_f64(double* out, double start, Py_ssize_t n_rows,
                               Py_ssize_t width, const double* w_hi, const double* w_lo,
                               Py_ssize_t n_freq, int layout, const double* levels,
                               Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil:
    return _fill_table(out, start, n_rows, width, w_hi, w_lo, n_freq, layout,
                       levels, radix, n_levels, NULL)


cdef int fill_table_levels_f32(float* out, double start, Py_ssize_t n_rows,
                               Py_ssize_t width, const double* w_hi, const double* w_lo,
                               Py_ssize_t n_freq, int layout, const double* levels,
                               Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil:
    return _fill_table(out, start, n_rows, width, w_hi, w_lo, n_freq, layout,
                       levels, radix, n_levels, NULL)


cdef inline int _rope_layout(Py_ssize_t head_dim, bint interleaved) noexcept nogil:
    """The encoding layout the RoPE kernels split (see _rope_split), or -1 when
    head_dim is not even and >= 2."""
    if head_dim < 2 or head_dim % 2:
        return -1
    return CPE_LAYOUT_INTERLEAVED if interleaved else CPE_LAYOUT_SIN_COS


cdef inline int _fill_rope_table(floating* cos_out, floating* sin_out, double start,
                                 Py_ssize_t n_rows, Py_ssize_t head_dim, const double* w_hi,
                                 const double* w_lo, bint interleaved, const double* levels,
                                 Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil:
    cdef int layout = _rope_layout(head_dim, interleaved)
    if layout < 0 or (n_rows and (cos_out == NULL or sin_out == NULL)):
        return CPE_ERR_ARGUMENT
    return _fill_table(cos_out, start, n_rows, head_dim, w_hi, w_lo, head_dim // 2, layout,
                       levels, radix, n_levels, sin_out)


cdef int fill_rope_table_f64(double* cos_out, double* sin_out, double start,
                             Py_ssize_t n_rows, Py_ssize_t head_dim, const double* w_hi,
                             const double* w_lo, bint interleaved, const double* levels,
                             Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil:
    return _fill_rope_table(cos_out, sin_out, start, n_rows, head_dim, w_hi, w_lo,
                            interleaved, levels, radix, n_levels)


cdef int fill_rope_table_f32(float* cos_out, float* sin_out, double start,
                             Py_ssize_t n_rows, Py_ssize_t head_dim, const double* w_hi,
                             const double* w_lo, bint interleaved, const double* levels,
                             Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil:
    return _fill_rope_table(cos_out, sin_out, start, n_rows, head_dim, w_hi, w_lo,
                            interleaved, levels, radix, n_levels)


cdef inline int _fill_rope_positions(floating* cos_out, floating* sin_out,
                                     const double* positions, Py_ssize_t n_positions,
                                     Py_ssize_t head_dim, const double* w_hi,
                                     const double* w_lo, bint interleaved, const double* levels,
                                     Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil:
    cdef int layout = _rope_layout(head_dim, interleaved)
    if layout < 0 or (n_positions and (cos_out == NULL or sin_out == NULL)):
        return CPE_ERR_ARGUMENT
    return _fill_positions(cos_out, positions, n_positions, head_dim, w_hi, w_lo, head_dim // 2,
                           layout, levels, radix, n_levels, sin_out)


cdef int fill_rope_positions_f64(double* cos_out, double* sin_out, const double* positions,
                                 Py_ssize_t n_positions, Py_ssize_t head_dim,
                                 const double* w_hi, const double* w_lo, bint interleaved,
                                 const double* levels, Py_ssize_t radix,
                                 Py_ssize_t n_levels) noexcept nogil:
    return _fill_rope_positions(cos_out, sin_out, positions, n_positions, head_dim, w_hi, w_lo,
                                interleaved, levels, radix, n_levels)


cdef int fill_rope_positions_f32(float* cos_out, float* sin_out, const double* positions,
                                 Py_ssize_t n_positions, Py_ssize_t head_dim,
                                 const double* w_hi, const double* w_lo, bint interleaved,
                                 const double* levels, Py_ssize_t radix,
                                 Py_ssize_t n_levels) noexcept nogil:
    return _fill_rope_positions(cos_out, sin_out, positions, n_positions, head_dim, w_hi, w_lo,
                                interleaved, levels, radix, n_levels)
