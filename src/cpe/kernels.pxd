# cython: language_level=3
"""C-level API of cpe, for ``cimport`` from other Cython packages.

Every function here is ``noexcept nogil``, takes raw pointers into buffers the
caller owns, never allocates per element and never raises. They return a status
code: ``CPE_OK`` (0), ``CPE_ERR_ARGUMENT`` (an argument is invalid, such as a
non-finite position, a negative count or a NULL pointer where values are to be
read or written; nothing was written), ``CPE_ERR_NOMEM`` (scratch memory could
not be allocated; nothing was written) or ``CPE_ERR_RANGE`` (some
``|position * w_j|`` exceeds ``CPE_ANGLE_LIMIT`` = 2**53, beyond which the
accuracy bound does not hold, or is NaN; nothing was written).
``frequencies`` returns ``CPE_ERR_RANGE`` when a frequency is not finite (its
output then holds no usable values).

Preconditions the functions cannot check, on the caller:

* every output pointer addresses at least the documented number of values
  (``n * width`` for an encoding, ``n * head_dim`` for each RoPE table), suitably
  aligned for its type; pointers may be NULL only when that number is 0;
* ``w_hi`` and ``w_lo`` hold ``n_freq`` values made by :c:func:`frequencies`
  (finite and monotone in ``j``: the range check reads the first and last);
* outputs do not overlap each other, the positions or the frequencies, and no
  other thread writes the inputs during the call (a position is read more than
  once).

The encoding (see the README for the conventions) is described by

* ``width``   -- the number of columns ``D`` of each output row;
* ``n_freq``  -- the number of frequencies, ``1 <= 2 * n_freq <= width + 1``;
* ``w_hi``, ``w_lo`` -- the frequencies as double-doubles ``w_j = w_hi[j] + w_lo[j]``,
  filled by :c:func:`frequencies`;
* ``layout``  -- which column holds ``sin(p w_j)`` and ``cos(p w_j)``:
  ``CPE_LAYOUT_INTERLEAVED`` (sin at ``2j``, cos at ``2j + 1``),
  ``CPE_LAYOUT_SIN_COS`` (all sines, then all cosines) or
  ``CPE_LAYOUT_COS_SIN`` (all cosines, then all sines).

Each row holds ``n_sin = n_freq`` sines, ``n_cos = min(n_freq, width - n_freq)``
cosines (the frequencies ``j < n_cos``) and zeros in the columns from
``n_sin + n_cos`` on.

Signatures (stable; a test snapshots them)::

    int frequencies(double* w_hi, double* w_lo, Py_ssize_t n_freq,
                    double base, double exponent_den, double scale)
    int fill_positions_f64(double* out, const double* positions, Py_ssize_t n_positions,
                           Py_ssize_t width, const double* w_hi, const double* w_lo,
                           Py_ssize_t n_freq, int layout)
    int fill_positions_f32(float* out, ...same...)
    int fill_table_f64(double* out, double start, Py_ssize_t n_rows,
                       Py_ssize_t width, const double* w_hi, const double* w_lo,
                       Py_ssize_t n_freq, int layout)
    int fill_table_f32(float* out, ...same...)
    int sincos_row(double* pair_row, double position, const double* w_hi,
                   const double* w_lo, Py_ssize_t n_freq)
    int digit_levels(double* levels, Py_ssize_t radix, Py_ssize_t n_levels,
                     const double* w_hi, const double* w_lo, Py_ssize_t n_freq)
    int fill_positions_levels_f64(double* out, const double* positions,
                                  Py_ssize_t n_positions, Py_ssize_t width,
                                  const double* w_hi, const double* w_lo, Py_ssize_t n_freq,
                                  int layout, const double* levels, Py_ssize_t radix,
                                  Py_ssize_t n_levels)
    int fill_positions_levels_f32(float* out, ...same...)
    int fill_table_levels_f64(double* out, double start, Py_ssize_t n_rows,
                              Py_ssize_t width, const double* w_hi, const double* w_lo,
                              Py_ssize_t n_freq, int layout, const double* levels,
                              Py_ssize_t radix, Py_ssize_t n_levels)
    int fill_table_levels_f32(float* out, ...same...)
    int fill_angle_sum_f64(double* out, Py_ssize_t width, Py_ssize_t n_freq, int layout,
                           const double* const* pair_rows, Py_ssize_t count, bint negate)
    int fill_angle_sum_f32(float* out, ...same...)
    int fill_rope_table_f64(double* cos_out, double* sin_out, double start,
                            Py_ssize_t n_rows, Py_ssize_t head_dim, const double* w_hi,
                            const double* w_lo, bint interleaved, const double* levels,
                            Py_ssize_t radix, Py_ssize_t n_levels)
    int fill_rope_table_f32(float* cos_out, float* sin_out, ...same...)
    int fill_rope_positions_f64(double* cos_out, double* sin_out, const double* positions,
                                Py_ssize_t n_positions, Py_ssize_t head_dim,
                                const double* w_hi, const double* w_lo, bint interleaved,
                                const double* levels, Py_ssize_t radix, Py_ssize_t n_levels)
    int fill_rope_positions_f32(float* cos_out, float* sin_out, ...same...)

A "pair row" is ``n_freq`` sines followed by ``n_freq`` cosines. Many positions
are built from a few pair rows each by angle addition. ``digit_levels`` makes,
once, the position-independent rows ``(sin, cos)(d * radix**k * w)`` for
``d < radix`` and ``k < n_levels`` (``n_levels * radix * 2 * n_freq`` doubles,
level by level); the ``*_levels_*`` functions then compute sines for no integer
position with ``|p| < radix**n_levels`` and for only ``ceil(n / radix**2)``
rows of a table.
``n_levels >= 2`` and ``radix**n_levels <= 2**40``. The plain functions make
what they need on every call.
"""

cdef enum:
    CPE_OK = 0
    CPE_ERR_ARGUMENT = -1
    CPE_ERR_NOMEM = -2
    CPE_ERR_RANGE = -3

cdef extern from *:
    """
    #define CPE_ANGLE_LIMIT 9007199254740992.0
    """
    # The largest |position * frequency| accepted: 2**53.
    const double CPE_ANGLE_LIMIT

cdef enum:
    CPE_LAYOUT_INTERLEAVED = 0
    CPE_LAYOUT_SIN_COS = 1
    CPE_LAYOUT_COS_SIN = 2

# w_j = scale * base ** (-j / exponent_den) for j < n_freq, to about 2**-100 relative.
# The paper's frequencies are exponent_den = width / 2.
cdef int frequencies(double* w_hi, double* w_lo, Py_ssize_t n_freq,
                     double base, double exponent_den, double scale) noexcept nogil

# Row i of out (C order, rows of `width`) encodes position positions[i].
cdef int fill_positions_f64(double* out, const double* positions, Py_ssize_t n_positions,
                            Py_ssize_t width, const double* w_hi, const double* w_lo,
                            Py_ssize_t n_freq, int layout) noexcept nogil
cdef int fill_positions_f32(float* out, const double* positions, Py_ssize_t n_positions,
                            Py_ssize_t width, const double* w_hi, const double* w_lo,
                            Py_ssize_t n_freq, int layout) noexcept nogil

# Row i of out encodes position start + i; start and start + n_rows must be
# integers of magnitude <= 2**53 (so that every position is exact).
cdef int fill_table_f64(double* out, double start, Py_ssize_t n_rows,
                        Py_ssize_t width, const double* w_hi, const double* w_lo,
                        Py_ssize_t n_freq, int layout) noexcept nogil
cdef int fill_table_f32(float* out, double start, Py_ssize_t n_rows,
                        Py_ssize_t width, const double* w_hi, const double* w_lo,
                        Py_ssize_t n_freq, int layout) noexcept nogil

# The pair row (sin, cos)(position * w): n_freq sines, then n_freq cosines. No
# range check: an angle that overflows gives NaN.
cdef int sincos_row(double* pair_row, double position, const double* w_hi,
                    const double* w_lo, Py_ssize_t n_freq) noexcept nogil

# levels[k][d] = (sin, cos)(d * radix**k * w) as pair rows, k < n_levels, d < radix:
# the rows sincos_row makes for the positions d * radix**k.
cdef int digit_levels(double* levels, Py_ssize_t radix, Py_ssize_t n_levels,
                      const double* w_hi, const double* w_lo, Py_ssize_t n_freq) noexcept nogil

# As fill_positions_* and fill_table_*, with the caller's levels (n_levels >= 2).
cdef int fill_positions_levels_f64(double* out, const double* positions,
                                   Py_ssize_t n_positions, Py_ssize_t width,
                                   const double* w_hi, const double* w_lo, Py_ssize_t n_freq,
                                   int layout, const double* levels, Py_ssize_t radix,
                                   Py_ssize_t n_levels) noexcept nogil
cdef int fill_positions_levels_f32(float* out, const double* positions,
                                   Py_ssize_t n_positions, Py_ssize_t width,
                                   const double* w_hi, const double* w_lo, Py_ssize_t n_freq,
                                   int layout, const double* levels, Py_ssize_t radix,
                                   Py_ssize_t n_levels) noexcept nogil
cdef int fill_table_levels_f64(double* out, double start, Py_ssize_t n_rows,
                               Py_ssize_t width, const double* w_hi, const double* w_lo,
                               Py_ssize_t n_freq, int layout, const double* levels,
                               Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil
cdef int fill_table_levels_f32(float* out, double start, Py_ssize_t n_rows,
                               Py_ssize_t width, const double* w_hi, const double* w_lo,
                               Py_ssize_t n_freq, int layout, const double* levels,
                               Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil

# One row of `width` whose angles are the sums of the angles of `count` pair
# rows (1 <= count <= 64), multiplied in order as the *_levels_* functions do:
# with the rows of a position's digits, highest first, it gives the bits those
# functions give for it. negate: the sines of the negated angles.
cdef int fill_angle_sum_f64(double* out, Py_ssize_t width, Py_ssize_t n_freq, int layout,
                            const double* const* pair_rows, Py_ssize_t count,
                            bint negate) noexcept nogil
cdef int fill_angle_sum_f32(float* out, Py_ssize_t width, Py_ssize_t n_freq, int layout,
                            const double* const* pair_rows, Py_ssize_t count,
                            bint negate) noexcept nogil

# RoPE's cos and sin tables (each n_rows x head_dim, head_dim even) of the
# positions start, start + 1, ...: frequencies w_j for j < head_dim / 2
# (frequencies() with exponent_den = head_dim / 2). interleaved = 0 ("half"):
# a row is [cos(p w) | cos(p w)] and [sin(p w) | sin(p w)]; interleaved = 1:
# each value twice in a row, (cos_0, cos_0, cos_1, ...). levels may be NULL
# (then radix and n_levels are ignored), as in fill_table_levels_*.
cdef int fill_rope_table_f64(double* cos_out, double* sin_out, double start,
                             Py_ssize_t n_rows, Py_ssize_t head_dim, const double* w_hi,
                             const double* w_lo, bint interleaved, const double* levels,
                             Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil
cdef int fill_rope_table_f32(float* cos_out, float* sin_out, double start,
                             Py_ssize_t n_rows, Py_ssize_t head_dim, const double* w_hi,
                             const double* w_lo, bint interleaved, const double* levels,
                             Py_ssize_t radix, Py_ssize_t n_levels) noexcept nogil

# The same tables for any positions (as fill_positions_levels_*): row i for
# positions[i]. levels may be NULL, as there.
cdef int fill_rope_positions_f64(double* cos_out, double* sin_out, const double* positions,
                                 Py_ssize_t n_positions, Py_ssize_t head_dim,
                                 const double* w_hi, const double* w_lo, bint interleaved,
                                 const double* levels, Py_ssize_t radix,
                                 Py_ssize_t n_levels) noexcept nogil
cdef int fill_rope_positions_f32(float* cos_out, float* sin_out, const double* positions,
                                 Py_ssize_t n_positions, Py_ssize_t head_dim,
                                 const double* w_hi, const double* w_lo, bint interleaved,
                                 const double* levels, Py_ssize_t radix,
                                 Py_ssize_t n_levels) noexcept nogil
