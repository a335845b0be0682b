"""The engine of cpe: accurate sinusoid rows written straight into caller buffers.

Every request of the C API (``kernels.pxd``) and of the Python functions
(``_core``) is filled here; ``_engine.pxd`` declares what they share, README.md
the definition. Two ideas carry
the accuracy:

* the frequencies ``w_j`` are double-doubles (about 106 bits), so the angle
  ``p * w_j`` is formed exactly as ``th + tl``, and a row of sines and cosines
  of such angles is computed by the vectorized loop of ``cpe_rows.h`` (its
  scalar ``cpe_sincos_exact`` beyond its range), with no libm call: every value
  is a function of its inputs alone, on every platform;
* every integer position uses the angle-addition identity: its row is the
  complex product of a few "digit" rows ``(sin, cos)(d R**k w)``, each computed
  as above, in an order fixed by the position alone (see cpe_fill.h and "the one
  fill loop" below), so only a handful of rows need that loop, every value stays
  within a few ulp, and a position has the same bits in every request.
"""
from libc.math cimport INFINITY, fma, fabs, frexp, ldexp, floor, isfinite
from libc.stdlib cimport calloc, malloc, free, getenv
from libc.string cimport memcpy
from libc.stdint cimport uintptr_t
from cpython.pyport cimport PY_SSIZE_T_MAX
from cython cimport floating

from cpe.kernels cimport (
    CPE_ANGLE_LIMIT,
    CPE_ERR_ARGUMENT,
    CPE_ERR_NOMEM,
    CPE_ERR_RANGE,
    CPE_LAYOUT_COS_SIN,
    CPE_LAYOUT_INTERLEAVED,
    CPE_LAYOUT_SIN_COS,
    CPE_OK,
)

cdef extern from "cpe_memory.h":
    int cpe_mostly_mapped(const void* p, size_t n) noexcept nogil

cdef extern from "cpe_rows.h":
    bint CPE_HAVE_STREAM
    void cpe_stream_fence() noexcept nogil
    void cpe_stream_bytes(char* dst, const char* src, size_t n) noexcept nogil
    int cpe_rows_level
    void cpe_rows_init(int max_level) noexcept nogil
    int cpe_fast_element(double p, double w) noexcept nogil
    bint cpe_splits(double a) noexcept nogil
    void cpe_split(double a, double* hi, double* lo) noexcept nogil
    double cpe_dekker_error(double p, double a_hi, double a_lo, double b_hi,
                            double b_lo) noexcept nogil
    void cpe_sincos_exact(double p, double w_hi, double w_lo, double* s,
                          double* c) noexcept nogil
    int cpe_sincos_row_fast(double* row, double p, const double* w_hi, const double* w_lo,
                            Py_ssize_t n) noexcept nogil
    void cpe_largest_magnitude(const double* x, Py_ssize_t n, double* largest) noexcept nogil
    double cpe_chain_sine(const double* const* rows, int count, Py_ssize_t j,
                          Py_ssize_t n) noexcept nogil
    # (first, second, rows, count, n_pairs, n_freq): see cpe_rows.h
    void cpe_chain_interleaved_double(double*, double*, const double* const*, int,
                                      Py_ssize_t, Py_ssize_t) noexcept nogil
    void cpe_chain_interleaved_float(float*, float*, const double* const*, int,
                                     Py_ssize_t, Py_ssize_t) noexcept nogil
    void cpe_chain_blocked_double(double*, double*, const double* const*, int,
                                  Py_ssize_t, Py_ssize_t) noexcept nogil
    void cpe_chain_blocked_float(float*, float*, const double* const*, int,
                                 Py_ssize_t, Py_ssize_t) noexcept nogil
    # (..., amplitude, columns, half_at)
    void cpe_chain_rope_half_double(double*, double*, const double* const*, int,
                                    Py_ssize_t, Py_ssize_t, double, const Py_ssize_t*,
                                    Py_ssize_t) noexcept nogil
    void cpe_chain_rope_half_float(float*, float*, const double* const*, int,
                                   Py_ssize_t, Py_ssize_t, double, const Py_ssize_t*,
                                   Py_ssize_t) noexcept nogil
    void cpe_chain_rope_interleaved_double(double*, double*, const double* const*, int,
                                           Py_ssize_t, Py_ssize_t, double, const Py_ssize_t*,
                                           Py_ssize_t) noexcept nogil
    void cpe_chain_rope_interleaved_float(float*, float*, const double* const*, int,
                                          Py_ssize_t, Py_ssize_t, double, const Py_ssize_t*,
                                          Py_ssize_t) noexcept nogil
    void cpe_prefetch_row(const char* x, const char* y, Py_ssize_t row_bytes) noexcept nogil
    # (a, b, c, s, n): see cpe_rows.h
    void cpe_rotate_half_double(double*, double*, const double*, const double*,
                                Py_ssize_t) noexcept nogil
    void cpe_rotate_half_float(float*, float*, const double*, const double*,
                               Py_ssize_t) noexcept nogil
    void cpe_rotate_interleaved_double(double*, double*, const double*, const double*,
                                       Py_ssize_t) noexcept nogil
    void cpe_rotate_interleaved_float(float*, float*, const double*, const double*,
                                      Py_ssize_t) noexcept nogil
    ctypedef unsigned short cpe_f16
    ctypedef unsigned short cpe_bf16
    void cpe_rotate_half_cpe_f16(cpe_f16*, cpe_f16*, const double*, const double*,
                                 Py_ssize_t) noexcept nogil
    void cpe_rotate_half_cpe_bf16(cpe_bf16*, cpe_bf16*, const double*, const double*,
                                  Py_ssize_t) noexcept nogil
    void cpe_rotate_interleaved_cpe_f16(cpe_f16*, cpe_f16*, const double*, const double*,
                                        Py_ssize_t) noexcept nogil
    void cpe_rotate_interleaved_cpe_bf16(cpe_bf16*, cpe_bf16*, const double*, const double*,
                                         Py_ssize_t) noexcept nogil
    # (x, e, x_scale, n): see cpe_rows.h
    void cpe_add_row_double(double*, const double*, double, Py_ssize_t) noexcept nogil
    void cpe_add_row_float(float*, const double*, double, Py_ssize_t) noexcept nogil
    void cpe_add_row_cpe_f16(cpe_f16*, const double*, double, Py_ssize_t) noexcept nogil
    void cpe_add_row_cpe_bf16(cpe_bf16*, const double*, double, Py_ssize_t) noexcept nogil
    void cpe_narrow_cpe_f16(const double*, cpe_f16*, Py_ssize_t) noexcept nogil
    void cpe_narrow_cpe_bf16(const double*, cpe_bf16*, Py_ssize_t) noexcept nogil

# The row loop uses the widest SIMD copy the CPU runs (they all give the same
# bits); CPE_DISABLE_SIMD=1 selects the portable copy, CPE_DISABLE_AVX512=1 stops
# at AVX2, CPE_DISABLE_AVX512BF16=1 at AVX-512 without its bfloat16 conversions.
cpe_rows_init(0 if getenv("CPE_DISABLE_SIMD") != NULL
              else 1 if getenv("CPE_DISABLE_AVX512") != NULL
              else 2 if getenv("CPE_DISABLE_AVX512BF16") != NULL else 3)


def _row_loop():
    """Which copy of the sine/cosine row loop this process uses: "avx512bf16"
    (AVX-512, with AVX512_BF16 for bfloat16 stores), "avx512", "avx2" or
    "portable"."""
    return ("portable", "avx2", "avx512", "avx512bf16")[cpe_rows_level]


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
    with ordinary stores, which read every cache line first: outputs of
    STREAM_BYTES and more are streamed, as tables are.
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
    cdef double a_hi, a_lo, b_hi, b_lo
    if not (cpe_splits(a) and cpe_splits(b)):
        return dd(hi=p, lo=fma(a, b, -p))
    cpe_split(a, &a_hi, &a_lo)
    cpe_split(b, &b_hi, &b_lo)
    return dd(hi=p, lo=cpe_dekker_error(p, a_hi, a_lo, b_hi, b_lo))


cdef inline dd _dd_add(dd a, dd b) noexcept nogil:
    cdef dd s = _two_sum(a.hi, b.hi)
    cdef dd t = _two_sum(a.lo, b.lo)
    s = _quick_two_sum(s.hi, s.lo + t.hi)
    return _quick_two_sum(s.hi, s.lo + t.lo)


cdef inline dd _dd_mul_d(dd a, double b) noexcept nogil:
    cdef dd p = _two_prod(a.hi, b)
    return _quick_two_sum(p.hi, p.lo + a.lo * b)


cdef inline dd _dd_div_d(dd a, double b) noexcept nogil:
    cdef double q1 = a.hi / b
    cdef dd p = _two_prod(q1, b)
    cdef dd r = _two_sum(a.hi, -p.hi)
    cdef double q2 = (r.hi + ((r.lo - p.lo) + a.lo)) / b
    return _quick_two_sum(q1, q2)


cdef inline double _log_start(double m) noexcept nogil:
    # log m for 0.5 <= m < 1, to ~2**-52: 2 atanh(z), z = (m - 1) / (m + 1) in
    # [-1/3, 0), by its series to z**35 (the rest below 9**-18 of it). Plain
    # arithmetic, so the same bits on every platform (libm's log may differ).
    cdef double z = (m - 1.0) / (m + 1.0)
    cdef double z2 = z * z
    cdef double series = 1.0 / 35.0
    cdef int i
    for i in range(33, 0, -2):
        series = 1.0 / i + z2 * series
    return 2.0 * z * series


# ---- triple-double arithmetic: the frequencies to ~2**-150, rounded once ----
# (x0, x1, x2) stands for x0 + x1 + x2, each part below half an ulp of the one
# before. A frequency w_j = scale * ratio**j, ratio = base**(-1 / den), is off by
# about j times ratio's own relative error, and an angle p * w_j near 2**53 by
# 2**53 times w_j's: the float64 bound needs w_j within ~2**-104. In
# triple-double, ratio is within ~2**-140 and the recurrence loses ~2**-150 a
# step, so each w_j is within ~2**-105 once made a double-double.

cdef struct td:
    double x0
    double x1
    double x2

# ln 2 as a triple-double.
cdef td LN2_TD = td(x0=6.931471805599453e-01, x1=2.3190468138462996e-17,
                    x2=5.707708438416212e-34)


cdef inline td _td_renormalize(double a, double b, double c) noexcept nogil:
    # a + b + c (|a| >= |b| >= |c| roughly) as non-overlapping parts.
    cdef dd s = _two_sum(b, c)
    cdef dd r = _two_sum(a, s.hi)
    cdef dd t = _two_sum(r.lo, s.lo)
    r = _quick_two_sum(r.hi, t.hi)
    t = _quick_two_sum(r.lo, t.lo)
    return td(x0=r.hi, x1=t.hi, x2=t.lo)


cdef inline td _td_add(td a, td b) noexcept nogil:
    cdef dd s0 = _two_sum(a.x0, b.x0)
    cdef dd s1 = _two_sum(a.x1, b.x1)
    cdef dd t = _two_sum(s1.hi, s0.lo)
    return _td_renormalize(s0.hi, t.hi, t.lo + s1.lo + (a.x2 + b.x2))


cdef inline td _td_mul(td a, td b) noexcept nogil:
    cdef dd p00 = _two_prod(a.x0, b.x0)
    cdef dd p01 = _two_prod(a.x0, b.x1)
    cdef dd p10 = _two_prod(a.x1, b.x0)
    cdef dd s = _two_sum(p00.lo, p01.hi)
    cdef dd t = _two_sum(s.hi, p10.hi)
    cdef double rest = (s.lo + t.lo + p01.lo + p10.lo
                        + (a.x0 * b.x2 + a.x1 * b.x1 + a.x2 * b.x0))
    return _td_renormalize(p00.hi, t.hi, rest)


cdef inline td _td_mul_d(td a, double b) noexcept nogil:
    cdef dd p0 = _two_prod(a.x0, b)
    cdef dd p1 = _two_prod(a.x1, b)
    cdef dd s = _two_sum(p0.lo, p1.hi)
    return _td_renormalize(p0.hi, s.hi, s.lo + p1.lo + a.x2 * b)


cdef inline td _td_div_d(td a, double b) noexcept nogil:
    # Three quotient digits, each from the remainder left by the ones before.
    cdef double q0 = a.x0 / b
    cdef td r = _td_add(a, _td_mul_d(td(x0=q0, x1=0.0, x2=0.0), -b))
    cdef double q1 = r.x0 / b
    r = _td_add(r, _td_mul_d(td(x0=q1, x1=0.0, x2=0.0), -b))
    return _td_renormalize(q0, q1, r.x0 / b)


cdef inline td _td_scale(td a, int k) noexcept nogil:
    return td(x0=ldexp(a.x0, k), x1=ldexp(a.x1, k), x2=ldexp(a.x2, k))


# 1 / i! for i <= 15, as triple-doubles (set at import).
cdef td _INVERSE_FACTORIAL_TD[16]


cdef void _set_inverse_factorials_td() noexcept nogil:
    cdef int i
    _INVERSE_FACTORIAL_TD[0] = td(x0=1.0, x1=0.0, x2=0.0)
    for i in range(1, 16):
        _INVERSE_FACTORIAL_TD[i] = _td_div_d(_INVERSE_FACTORIAL_TD[i - 1], <double>i)


_set_inverse_factorials_td()


cdef td _td_exp(td a) noexcept nogil:
    # exp(a) = 2**k * exp(r)**1024, |r| <= ln2 / 2048: expm1(r) by its Taylor
    # series to r**15 (below 2**-170 of it), doubled ten times by
    # e(2x) = 2 e(x) + e(x)**2, which keeps its relative accuracy.
    if a.x0 != a.x0 or a.x0 > 709.79:  # (NaN, or beyond log(DBL_MAX) = 709.7827)
        return td(x0=a.x0 if a.x0 != a.x0 else INFINITY, x1=0.0, x2=0.0)
    if a.x0 < -746.0:  # below half the smallest subnormal
        return td(x0=0.0, x1=0.0, x2=0.0)
    cdef double k = floor(a.x0 / LN2_TD.x0 + 0.5)
    cdef td r = _td_scale(_td_add(a, _td_mul_d(LN2_TD, -k)), -10)
    cdef td s = _td_mul(_INVERSE_FACTORIAL_TD[15], r)
    cdef int i, _
    for i in range(14, 0, -1):
        s = _td_mul(_td_add(_INVERSE_FACTORIAL_TD[i], s), r)
    for _ in range(10):
        s = _td_add(_td_scale(s, 1), _td_mul(s, s))
    return _td_scale(_td_add(s, td(x0=1.0, x1=0.0, x2=0.0)), <int>k)


cdef td _td_log(double a) noexcept nogil:
    # a = m * 2**e with 0.5 <= m < 1, so that exp(-log m) stays in range even for
    # subnormal a; log m from _log_start, then two Newton steps y + m exp(-y) - 1,
    # each squaring the error (2**-52, 2**-104, then the arithmetic's ~2**-150),
    # and log a = log m + e ln 2.
    cdef int e, _
    cdef double m = frexp(a, &e)
    cdef td y = td(x0=_log_start(m), x1=0.0, x2=0.0)
    cdef td t
    for _ in range(2):
        t = _td_mul_d(_td_exp(td(x0=-y.x0, x1=-y.x1, x2=-y.x2)), m)
        y = _td_add(y, _td_add(t, td(x0=-1.0, x1=0.0, x2=0.0)))
    return _td_add(y, _td_mul_d(LN2_TD, <double>e))


cdef struct halves:
    # Dekker's halves of x0 and x1 of a triple-double, made once for the products
    # that share it (_two_prod_halves); valid0/1: within the range of the split.
    double h0
    double l0
    double h1
    double l1
    bint valid0
    bint valid1


cdef inline halves _halves(td a) noexcept nogil:
    cdef halves h
    h.valid0 = cpe_splits(a.x0)
    h.valid1 = cpe_splits(a.x1)
    cpe_split(a.x0, &h.h0, &h.l0)
    cpe_split(a.x1, &h.h1, &h.l1)
    return h


cdef inline dd _two_prod_halves(double a, double a_hi, double a_lo, bint a_valid, double b,
                                double b_hi, double b_lo, bint b_valid) noexcept nogil:
    # _two_prod(a, b) from halves made beforehand: the same bits.
    cdef double p = a * b
    if not (a_valid and b_valid):
        return _two_prod(a, b)
    return dd(hi=p, lo=cpe_dekker_error(p, a_hi, a_lo, b_hi, b_lo))


cdef inline void _td_product_store(td a, const halves* ah, td b, const halves* bh,
                                   double* hi, double* lo) noexcept nogil:
    # a * b as a double-double, within ~2**-107 of it: the terms of _td_mul, whose
    # sum below the leading product is rounded once (its cross terms summed in
    # plain double would pile up several roundings of 2**-106). ah, bh: the
    # halves of a and b.
    cdef dd p00 = _two_prod_halves(a.x0, ah.h0, ah.l0, ah.valid0, b.x0, bh.h0, bh.l0,
                                   bh.valid0)
    cdef dd p01 = _two_prod_halves(a.x0, ah.h0, ah.l0, ah.valid0, b.x1, bh.h1, bh.l1,
                                   bh.valid1)
    cdef dd p10 = _two_prod_halves(a.x1, ah.h1, ah.l1, ah.valid1, b.x0, bh.h0, bh.l0,
                                   bh.valid0)
    cdef dd s = _two_sum(p00.lo, p01.hi)
    cdef dd t = _two_sum(s.hi, p10.hi)
    cdef double rest = (s.lo + t.lo + p01.lo + p10.lo
                        + (a.x0 * b.x2 + a.x1 * b.x1 + a.x2 * b.x0))
    cdef dd r = _quick_two_sum(p00.hi, t.hi + rest)
    hi[0] = r.hi
    lo[0] = r.lo


cdef int frequencies(double* w_hi, double* w_lo, Py_ssize_t n_freq,
                     double base, double exponent_den, double scale) noexcept nogil:
    if n_freq < 0 or not (base > 0.0 and isfinite(base)):
        return CPE_ERR_ARGUMENT
    if not (exponent_den > 0.0 and isfinite(exponent_den)) or not isfinite(scale):
        return CPE_ERR_ARGUMENT
    if n_freq and (w_hi == NULL or w_lo == NULL):
        return CPE_ERR_ARGUMENT
    cdef td step = _td_div_d(_td_log(base), exponent_den)
    cdef td ratio = _td_exp(td(x0=-step.x0, x1=-step.x1, x2=-step.x2))
    # w_{8q + r} = (scale ratio**(8q)) ratio**r: eight independent products per
    # step of the recurrence (the steps themselves are a dependent chain, in
    # triple-double), each made a double-double.
    cdef td powers[8]
    cdef halves power_halves[8]
    cdef halves w_halves
    cdef td w = td(x0=scale, x1=0.0, x2=0.0)
    cdef td step8
    cdef Py_ssize_t j, r
    powers[0] = td(x0=1.0, x1=0.0, x2=0.0)
    for r in range(1, 8):
        powers[r] = _td_mul(powers[r - 1], ratio)
    for r in range(8):
        power_halves[r] = _halves(powers[r])
    step8 = _td_mul(powers[7], ratio)
    j = 0
    while j < n_freq:
        w_halves = _halves(w)
        for r in range(min(8, n_freq - j)):
            _td_product_store(w, &w_halves, powers[r], &power_halves[r], &w_hi[j + r],
                              &w_lo[j + r])
        w = _td_mul(w, step8)
        j += 8
    for j in range(n_freq):
        if not (isfinite(w_hi[j]) and isfinite(w_lo[j])):
            return CPE_ERR_RANGE
    return CPE_OK


cdef void blend_frequencies(double* w_hi, double* w_lo, const double* divisor,
                            const double* weight, const double* kept,
                            Py_ssize_t n_freq) noexcept nogil:
    """w_j <- w_j / divisor[j] * weight[j] + w_j * kept[j], in double-double: every
    RoPE scaling scheme's change of the frequencies (a division by a factor, or a
    blend of the divided and the kept frequencies)."""
    cdef Py_ssize_t j
    cdef dd w, result
    for j in range(n_freq):
        w = dd(hi=w_hi[j], lo=w_lo[j])
        result = _dd_add(_dd_mul_d(_dd_div_d(w, divisor[j]), weight[j]), _dd_mul_d(w, kept[j]))
        w_hi[j] = result.hi
        w_lo[j] = result.lo


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
    if width < 0 or n_freq < 0 or n_freq > width // 2 + width % 2:
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

cdef inline void _sincos_row(double* pair_row, double p, const double* w_hi,
                             const double* w_lo, Py_ssize_t n_freq) noexcept nogil:
    # The vectorized loop of cpe_rows.h; cpe_sincos_exact for the angles beyond
    # its range.
    cdef Py_ssize_t j
    if cpe_sincos_row_fast(pair_row, p, w_hi, w_lo, n_freq):
        for j in range(n_freq):
            if not cpe_fast_element(p, w_hi[j]):
                cpe_sincos_exact(p, w_hi[j], w_lo[j], &pair_row[j], &pair_row[n_freq + j])


cdef inline void _product_pairs(double* pair_row, const double* a, const double* b,
                                Py_ssize_t n_freq) noexcept nogil:
    # (sin, cos)(x + y) from the pair rows of x (b) and y (a), as a pair row.
    cdef const double* rows[4]
    rows[0], rows[1], rows[2], rows[3] = b, a, NULL, NULL
    _product_chain(pair_row, rows, 2, n_freq)


cdef inline void _product_chain(double* pair_row, const double** chain, int count,
                                Py_ssize_t n_freq) noexcept nogil:
    # The pair row of the sum of the angles of a chain of 1 to 4 pair rows
    # (highest first, see cpe_rows.h), none of them ``pair_row``.
    cpe_chain_blocked_double(pair_row, pair_row + n_freq, chain, count, n_freq, n_freq)


cdef inline void _store_rope_chain(floating* cos_row, floating* sin_row, const double** rows,
                                   int count, const fill_request* r) noexcept nogil:
    # RoPE's rows of the sum of the angles of a chain: the values _store_chain
    # stores, times the amplitude, written once where they go in both tables.
    if r.store == STORE_ROPE_HALF:
        if floating is double:
            cpe_chain_rope_half_double(cos_row, sin_row, rows, count, r.n_freq, r.n_freq,
                                       r.amplitude, r.columns, r.half_at)
        else:
            cpe_chain_rope_half_float(cos_row, sin_row, rows, count, r.n_freq, r.n_freq,
                                      r.amplitude, r.columns, r.half_at)
    else:
        if floating is double:
            cpe_chain_rope_interleaved_double(cos_row, sin_row, rows, count, r.n_freq, r.n_freq,
                                              r.amplitude, r.columns, r.half_at)
        else:
            cpe_chain_rope_interleaved_float(cos_row, sin_row, rows, count, r.n_freq, r.n_freq,
                                             r.amplitude, r.columns, r.half_at)


# Large outputs are built a chunk of rows at a time in a buffer that stays in L1,
# from which the chunk is streamed (see _streaming): one mechanism for every
# layout, one table or RoPE's two. Interleaved rows wider than a chunk are built
# and streamed a piece of PIECE_PAIRS pairs at a time instead, so that streaming
# overlaps the products rather than following a whole row of them.
cdef Py_ssize_t _CHUNK_BYTES = 8 * 1024
cdef enum:
    _PIECE_PAIRS = 64


cdef inline char* _apart(char* buffer, const void* out) noexcept nogil:
    """The cache line in the first 4 KiB + 64 bytes of ``buffer`` that lies half a
    page from ``out`` modulo 4 KiB: the buffer's loads then never look like they
    depend on the streamed stores that just left it (4K aliasing), whatever the
    addresses the allocators chose."""
    cdef uintptr_t start = (<uintptr_t>buffer + 63) & ~(<uintptr_t>63)
    cdef uintptr_t want = ((<uintptr_t>out & ~(<uintptr_t>63)) + 2048) & 4095
    return <char*>(start + ((want - start) & 4095))


cdef inline int _sink_init(row_sink* r, const void* out, const void* sin_out,
                           Py_ssize_t n_rows, Py_ssize_t width, size_t itemsize,
                           bint pairs_only, bint whole_rows) noexcept nogil:
    """Streamed when the output (both tables together) is large enough to
    stream and starts 16-byte aligned; else in place. ``pairs_only``: the rows
    are interleaved pairs and nothing else, which may be streamed in pieces;
    ``whole_rows`` false: the rows are columns of wider ones, written in place."""
    r.owned = r.chunk[0] = r.chunk[1] = NULL
    r.rows = 1
    r.slot = 0
    r.row_bytes = width * <Py_ssize_t>itemsize
    r.pieces = False
    if not (whole_rows and _streaming(out, n_rows, width, itemsize, sin_out)
            and (<uintptr_t>out) % 16 == 0 and (<uintptr_t>sin_out) % 16 == 0):
        return CPE_OK
    if pairs_only and r.row_bytes > _CHUNK_BYTES and r.row_bytes % 16 == 0:
        r.pieces = True
        r.owned = <char*>malloc(2 * _PIECE_PAIRS * itemsize + 4096 + 64)
        if r.owned == NULL:
            return CPE_ERR_NOMEM
        r.chunk[0] = _apart(r.owned, out)
        return CPE_OK
    # Rows whose bytes make whole 16-byte units (1, 2, 4, 8 or 16 of them).
    cdef Py_ssize_t unit = 16
    while unit > 1 and (r.row_bytes * (unit // 2)) % 16 == 0:
        unit //= 2
    if unit * r.row_bytes > 8 * _CHUNK_BYTES:  # wide rows that are not only pairs
        return CPE_OK  # (written in place: a chunk of them would not stay in L1)
    r.rows = min(max(unit, _CHUNK_BYTES // r.row_bytes // unit * unit), n_rows)
    cdef Py_ssize_t tables = 1 if sin_out == NULL else 2
    r.owned = <char*>malloc(tables * r.rows * r.row_bytes + 4096 + 64)
    if r.owned == NULL:
        return CPE_ERR_NOMEM
    r.chunk[0] = _apart(r.owned, out)
    r.chunk[1] = r.chunk[0] + r.rows * r.row_bytes
    return CPE_OK


cdef inline floating* _sink_row(const row_sink* r, floating* table, Py_ssize_t i,
                                Py_ssize_t width, int which) noexcept nogil:
    """Where row i of ``table`` (the output, which=0, or the sin table, 1) is built."""
    if r.owned == NULL or r.pieces:
        return table + i * width
    return <floating*>(r.chunk[which] + r.slot * r.row_bytes)


cdef inline void _sink_row_done(row_sink* r, floating* out, floating* sin_out,
                                Py_ssize_t i, Py_ssize_t last,
                                Py_ssize_t width) noexcept nogil:
    """Row i is built: stream the chunks when full, or at row ``last``."""
    if r.owned == NULL or r.pieces:
        return
    r.slot += 1
    if r.slot == r.rows or i == last:
        i -= r.slot - 1  # the first row in the chunks
        cpe_stream_bytes(<char*>(out + i * width), r.chunk[0], r.slot * r.row_bytes)
        if sin_out != NULL:
            cpe_stream_bytes(<char*>(sin_out + i * width), r.chunk[1], r.slot * r.row_bytes)
        r.slot = 0


cdef inline void _stream_pieces(const row_sink* r, floating* row, const double** chain,
                                int count, Py_ssize_t n_freq) noexcept nogil:
    """The interleaved row of a chain (see _store_chain) at ``row``, built and
    streamed a piece of pairs at a time through the sink's buffer."""
    cdef const double* rows[4]
    cdef Py_ssize_t j = 0, m
    cdef int k
    rows[0] = rows[1] = rows[2] = rows[3] = NULL
    while j < n_freq:
        m = min(_PIECE_PAIRS, n_freq - j)
        for k in range(count):
            rows[k] = chain[k] + j
        if floating is double:
            cpe_chain_interleaved_double(<double*>r.chunk[0], NULL, rows, count, m, n_freq)
        else:
            cpe_chain_interleaved_float(<float*>r.chunk[0], NULL, rows, count, m, n_freq)
        cpe_stream_bytes(<char*>(row + 2 * j), r.chunk[0], 2 * m * sizeof(floating))
        j += m


cdef inline void _sink_free(row_sink* r) noexcept nogil:
    """Fence the streamed stores (before anything else is written), then free."""
    if r.owned != NULL:
        cpe_stream_fence()
    free(r.owned)
    r.owned = NULL


cdef inline double* _line_start(double* p) noexcept nogil:
    # The first cache-line (64-byte) boundary at or after p, for buffers allocated
    # with 8 doubles to spare: rows that start on a line load without splitting
    # lines, which malloc's 16-byte alignment does not ensure.
    return <double*>((<uintptr_t>p + 63) & ~(<uintptr_t>63))


# ---- kernels ----

cdef inline bint _streaming(const void* out, Py_ssize_t rows, Py_ssize_t width,
                            size_t itemsize, const void* sin_out=NULL) noexcept nogil:
    """Whether ``rows`` rows at ``out`` (and as many at ``sin_out``, RoPE's sin
    table) are written with streaming stores: outputs of STREAM_BYTES and more
    whose memory is already mapped, or may be (see cpe_memory.h)."""
    cdef Py_ssize_t n_bytes = rows * width * <Py_ssize_t>itemsize
    if not (STREAM_ENABLED
            and n_bytes >= (STREAM_BYTES if sin_out == NULL else STREAM_BYTES // 2)):
        return False
    return cpe_mostly_mapped(out, n_bytes) != 0 and (sin_out == NULL
                                                     or cpe_mostly_mapped(sin_out, n_bytes) != 0)


def _streams(const unsigned char[::1] out):
    """Whether the kernels would write ``out`` (bytes, viewed as uint8) with
    streaming stores. For the tests."""
    return _streaming(&out[0] if out.shape[0] else NULL, out.shape[0] // 2, 2, 1)


cdef inline void _store_chain(floating* row, const double** chain, int count,
                              const columns* c, Py_ssize_t width) noexcept nogil:
    # The row of the sum of the angles of 1 to 4 pair rows, highest first (see
    # cpe_rows.h), in the layout ``c``: the store of every row.
    cdef Py_ssize_t j, n_freq = c.n_sin
    cdef floating* sines = row + c.sin_at
    if c.sin_step == 2:
        if floating is double:
            cpe_chain_interleaved_double(row, NULL, chain, count, c.n_cos, n_freq)
        else:
            cpe_chain_interleaved_float(row, NULL, chain, count, c.n_cos, n_freq)
    else:
        if floating is double:
            cpe_chain_blocked_double(sines, row + c.cos_at, chain, count, c.n_cos, n_freq)
        else:
            cpe_chain_blocked_float(sines, row + c.cos_at, chain, count, c.n_cos, n_freq)
    for j in range(c.n_cos, c.n_sin):
        sines[j * c.sin_step] = <floating>cpe_chain_sine(chain, count, j, n_freq)
    for j in range(c.zero_from, width):
        row[j] = 0


# ---- the one fill loop ----
# Every row of every request is made here, from the decomposition of cpe_fill.h:
# an integer position's row is the product of the rows of its high part H and of
# its digits, highest first (a zero digit, or no H, is the identity and skipped),
# and its negative has the sines negated; any other position's row is computed
# directly. A row is stored from its factors, a chain of one to four pair rows
# multiplied highest first as it is stored (position 0: the identity row (0, 1)):
# one store path for all rows, streamed or not. In a part of several rows the
# products of H and the upper digits are kept while they stay the same, so that
# consecutive positions cost one product each; a part of one row chains its
# factors without making those products. Either way every product is rounded in
# the same order: the same bits.

cdef inline const double* _ready_row(const cpe_levels* lv, int k, Py_ssize_t d,
                                     Py_ssize_t n_freq) noexcept nogil:
    # Level row (k, d) when the levels hold it ready, else NULL.
    cdef Py_ssize_t index = k * lv.radix + d
    if lv.rows != NULL and cpe_state_get(lv.state + index) == CPE_ROW_READY:
        return lv.rows + 2 * n_freq * index
    return NULL


cdef inline const double* _level_row(cpe_levels* lv, int k, Py_ssize_t d, double* spare,
                                     const double* w_hi, const double* w_lo,
                                     Py_ssize_t n_freq) noexcept nogil:
    """Level row (k, d): (sin, cos)(d * radix**k * w). Made once into the levels by
    the first caller that claims it; without levels, or while another thread is
    making it (or a thread that claimed it before a fork), made into ``spare``
    (level k's own scratch row): the same bits, with no wait. NULL if it needs
    ``spare`` and ``spare`` is NULL."""
    cdef Py_ssize_t index = k * lv.radix + d
    cdef double position = <double>(d << (lv.shift * k))
    cdef double* row
    cdef const double* ready = _ready_row(lv, k, d, n_freq)
    if ready != NULL:
        return ready
    if lv.rows != NULL and cpe_state_claim(lv.state + index):
        row = lv.rows + 2 * n_freq * index
        _sincos_row(row, position, w_hi, w_lo, n_freq)
        cpe_state_set(lv.state + index, CPE_ROW_READY)
        return row
    if spare != NULL:
        _sincos_row(spare, position, w_hi, w_lo, n_freq)
    return spare


cdef inline bint _angles_in_range(double largest_position, const double* w_hi,
                                  Py_ssize_t n_freq, double w_max) noexcept nogil:
    """Whether every |p * w_j| is at most CPE_ANGLE_LIMIT for |p| <= largest_position
    (NaN is out of range). ``w_max``: the largest |w_j| if the caller knows it
    (NaN if a w_j is NaN), or negative: then every frequency is read."""
    cdef Py_ssize_t j
    if w_max >= 0.0 or w_max != w_max:
        return largest_position * w_max <= CPE_ANGLE_LIMIT
    for j in range(n_freq):
        if not (largest_position * fabs(w_hi[j]) <= CPE_ANGLE_LIMIT):
            return False
    return True


cdef double largest_magnitude(const double* x, Py_ssize_t n) noexcept nogil:
    """The largest |x[i]| (0 for none; a NaN above infinity): the one reduction
    that checks positions, vectorized."""
    cdef double largest = 0.0
    cpe_largest_magnitude(x, n, &largest)
    return largest


cdef inline int _check_request(const double* positions, double start, Py_ssize_t n,
                               const double* w_hi, Py_ssize_t n_freq,
                               double w_max) noexcept nogil:
    """The positions (or the table start + i, i < n) checked: finite, a table's
    integers exact, every angle in range."""
    cdef double largest = 0.0
    if positions == NULL:
        if not (floor(start) == start and -9007199254740992.0 <= start
                and start + <double>n <= 9007199254740992.0):
            return CPE_ERR_ARGUMENT
        largest = max(fabs(start), fabs(start + <double>(n - 1))) if n else 0.0
    else:
        largest = largest_magnitude(positions, n)
        if not isfinite(largest):
            return CPE_ERR_ARGUMENT
    if n and not _angles_in_range(largest, w_hi, n_freq, w_max):
        return CPE_ERR_RANGE
    return CPE_OK


cdef int fill_check(const fill_request* r) noexcept nogil:
    """The request checked, before anything is allocated or written: its sizes,
    pointers and store, its axes and their levels' shape, and their positions
    (finite, a table's integers exact, every angle in range). A request that
    passes is filled by scratch_new and fill_part, which fail only for want of
    memory (scratch_new)."""
    cdef columns c
    cdef bint rope = _rope(r)
    if r.n < 0 or _columns(r.width, r.n_freq, CPE_LAYOUT_SIN_COS if rope else r.store,
                           &c) != CPE_OK:
        return CPE_ERR_ARGUMENT
    if not (isfinite(r.amplitude) and (rope or r.amplitude == 1.0)):
        return CPE_ERR_ARGUMENT
    if rope and (r.width != 2 * r.n_freq or (r.n and r.sin_out == NULL)):
        return CPE_ERR_ARGUMENT
    if r.half_at < 0 or not _columns_fit(r):
        return CPE_ERR_ARGUMENT
    if r.n and r.width > PY_SSIZE_T_MAX // _itemsize(r) // r.n:  # no memory is that large
        return CPE_ERR_ARGUMENT
    if not rope and not _whole_rows(r):  # (the encodings write whole rows)
        return CPE_ERR_ARGUMENT
    if r.n and r.width and r.out == NULL:
        return CPE_ERR_ARGUMENT
    cdef const fill_request* axes = r.axes if r.n_axes else r
    cdef int k, n_axes = r.n_axes if r.n_axes else 1
    cdef Py_ssize_t n_freq = 0
    if r.n_axes and not (rope and 2 <= r.n_axes <= FILL_MAX_AXES and r.axes != NULL):
        return CPE_ERR_ARGUMENT
    for k in range(n_axes):
        if not _axis_fits(&axes[k], r.n, r.n_axes != 0):
            return CPE_ERR_ARGUMENT
        n_freq += axes[k].n_freq
    if n_freq != r.n_freq:
        return CPE_ERR_ARGUMENT
    cdef int status
    for k in range(n_axes):
        status = _check_positions(&axes[k], r.n)
        if status != CPE_OK:
            return status
    return CPE_OK


cdef inline bint _axis_fits(const fill_request* axis, Py_ssize_t n,
                            bint one_of_several) noexcept nogil:
    # An axis' frequencies and levels: present when they are read, the levels of
    # the frequencies' shape; one of several axes has frequencies (at most a
    # table's, for the loop's scratch).
    cdef Py_ssize_t radix
    cdef int shift, n_levels
    if one_of_several and not 1 <= axis.n_freq <= PY_SSIZE_T_MAX // 64:
        return False
    if n and axis.n_freq and (axis.w_hi == NULL or axis.w_lo == NULL):
        return False
    cpe_level_shape(axis.n_freq, &radix, &shift, &n_levels)
    if n_levels > 8:  # the loop's arrays (prefix, upper)
        return False
    return axis.levels == NULL or (axis.levels.radix == radix and axis.levels.shift == shift
                                   and axis.levels.n_levels == n_levels
                                   and axis.levels.rows != NULL and axis.levels.state != NULL)


cdef inline int _check_positions(const fill_request* axis, Py_ssize_t n) noexcept nogil:
    # An axis' n positions: finite, a table's integers exact, every angle in range
    # (with frequencies of a caller's, every one finite).
    cdef int status = _check_request(axis.positions, axis.start, n, axis.w_hi, axis.n_freq,
                                     axis.w_max)
    cdef Py_ssize_t j
    if status == CPE_OK and n and axis.w_max < 0.0:  # a caller's frequencies (the C API)
        for j in range(axis.n_freq):
            if not isfinite(axis.w_lo[j]):
                return CPE_ERR_RANGE
    return status


cdef inline bint _whole_rows(const fill_request* r) noexcept nogil:
    # Rows whose columns are in the store's own order: what may be streamed, and
    # what the encodings' stores write.
    return r.columns == NULL and r.half_at == r.n_freq


cdef inline bint _columns_fit(const fill_request* r) noexcept nogil:
    # Every column RoPE's store writes lies within a row (see fill_request); the
    # encodings' stores write whole rows.
    cdef Py_ssize_t j, n = r.n_freq
    if n == 0 or not _rope(r):
        return True
    if r.columns == NULL:
        return r.half_at <= r.width - n if r.store == STORE_ROPE_HALF else True
    for j in range(2 * n if r.store == STORE_ROPE_HALF else n):
        if not 0 <= r.columns[j] < (r.width if r.store == STORE_ROPE_HALF else n):
            return False
    return True


cdef inline Py_ssize_t _itemsize(const fill_request* r) noexcept nogil:
    return 4 if r.float32 else 8


cdef inline char* _rows_at(void* table, const fill_request* r, Py_ssize_t first) noexcept nogil:
    # Row ``first`` of a table of the request (NULL stays NULL).
    if table == NULL:
        return NULL
    return <char*>table + first * r.width * _itemsize(r)


cdef inline int _axis_scratch_new(const fill_request* axis, Py_ssize_t count,
                                  Py_ssize_t served, axis_scratch* s) noexcept nogil:
    # The scratch of an axis' walk of parts of ``count`` rows (see scratch_new):
    # CPE_OK, or CPE_ERR_NOMEM.
    cpe_level_shape(axis.n_freq, &s.own.radix, &s.own.shift, &s.own.n_levels)
    cdef Py_ssize_t row_doubles = 2 * axis.n_freq
    cdef Py_ssize_t radix = s.own.radix
    cdef int n_levels = s.own.n_levels
    # Scratch, each a pair row on a cache line: the identity (made by a part when
    # it meets position 0), the row of H, one for a direct or negated row, the
    # products of the digits above level k (k >= 1; one row, a part of one row),
    # and a spare row per level (see _level_row).
    cdef Py_ssize_t scratch_rows = 3 + _product_rows(n_levels, count > 1) + n_levels
    if row_doubles > (PY_SSIZE_T_MAX // 8 - 8) // scratch_rows:
        return CPE_ERR_NOMEM
    s.owned = <double*>malloc(sizeof(double) * (scratch_rows * row_doubles + 8))
    # Without the caller's levels, a table of their own when the scratch serves rows
    # enough to reuse them (else, or if there is no memory for one, every level row
    # is made where it is needed: the same bits). The table is used only when both
    # of its parts were allocated (own.rows stays NULL otherwise).
    if axis.levels == NULL and served >= radix and row_doubles <= (PY_SSIZE_T_MAX // 8 - 8) // (
            n_levels * radix):
        s.own_rows = <double*>malloc(sizeof(double) * (n_levels * radix * row_doubles + 8))
        s.own.state = <char*>calloc(n_levels * radix, 1)
        if s.own_rows != NULL and s.own.state != NULL:
            s.own.rows = _line_start(s.own_rows)
    return CPE_OK if s.owned != NULL else CPE_ERR_NOMEM


cdef int scratch_new(const fill_request* r, Py_ssize_t first, Py_ssize_t count,
                     Py_ssize_t served, fill_scratch* s) noexcept nogil:
    """The scratch memory of the rows ``first`` to ``first + count`` of a checked
    request, which will fill ``served`` rows in all (``count``, or more: the
    blocks of an apply request): CPE_OK, or CPE_ERR_NOMEM. scratch_free frees
    it, in either case (and again: it leaves nothing to free)."""
    cdef int k
    s.n_axes = 0
    s.owned = NULL
    s.sink.owned = NULL
    if count == 0 or r.width == 0 or r.n_freq == 0:
        return CPE_OK
    cdef const fill_request* axes = r.axes if r.n_axes else r
    for k in range(r.n_axes if r.n_axes else 1):
        s.axes[k].owned = s.axes[k].own_rows = s.axes[k].own.rows = NULL
        s.axes[k].own.state = NULL
        s.n_axes = k + 1
        if _axis_scratch_new(&axes[k], count, served, &s.axes[k]) != CPE_OK:
            scratch_free(s)
            return CPE_ERR_NOMEM
    if r.n_axes:  # the pair row of all of a row's angles
        s.owned = <double*>malloc(sizeof(double) * (2 * r.n_freq + 8))
        if s.owned == NULL:
            scratch_free(s)
            return CPE_ERR_NOMEM
    cdef bint rope = _rope(r)
    if _sink_init(&s.sink, _rows_at(r.out, r, first),
                  _rows_at(r.sin_out, r, first) if rope else NULL, count, r.width,
                  _itemsize(r), r.store == CPE_LAYOUT_INTERLEAVED and 2 * r.n_freq == r.width,
                  _whole_rows(r)) != CPE_OK:
        scratch_free(s)
        return CPE_ERR_NOMEM
    return CPE_OK


cdef void scratch_free(fill_scratch* s) noexcept nogil:
    """The sink's buffer (fenced, see _sink_free), then the loop's scratch and tables."""
    cdef int k
    _sink_free(&s.sink)
    for k in range(s.n_axes):
        free(s.axes[k].owned)
        free(s.axes[k].own_rows)
        free(s.axes[k].own.state)
    s.n_axes = 0
    free(s.owned)
    s.owned = NULL


cdef inline int _fill_at(const fill_request* r, fill_scratch* s, char* out, char* sin_out,
                         Py_ssize_t first, Py_ssize_t count) noexcept nogil:
    # The rows of positions first .. first + count at ``out`` (and ``sin_out``):
    # CPE_OK, or CPE_ERR_NOMEM with nothing written when the lazy scratch of one
    # row (see fill) could not allocate a row it needed.
    cdef int status
    if r.float32:
        status = _fill_rows(<float*>out, <float*>sin_out, first, count, r, s)
    else:
        status = _fill_rows(<double*>out, <double*>sin_out, first, count, r, s)
    if s.sink.owned != NULL:  # the streamed stores, fenced by the thread that made them
        cpe_stream_fence()
    return status


cdef void fill_part(const fill_request* r, fill_scratch* s, Py_ssize_t first,
                    Py_ssize_t count) noexcept nogil:
    """Rows ``first`` to ``first + count`` of a checked request, with the scratch
    scratch_new made for them."""
    _fill_at(r, s, _rows_at(r.out, r, first), _rows_at(r.sin_out, r, first), first, count)


cdef int fill(const fill_request* r) noexcept nogil:
    """A whole request on the calling thread: CPE_OK, or the error of fill_check or
    scratch_new with nothing written."""
    cdef int status = fill_check(r)
    if status != CPE_OK or r.n == 0 or r.width == 0:
        return status
    cdef fill_scratch s
    if r.n == 1 and r.n_axes == 0 and r.n_freq and not _streaming(
            r.out, 1, r.width, _itemsize(r), r.sin_out if _rope(r) else NULL):
        # One row: its walk allocates only the scratch rows it needs (none when
        # its digit rows are kept and its position is a positive integer of at
        # most four digits: a decoding step, say). Nothing is written before
        # they are all there.
        _lazy_scratch(r, &s)
        return _fill_at(r, &s, <char*>r.out, <char*>r.sin_out, 0, 1)
    status = scratch_new(r, 0, r.n, r.n, &s)
    if status == CPE_OK:
        fill_part(r, &s, 0, r.n)
    scratch_free(&s)
    return status


cdef inline bint _rope(const fill_request* r) noexcept nogil:
    return r.store == STORE_ROPE_HALF or r.store == STORE_ROPE_INTERLEAVED


cdef inline void _lazy_scratch(const fill_request* r, fill_scratch* s) noexcept nogil:
    # The scratch of one row of one axis, stored in place, without rows: its walk
    # allocates them (see _walk_start); scratch_free has nothing to free.
    s.n_axes = 0
    s.owned = NULL
    _sink_init(&s.sink, r.out, NULL, 1, r.width, _itemsize(r), False, False)  # (in place)
    s.axes[0].owned = s.axes[0].own_rows = s.axes[0].own.rows = NULL
    s.axes[0].own.state = NULL
    cpe_level_shape(r.n_freq, &s.axes[0].own.radix, &s.axes[0].own.shift,
                    &s.axes[0].own.n_levels)


cdef inline void _store_row(const fill_request* r, row_sink* sink, const columns* c,
                            floating* out, floating* sin_out, Py_ssize_t i, Py_ssize_t last,
                            const double** chain, int count) noexcept nogil:
    """Row i of the part at ``out`` (and ``sin_out``), the sum of the angles of a
    chain of 1 to 4 pair rows, stored as the request's store says: the one place
    a store is chosen."""
    cdef floating* row = _sink_row(sink, out, i, r.width, 0)
    cdef bint rope = _rope(r)
    if sink.pieces:
        _stream_pieces(sink, row, chain, count, r.n_freq)
    elif rope:
        _store_rope_chain(row, _sink_row(sink, sin_out, i, r.width, 1), chain, count, r)
    else:
        _store_chain(row, chain, count, c, r.width)
    _sink_row_done(sink, out, sin_out if rope else NULL, i, last, r.width)


cdef struct walk:
    # The walk of one axis' positions in a part (see the one fill loop).
    const fill_request* axis
    cpe_levels* levels
    Py_ssize_t row_doubles
    # its scratch rows: made in the part's scratch, or (lazy) allocated the first
    # time they are needed and freed by _walk_free
    double* identity
    double* high_row
    double* direct
    double* products     # level k's at products + (k - 1) rows (one row unless keep)
    double* spare[8]     # level k's
    bint lazy
    void* owned[12]
    int n_owned
    long long prefix[8]  # keep: the last row's m >> (shift * k), -1 once H changes
    const double* upper[9]  # upper[k]: product of H and the digits >= k (NULL: 1)
    long long current_high
    bint keep            # whether the products of the upper digits are kept
    bint made_identity


cdef inline Py_ssize_t _product_rows(int n_levels, bint keep) noexcept nogil:
    # The product rows of a walk: of the upper digits when it keeps them, else
    # the one a full chain is folded into.
    return n_levels - 1 if keep else 1


cdef inline void _walk_start(walk* w, const fill_request* axis, axis_scratch* s,
                             bint keep) noexcept nogil:
    # A walk whose rows are the scratch's, or allocated as needed when it has
    # none (a part of one row: see fill).
    cdef int k, n_levels
    w.axis = axis
    w.levels = axis.levels if axis.levels != NULL else &s.own
    w.row_doubles = 2 * axis.n_freq
    n_levels = w.levels.n_levels
    w.identity = w.high_row = w.direct = w.products = NULL
    w.lazy = s.owned == NULL
    w.n_owned = 0
    if w.lazy:
        for k in range(8):  # (a fixed count: a few stores, not a call)
            w.spare[k] = NULL
    else:
        for k in range(n_levels):
            w.spare[k] = _line_start(s.owned) + k * w.row_doubles
        w.products = w.spare[0] + n_levels * w.row_doubles
        w.direct = w.products + _product_rows(n_levels, keep) * w.row_doubles
        w.high_row = w.direct + w.row_doubles
        w.identity = w.high_row + w.row_doubles
    # No high part yet: the first integer position resets the prefixes (_walk_row).
    w.current_high = -1
    w.keep = keep
    w.made_identity = False


cdef inline double* _row(walk* w, double** slot) noexcept nogil:
    """The scratch row at ``slot``, allocated now by a lazy walk; NULL if it could
    not be."""
    cdef void* p
    if slot[0] == NULL and w.lazy and w.n_owned < 12:
        p = malloc(sizeof(double) * (w.row_doubles + 8))
        if p != NULL:
            w.owned[w.n_owned] = p
            w.n_owned += 1
            slot[0] = _line_start(<double*>p)
    return slot[0]


cdef inline void _walk_free(walk* w) noexcept nogil:
    cdef int k
    for k in range(w.n_owned):
        free(w.owned[k])
    w.n_owned = 0


cdef inline const double* _digit_row(walk* w, int k, Py_ssize_t d) noexcept nogil:
    # Level row (k, d) (see _level_row); NULL if a row it needed could not be
    # allocated. A row the levels hold ready is read here, any other made apart
    # (_make_digit_row): this stays small enough to be inlined.
    cdef const double* row = _ready_row(w.levels, k, d, w.axis.n_freq)
    return row if row != NULL else _make_digit_row(w, k, d)


cdef const double* _make_digit_row(walk* w, int k, Py_ssize_t d) noexcept nogil:
    # Level row (k, d), made in level k's spare row when it must be.
    cdef const double* row = _level_row(w.levels, k, d, w.spare[k], w.axis.w_hi,
                                        w.axis.w_lo, w.axis.n_freq)
    if row == NULL and _row(w, &w.spare[k]) != NULL:
        row = _level_row(w.levels, k, d, w.spare[k], w.axis.w_hi, w.axis.w_lo,
                         w.axis.n_freq)
    return row


cdef inline double _position(const fill_request* axis, Py_ssize_t i) noexcept nogil:
    return axis.positions[i] if axis.positions != NULL else axis.start + <double>i


cdef inline int _walk_row(walk* w, double p, const double** chain) noexcept nogil:
    """The factors of the row of ``p``, highest first, into ``chain``: their count;
    -1 if a lazy walk could not allocate a row it needs (one row: see fill)."""
    cdef cpe_levels* levels = w.levels
    cdef Py_ssize_t radix = levels.radix, n_freq = w.axis.n_freq, d, j
    cdef int k, count = 0, shift = levels.shift, n_levels = levels.n_levels
    cdef long long m, high, key
    cdef const double* w_hi = w.axis.w_hi
    cdef const double* w_lo = w.axis.w_lo
    # An integer below 2**62 in magnitude is its own truncation (the bound first, so
    # that the cast is defined; NaN fails it).
    if not (fabs(p) < 4611686018427387904.0 and <double><long long>p == p):  # 2**62
        if _row(w, &w.direct) == NULL:
            return -1
        _sincos_row(w.direct, p, w_hi, w_lo, n_freq)
        chain[0] = w.direct
        return 1
    m = <long long>fabs(p)
    high = m >> (shift * n_levels)
    if high != w.current_high:
        if high and _row(w, &w.high_row) == NULL:
            return -1
        w.current_high = high
        if high:
            _sincos_row(w.high_row, <double>(high << (shift * n_levels)), w_hi, w_lo, n_freq)
        w.upper[n_levels] = w.high_row if high else NULL
        if w.keep:  # (only a keeping walk reads them)
            for k in range(8):  # (a fixed count: a few stores, not a call)
                w.prefix[k] = -1
    if w.keep:  # the digits above level 0 that changed since the last row
        for k in range(n_levels - 1, 0, -1):
            key = m >> (shift * k)
            if key != w.prefix[k]:
                w.prefix[k] = key
                d = key & (radix - 1)
                if d == 0:
                    w.upper[k] = w.upper[k + 1]
                elif w.upper[k + 1] == NULL:
                    w.upper[k] = _digit_row(w, k, d)
                else:
                    _product_pairs(w.products + (k - 1) * w.row_doubles, _digit_row(w, k, d),
                                   w.upper[k + 1], n_freq)
                    w.upper[k] = w.products + (k - 1) * w.row_doubles
        if w.upper[1] != NULL:
            chain[0] = w.upper[1]
            count = 1
    else:  # one row: its factors in one chain, without kept products
        if high:
            chain[0] = w.high_row
            count = 1
        for k in range(n_levels - 1, 0, -1):
            d = (m >> (shift * k)) & (radix - 1)
            if d:
                count = _push(w, chain, count, _digit_row(w, k, d))
                if count < 0:
                    return -1
    d = m & (radix - 1)
    if d:
        count = _push(w, chain, count, _digit_row(w, 0, d))
        if count < 0:
            return -1
    if p < 0:  # the row of |p|, its sines negated in double
        if _row(w, &w.direct) == NULL:
            return -1
        _product_chain(w.direct, chain, count, n_freq)
        for j in range(n_freq):
            w.direct[j] = -w.direct[j]
        chain[0] = w.direct
        return 1
    if count == 0:  # position 0
        if _row(w, &w.identity) == NULL:
            return -1
        if not w.made_identity:
            for j in range(n_freq):
                w.identity[j] = 0.0
                w.identity[n_freq + j] = 1.0
            w.made_identity = True
        chain[0] = w.identity
        return 1
    return count


cdef inline int _push(walk* w, const double** chain, int count,
                      const double* row) noexcept nogil:
    # ``row`` appended to a chain of ``count`` rows; a full chain is first made
    # into one row at the walk's first product row (the sums of the angles taken
    # in the same order: the same bits). A row has at most five factors (H and
    # four digits), so a chain is folded at most once and that row is never in
    # it. -1 if ``row`` is NULL, or a fold has no row to go to (see _walk_row).
    if row == NULL or (count == 4 and _row(w, &w.products) == NULL):
        return -1
    if count == 4:
        _product_chain(w.products, chain, 4, w.axis.n_freq)
        chain[0] = w.products
        count = 1
    chain[count] = row
    return count + 1


cdef int _fill_rows(floating* out, floating* sin_out, Py_ssize_t first, Py_ssize_t n,
                    const fill_request* r, fill_scratch* s) noexcept nogil:
    # The loop of one part: its rows at out (and sin_out), of the positions
    # first .. first + n. With several axes, each axis' pair row goes to its
    # frequencies of a row of all of them, made again only when its position
    # changes (a row depends on its position alone), then stored as one.
    # CPE_OK, or CPE_ERR_NOMEM with nothing written (see _fill_at).
    cdef Py_ssize_t i, j, n_freq = r.n_freq, width = r.width
    if n == 0 or width == 0:
        return CPE_OK
    if n_freq == 0:
        for i in range(n):
            for j in range(width):
                out[i * width + j] = 0
        return CPE_OK
    cdef bint rope = _rope(r)
    cdef columns c
    _columns(width, n_freq, CPE_LAYOUT_SIN_COS if rope else r.store, &c)
    cdef const fill_request* axes = r.axes if r.n_axes else r
    cdef int k, count, n_axes = r.n_axes if r.n_axes else 1
    cdef walk walks[8]
    cdef double last[8]
    cdef Py_ssize_t at[8]  # each axis' first frequency
    cdef const double* chain[4]  # the factors of a row, highest first
    chain[0] = chain[1] = chain[2] = chain[3] = NULL
    j = 0
    for k in range(n_axes):
        _walk_start(&walks[k], &axes[k], &s.axes[k], n > 1)
        at[k] = j
        j += axes[k].n_freq
    cdef double* row = _line_start(s.owned) if n_axes > 1 else NULL
    cdef double p
    for i in range(n):
        if n_axes == 1:
            count = _walk_row(&walks[0], _position(axes, first + i), chain)
            if count < 0:  # (a lazy walk, of one row: nothing is written yet)
                _walk_free(&walks[0])
                return CPE_ERR_NOMEM
        else:
            for k in range(n_axes):
                p = _position(&axes[k], first + i)
                if i == 0 or p != last[k]:
                    last[k] = p
                    count = _walk_row(&walks[k], p, chain)
                    cpe_chain_blocked_double(row + at[k], row + n_freq + at[k], chain, count,
                                             axes[k].n_freq, axes[k].n_freq)
            chain[0] = row
            count = 1
        _store_row(r, &s.sink, &c, out, sin_out, i, n - 1, chain, count)
    for k in range(n_axes):
        _walk_free(&walks[k])
    return CPE_OK


# ---- encodings applied: a block of rows at a time, then the caller's rows ----
# The values of a block of positions are made by the one fill loop into a small
# table: for RoPE, rows that hold position i's n_freq cosines, then its n_freq
# sines (the float64 values of RoPE's tables, the attention factor included:
# RoPE's "half" store with both copies of a value in one place); for an
# encoding added, its rows in their layout. The table stays in the first-level
# cache while every row of those positions is rotated by it or added to: the
# caller's memory is read and written once, and every value is the one
# rope_cos_sin (or positional_encoding) gives.

# The first-level cache a block is sized for, as its rows are visited by head:
# its table, the rows of one head (batch entry) of the block being changed and
# those of the next head, prefetched, fit in it, with room left for the fill
# loop's own rows (40 of 48 KiB). Each head reads the whole table again; when
# that no longer fits, the table comes back from the second-level cache for
# every head. (Visited by position, each row of the table is read once for all
# heads, and the size matters little.)
cdef Py_ssize_t _BLOCK_CACHE_BYTES = 40 * 1024


cdef inline fill_request _block(const apply_request* a, const apply_scratch* s) noexcept nogil:
    # The angles' request into the block's table.
    cdef fill_request block = a.angles[0]
    block.out = s.table
    block.sin_out = NULL if a.add else s.table + block.n_freq
    return block


cdef int apply_check(const apply_request* a) noexcept nogil:
    """The request checked before anything is allocated or written: its angles as
    fill_check checks a request (a rotation's columns among the cosines of a
    row; the block's table is the parts' own), and the targets' sizes. A request
    that passes is applied by apply_scratch_new and apply_part, which fail only
    for want of memory (apply_scratch_new)."""
    cdef double block = 0.0  # (a valid address: the tables' pointers are checked as set)
    cdef Py_ssize_t t, j, row, n
    cdef const rotation* target
    if (a.n < 0 or a.angles == NULL or a.n_targets < 0
            or (a.n_targets and a.targets == NULL) or not isfinite(a.x_scale)):
        return CPE_ERR_ARGUMENT
    cdef fill_request angles = a.angles[0]
    row, n = angles.width, angles.n_freq
    if angles.float32 or angles.n != a.n or not 0 <= row <= PY_SSIZE_T_MAX // 64:
        return CPE_ERR_ARGUMENT
    if a.add:  # an encoding's whole rows, as fill_check checks them
        if angles.store > CPE_LAYOUT_COS_SIN or angles.n_axes or a.inverse:
            return CPE_ERR_ARGUMENT
    else:
        if angles.store != STORE_ROPE_HALF or angles.half_at != 0 or row != 2 * n:
            return CPE_ERR_ARGUMENT
        for j in range(n if angles.columns != NULL else 0):  # pairs, each once
            if (not 0 <= angles.columns[j] < n
                    or angles.columns[n + j] != angles.columns[j]):
                return CPE_ERR_ARGUMENT
    for t in range(a.n_targets):
        target = &a.targets[t]
        if (target.n_heads < 0 or target.width < row or (a.add and target.width != row)
                or not ROW_FLOAT64 <= target.dtype <= ROW_BFLOAT16):
            return CPE_ERR_ARGUMENT
        if a.n and target.n_heads and (target.x == NULL or target.y == NULL
                                       or target.x_rows == NULL or target.y_rows == NULL
                                       or target.x_heads == NULL or target.y_heads == NULL):
            return CPE_ERR_ARGUMENT
    angles.out = &block
    angles.sin_out = NULL if a.add else &block
    return fill_check(&angles)


cdef int apply_scratch_new(const apply_request* a, Py_ssize_t count,
                           apply_scratch* s) noexcept nogil:
    """The scratch of a part of ``count`` positions of a checked request: CPE_OK,
    or CPE_ERR_NOMEM. apply_scratch_free frees it, in either case."""
    cdef Py_ssize_t row = a.angles.width
    s.owned = s.table = NULL
    s.fill.n_axes = 0
    s.fill.owned = NULL
    s.fill.sink.owned = NULL
    cdef Py_ssize_t t, widest = 0  # a target's row, in bytes
    for t in range(a.n_targets):
        widest = max(widest, a.targets[t].width * _row_itemsize(&a.targets[t]))
    s.rows = min(count, min(64, max(1, _BLOCK_CACHE_BYTES // max(1, 8 * row + 2 * widest))))
    if count == 0 or row == 0:
        return CPE_OK
    s.owned = <double*>malloc(sizeof(double) * (s.rows * row + 8))
    if s.owned == NULL:
        return CPE_ERR_NOMEM
    s.table = _line_start(s.owned)
    cdef fill_request block = _block(a, s)  # (small: built in place, never streamed)
    cdef int status = scratch_new(&block, 0, s.rows, count, &s.fill)
    if status != CPE_OK:
        apply_scratch_free(s)
    return status


cdef void narrow(const double* x, uint16_t* out, Py_ssize_t n, bint bfloat16) noexcept nogil:
    """Each ``x[i]``, ``i < n``, rounded once to the nearest bfloat16 or float16
    (the bits of the rotations' and additions' stores, see cpe_store_bf16 and
    cpe_store_f16)."""
    if bfloat16:
        cpe_narrow_cpe_bf16(x, <cpe_bf16*>out, n)
    else:
        cpe_narrow_cpe_f16(x, <cpe_f16*>out, n)


cdef void apply_scratch_free(apply_scratch* s) noexcept nogil:
    scratch_free(&s.fill)
    free(s.owned)
    s.owned = s.table = NULL


cdef void apply_part(const apply_request* a, apply_scratch* s, Py_ssize_t first,
                     Py_ssize_t count) noexcept nogil:
    """The rows of positions ``first`` to ``first + count`` of a checked request,
    with the scratch apply_scratch_new made for them."""
    cdef Py_ssize_t i = 0, m, j, row, n = a.angles.n_freq
    cdef fill_request block = _block(a, s)
    while i < count:
        m = min(s.rows, count - i) if a.angles.width else count - i
        if s.table != NULL:
            _fill_at(&block, &s.fill, <char*>block.out, <char*>block.sin_out, first + i, m)
        if a.inverse:  # the angle's negative: its sines negated (exact)
            for row in range(m):
                for j in range(n):
                    s.table[(2 * row + 1) * n + j] = -s.table[(2 * row + 1) * n + j]
        _rotate_block(a, s, first + i, m, first + count)
        i += m


cdef inline void _rotate_block(const apply_request* a, const apply_scratch* s,
                               Py_ssize_t first, Py_ssize_t count,
                               Py_ssize_t end) noexcept nogil:
    # Every target's rows of the positions first .. first + count, whose angles
    # are the block's rows 0 .. count (of a part that ends at position ``end``).
    # A row soon rotated is prefetched: the rows of many heads are too many
    # streams for the hardware's prefetcher to follow. The last rows of a block
    # prefetch the next block's first ones, which then arrive while its angles
    # are made. (Written out here: a compiler may drop calls to a function that
    # only prefetches.)
    cdef Py_ssize_t t, i, h, itemsize, ahead, head
    cdef const rotation* target
    for t in range(a.n_targets):
        target = &a.targets[t]
        itemsize = _row_itemsize(target)
        if target.heads_inner:
            for i in range(count):
                ahead = first + i + 1  # the next position's rows
                for h in range(target.n_heads):
                    if ahead < end:
                        cpe_prefetch_row(target.x + target.x_rows[ahead] + target.x_heads[h],
                                         target.y + target.y_rows[ahead] + target.y_heads[h],
                                         target.width * itemsize)
                    _rotate_row(a, target, s, first, i, h)
        else:
            for h in range(target.n_heads):
                for i in range(count):
                    # the next head's row; after the last head, the next block's
                    ahead, head = first + i, h + 1
                    if head == target.n_heads:
                        ahead, head = first + count + i, 0
                    if ahead < end:
                        cpe_prefetch_row(target.x + target.x_rows[ahead] + target.x_heads[head],
                                         target.y + target.y_rows[ahead] + target.y_heads[head],
                                         target.width * itemsize)
                    _rotate_row(a, target, s, first, i, h)


cdef inline Py_ssize_t _row_itemsize(const rotation* target) noexcept nogil:
    if target.dtype == ROW_FLOAT64:
        return 8
    return 4 if target.dtype == ROW_FLOAT32 else 2


cdef inline void _rotate_row(const apply_request* a, const rotation* target,
                             const apply_scratch* s, Py_ssize_t first, Py_ssize_t i,
                             Py_ssize_t h) noexcept nogil:
    # Row h of position first + i, its values those of the block's row i: rotated
    # by them, or added to them.
    cdef char* y = target.y + target.y_rows[first + i] + target.y_heads[h]
    cdef const char* x = target.x + target.x_rows[first + i] + target.x_heads[h]
    cdef Py_ssize_t n = a.angles.n_freq, row = a.angles.width
    if x != y:
        memcpy(y, x, target.width * _row_itemsize(target))
    if row == 0:
        return
    cdef const double* c = s.table + i * row
    cdef const double* sn = c + n
    cdef int dtype = target.dtype
    if a.add:
        if dtype == ROW_FLOAT64:
            cpe_add_row_double(<double*>y, c, a.x_scale, row)
        elif dtype == ROW_FLOAT32:
            cpe_add_row_float(<float*>y, c, a.x_scale, row)
        elif dtype == ROW_FLOAT16:
            cpe_add_row_cpe_f16(<cpe_f16*>y, c, a.x_scale, row)
        else:
            cpe_add_row_cpe_bf16(<cpe_bf16*>y, c, a.x_scale, row)
    elif a.interleaved:
        if dtype == ROW_FLOAT64:
            cpe_rotate_interleaved_double(<double*>y, NULL, c, sn, n)
        elif dtype == ROW_FLOAT32:
            cpe_rotate_interleaved_float(<float*>y, NULL, c, sn, n)
        elif dtype == ROW_FLOAT16:
            cpe_rotate_interleaved_cpe_f16(<cpe_f16*>y, NULL, c, sn, n)
        else:
            cpe_rotate_interleaved_cpe_bf16(<cpe_bf16*>y, NULL, c, sn, n)
    elif dtype == ROW_FLOAT64:
        cpe_rotate_half_double(<double*>y, <double*>y + n, c, sn, n)
    elif dtype == ROW_FLOAT32:
        cpe_rotate_half_float(<float*>y, <float*>y + n, c, sn, n)
    elif dtype == ROW_FLOAT16:
        cpe_rotate_half_cpe_f16(<cpe_f16*>y, <cpe_f16*>y + n, c, sn, n)
    else:
        cpe_rotate_half_cpe_bf16(<cpe_bf16*>y, <cpe_bf16*>y + n, c, sn, n)
