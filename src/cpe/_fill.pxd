# Declarations of cpe_fill.h (no module of its own), shared by cpe.kernels and
# cpe._core: the digit levels and the fill loop's capsule. Private.
cdef extern from "cpe_fill.h":
    ctypedef struct cpe_levels:
        double* rows
        char* state
        Py_ssize_t radix
        int shift
        int n_levels
    ctypedef struct cpe_gate:
        long parties
        long arrived
        long failed
    ctypedef int (*cpe_fill_f64_t)(double*, double*, const double*, double, Py_ssize_t,
                                   Py_ssize_t, const double*, const double*, Py_ssize_t, double,
                                   int, double, cpe_levels*, cpe_gate*) noexcept nogil
    ctypedef int (*cpe_fill_f32_t)(float*, float*, const double*, double, Py_ssize_t,
                                   Py_ssize_t, const double*, const double*, Py_ssize_t, double,
                                   int, double, cpe_levels*, cpe_gate*) noexcept nogil
    ctypedef struct cpe_fill_api:
        cpe_fill_f64_t fill_f64
        cpe_fill_f32_t fill_f32
    const char* CPE_FILL_CAPSULE
    enum:
        CPE_ROW_READY
        CPE_LAYOUT_ROPE_HALF
        CPE_LAYOUT_ROPE_INTERLEAVED
        CPE_CANCELLED
    void cpe_level_shape(Py_ssize_t n_freq, Py_ssize_t* radix, int* shift,
                         int* n_levels) noexcept nogil
    char cpe_state_get(char* s) noexcept nogil
    void cpe_state_set(char* s, char v) noexcept nogil
    int cpe_state_claim(char* s) noexcept nogil
    void cpe_gate_fail(cpe_gate* g) noexcept nogil
    int cpe_gate_pass(cpe_gate* g) noexcept nogil
