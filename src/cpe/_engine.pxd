# The engine: the frequencies and the one fill loop, shared by cimport with
# cpe.kernels (the C API, kernels.pxd) and cpe._core (the Python functions).
# Private: its declarations may change with any release.
#
# A request is checked once (fill_check), then filled as one part (fill) or as
# several ranges of rows, each with scratch memory allocated before any part
# starts (scratch_new), by fill_part, which cannot fail.

from libc.stdint cimport uint16_t

cdef extern from "cpe_fill.h":
    ctypedef struct cpe_levels:
        double* rows
        char* state
        Py_ssize_t radix
        int shift
        int n_levels
    enum:
        CPE_ROW_READY
    void cpe_level_shape(Py_ssize_t n_freq, Py_ssize_t* radix, int* shift,
                         int* n_levels) noexcept nogil
    char cpe_state_get(char* s) noexcept nogil
    void cpe_state_set(char* s, char v) noexcept nogil
    int cpe_state_claim(char* s) noexcept nogil

# The stores of the fill loop: the encoding layouts (kernels.pxd's
# CPE_LAYOUT_INTERLEAVED, _SIN_COS, _COS_SIN are 0, 1, 2), then RoPE's two tables,
# cos and sin, each value twice.
cdef enum:
    STORE_ROPE_HALF = 3
    STORE_ROPE_INTERLEAVED = 4

cdef enum:
    FILL_MAX_AXES = 8

cdef struct fill_request:
    # Row i of out (and of sin_out for RoPE's stores), at out + i * width
    # values, is the row of positions[i], or of start + i when positions is NULL:
    # `width` values, float32 when `float32`, else float64.
    void* out
    void* sin_out
    const double* positions
    double start
    Py_ssize_t n
    Py_ssize_t width
    bint float32
    # the encoding: n_freq frequencies w_hi[j] + w_lo[j]; w_max the largest
    # |w_hi[j]| (NaN if one is NaN) when known, else negative; levels NULL, or
    # the digit levels kept for these frequencies (cpe_fill.h)
    const double* w_hi
    const double* w_lo
    Py_ssize_t n_freq
    double w_max
    cpe_levels* levels
    # Or the angles of several axes (multi-axis RoPE): 2 <= n_axes <=
    # FILL_MAX_AXES requests at `axes`, whose positions, start, frequencies and
    # levels (their other fields unused; their n that of this request) give, in
    # order, the n_freq frequencies of a row; this request's own positions,
    # start, w_hi, w_lo, w_max and levels are then unused. n_axes 0: one axis,
    # this request's own.
    const fill_request* axes
    int n_axes
    # how a row is stored; RoPE's factor (1 for the encodings) and where its
    # values go in a row: frequency j at column c_j and, "half", at c2_j too
    # (interleaved: pair c_j); c_j = j and c2_j = half_at + j when columns is
    # NULL, else c_j = columns[j] and c2_j = columns[n_freq + j] ("half": a map
    # of 2 n_freq columns; interleaved: of n_freq pairs), each column of a row
    # once (the caller's guarantee: fill_check checks the range only). A whole
    # table is columns NULL, half_at n_freq (see cpe_rows.h).
    int store
    double amplitude
    const Py_ssize_t* columns
    Py_ssize_t half_at

cdef struct row_sink:
    # Where row i of the output (and of RoPE's sin table) is built: in place
    # (owned == NULL), or in the next slot of the chunks, streamed once full
    # (rows must then be built in order, 0, 1, 2, ...).
    char* owned             # malloc'd, freed by _sink_free
    char* chunk[2]          # on a cache line: the output's, the sin table's
    Py_ssize_t rows         # rows a chunk: a whole number of 16-byte units
    Py_ssize_t slot         # rows in the chunks
    Py_ssize_t row_bytes
    bint pieces             # rows streamed piece by piece (see _stream_pieces)

cdef struct axis_scratch:
    # What the walk of one axis' positions works with.
    double* owned           # the walk's scratch rows (malloc'd)
    double* own_rows        # a level table of its own, when it has no levels
    cpe_levels own

cdef struct fill_scratch:
    # What one part of a request writes with, besides its rows.
    axis_scratch axes[8]    # (FILL_MAX_AXES) each axis'
    int n_axes
    double* owned           # several axes: the pair row of all of a row's angles
    row_sink sink

# The dtypes of the caller's rows an apply request changes.
cdef enum:
    ROW_FLOAT64 = 0
    ROW_FLOAT32 = 1
    ROW_FLOAT16 = 2
    ROW_BFLOAT16 = 3

cdef struct rotation:
    # One array of an apply request. The rows of position i are at
    # y + y_rows[i] + y_heads[h], h < n_heads (bytes), `width` values each of
    # `dtype` (ROW_FLOAT64 ... ROW_BFLOAT16), the last axis contiguous: their
    # first table_width values are changed in place (rotated, or added to), after
    # the row is copied from x + x_rows[i] + x_heads[h] when that is another row.
    # `heads_inner`: the rows of a position are visited together (they lie near
    # each other).
    char* x
    char* y
    const Py_ssize_t* x_rows
    const Py_ssize_t* y_rows
    const Py_ssize_t* x_heads
    const Py_ssize_t* y_heads
    Py_ssize_t n_heads
    Py_ssize_t width
    int dtype
    bint heads_inner

cdef struct apply_request:
    # An encoding applied to the caller's rows: the values of n positions, made a
    # block at a time by the fill request `angles` into a small table of rows of
    # its width (its out and sin_out unused: the block's), change the first
    # `width` values of every row of every target.
    # Rotation (`add` false): rows of n_freq cosines then n_freq sines (RoPE's
    # "half" store with half_at 0, its columns pairs: both of its maps the
    # same); pair j ("half": values j and n_freq + j; "interleaved": 2j and
    # 2j + 1) is rotated by the angle of frequency j, backwards when `inverse`.
    # Addition (`add`): one axis' whole rows of an encoding's layout; each value
    # becomes x * x_scale + the encoding's value.
    const fill_request* angles
    Py_ssize_t n
    bint add
    double x_scale
    bint interleaved
    bint inverse
    const rotation* targets
    Py_ssize_t n_targets

cdef struct apply_scratch:
    # What one part of an apply request works with: a block of the angles'
    # table and its fill scratch.
    double* owned
    double* table
    Py_ssize_t rows
    fill_scratch fill

cdef int frequencies(double* w_hi, double* w_lo, Py_ssize_t n_freq,
                     double base, double exponent_den, double scale) noexcept nogil
cdef void blend_frequencies(double* w_hi, double* w_lo, const double* divisor,
                            const double* weight, const double* kept,
                            Py_ssize_t n_freq) noexcept nogil
cdef double largest_magnitude(const double* x, Py_ssize_t n) noexcept nogil
cdef int fill_check(const fill_request* r) noexcept nogil
cdef int scratch_new(const fill_request* r, Py_ssize_t first, Py_ssize_t count,
                     Py_ssize_t served, fill_scratch* s) noexcept nogil
cdef void fill_part(const fill_request* r, fill_scratch* s, Py_ssize_t first,
                    Py_ssize_t count) noexcept nogil
cdef void scratch_free(fill_scratch* s) noexcept nogil
cdef int fill(const fill_request* r) noexcept nogil
cdef int apply_check(const apply_request* a) noexcept nogil
cdef int apply_scratch_new(const apply_request* a, Py_ssize_t count,
                           apply_scratch* s) noexcept nogil
cdef void apply_part(const apply_request* a, apply_scratch* s, Py_ssize_t first,
                     Py_ssize_t count) noexcept nogil
cdef void apply_scratch_free(apply_scratch* s) noexcept nogil
cdef void narrow(const double* x, uint16_t* out, Py_ssize_t n, bint bfloat16) noexcept nogil
