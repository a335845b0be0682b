# cython: language_level=3
"""C-level API of cpe, for ``cimport`` from other Cython packages.

Every function here is ``noexcept nogil``, takes raw pointers into buffers the
caller owns, never allocates per element and never raises. They return a status
code: ``CPE_OK`` (0), ``CPE_ERR_ARGUMENT`` (an argument is invalid, such as a
non-finite position, a negative count, a NULL pointer where values are to be
read or written, or a count of rows and a width whose output could not fit in
memory; nothing was written), ``CPE_ERR_NOMEM`` (scratch memory could
not be allocated; nothing was written) or ``CPE_ERR_RANGE`` (some
``|position * w_j|`` exceeds ``CPE_ANGLE_LIMIT`` = 2**53, beyond which the
accuracy bound does not hold, or is NaN, or a ``w_lo[j]`` is not finite; nothing
was written).
``frequencies`` returns ``CPE_ERR_RANGE`` when a frequency is not finite (its
output then holds no usable values).

Preconditions the functions cannot check, on the caller:

* every output pointer addresses at least the documented number of values
  (``n * width`` for an encoding, ``n * head_dim`` for each RoPE table), suitably
  aligned for its type; pointers may be NULL only when that number is 0;
* ``w_hi`` and ``w_lo`` hold ``n_freq`` values ``w_j = w_hi[j] + w_lo[j]`` with
  ``|w_lo[j]| <= ulp(w_hi[j]) / 2`` (as :c:func:`frequencies` makes them);
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
    int fill_table_f64(double* out, double start, Py_ssize_t n_rows,
                       Py_ssize_t width, const double* w_hi, const double* w_lo,
                       Py_ssize_t n_freq, int layout)
    int fill_table_f32(float* out, ...same...)
    int fill_positions_f64(double* out, const double* positions, Py_ssize_t n_positions,
                           Py_ssize_t width, const double* w_hi, const double* w_lo,
                           Py_ssize_t n_freq, int layout)
    int fill_positions_f32(float* out, ...same...)
    int fill_rope_f64(double* cos_out, double* sin_out, const double* positions,
                      double start, Py_ssize_t n_rows, Py_ssize_t head_dim,
                      const double* w_hi, const double* w_lo, bint interleaved)
    int fill_rope_f32(float* cos_out, float* sin_out, ...same...)
    int rotate_rope_f64(double* x, const double* positions, double start,
                        Py_ssize_t n_positions, Py_ssize_t position_stride,
                        Py_ssize_t n_heads, Py_ssize_t head_stride, Py_ssize_t head_dim,
                        const double* w_hi, const double* w_lo, bint interleaved,
                        bint inverse)
    int rotate_rope_f32(float* x, ...same...)

A position's row has the same bits whichever function computes it and whatever
else the call computes: row ``i`` of a table from ``start`` is the row of the
position ``start + i`` in ``fill_positions_*``, and RoPE's cosines and sines are
those of the ``CPE_LAYOUT_SIN_COS`` encoding of width ``head_dim``; ``rotate_rope_*``
rotates by those same values. Scratch memory is allocated per call (the library's
Python functions keep theirs between calls).
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

# Row i of out (C order, rows of `width`) encodes position start + i; start and
# start + n_rows must be integers of magnitude <= 2**53 (so that every position is
# exact).
cdef int fill_table_f64(double* out, double start, Py_ssize_t n_rows,
                        Py_ssize_t width, const double* w_hi, const double* w_lo,
                        Py_ssize_t n_freq, int layout) noexcept nogil
cdef int fill_table_f32(float* out, double start, Py_ssize_t n_rows,
                        Py_ssize_t width, const double* w_hi, const double* w_lo,
                        Py_ssize_t n_freq, int layout) noexcept nogil

# Row i of out encodes position positions[i] (any finite values).
cdef int fill_positions_f64(double* out, const double* positions, Py_ssize_t n_positions,
                            Py_ssize_t width, const double* w_hi, const double* w_lo,
                            Py_ssize_t n_freq, int layout) noexcept nogil
cdef int fill_positions_f32(float* out, const double* positions, Py_ssize_t n_positions,
                            Py_ssize_t width, const double* w_hi, const double* w_lo,
                            Py_ssize_t n_freq, int layout) noexcept nogil

# RoPE's cos and sin tables (each n_rows x head_dim, head_dim even and >= 2) of
# the positions positions[i], or start + i when positions is NULL (then as in
# fill_table_*), with the head_dim / 2 frequencies w_j. interleaved = 0 ("half"):
# a row is [cos(p w) | cos(p w)] and [sin(p w) | sin(p w)]; interleaved = 1: each
# value twice in a row, (cos_0, cos_0, cos_1, ...).
cdef int fill_rope_f64(double* cos_out, double* sin_out, const double* positions,
                       double start, Py_ssize_t n_rows, Py_ssize_t head_dim,
                       const double* w_hi, const double* w_lo, bint interleaved) noexcept nogil
cdef int fill_rope_f32(float* cos_out, float* sin_out, const double* positions,
                       double start, Py_ssize_t n_rows, Py_ssize_t head_dim,
                       const double* w_hi, const double* w_lo, bint interleaved) noexcept nogil

# RoPE applied in place to the rows of n_positions positions (positions[i], or
# start + i when positions is NULL, as in fill_rope_*), n_heads rows each: row
# (i, h) at x + i * position_stride + h * head_stride (strides in values; no two
# rows may overlap), its first head_dim values (even, >= 2) rotated by the angles
# p * w_j, j < head_dim / 2: pair j is (x[j], x[head_dim / 2 + j]) (interleaved
# = 0, "half", as transformers' rotate_half) or (x[2j], x[2j + 1]) (interleaved =
# 1), by -angle when inverse. Each value is computed in double from its own pair
# and the cos and sin of fill_rope_f64, and rounded once; nothing is written
# unless CPE_OK is returned.
cdef int rotate_rope_f64(double* x, const double* positions, double start,
                         Py_ssize_t n_positions, Py_ssize_t position_stride,
                         Py_ssize_t n_heads, Py_ssize_t head_stride, Py_ssize_t head_dim,
                         const double* w_hi, const double* w_lo, bint interleaved,
                         bint inverse) noexcept nogil
cdef int rotate_rope_f32(float* x, const double* positions, double start,
                         Py_ssize_t n_positions, Py_ssize_t position_stride,
                         Py_ssize_t n_heads, Py_ssize_t head_stride, Py_ssize_t head_dim,
                         const double* w_hi, const double* w_lo, bint interleaved,
                         bint inverse) noexcept nogil
