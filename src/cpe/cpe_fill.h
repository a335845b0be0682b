/* What cpe._core shares with cpe.kernels beyond the public C API (kernels.pxd):
 * the digit levels an encoding keeps between calls, and the one fill loop that
 * reads them, reached through the capsule cpe.kernels._fill_api. Private: its
 * layout may change with any release, as the caches do.
 *
 * An integer position p is written as |p| = H + sum_k d_k R**k (k < n_levels,
 * 0 <= d_k < R = 2**shift, H a multiple of R**n_levels), and its row is the
 * product of the rows (sin, cos)(H w) and (sin, cos)(d_k R**k w), highest first.
 * The level rows depend on (k, d) and the frequencies alone; the shape of the
 * levels depends on the number of frequencies alone. So the bits of a position
 * never depend on the call that asks for it.
 */
#ifndef CPE_FILL_H
#define CPE_FILL_H

/* The kernels size their scratch memory and index rows with 64-bit Py_ssize_t
 * arithmetic: a 32-bit build stops here (setup.py says so first). */
#if defined(_MSC_VER)
#if !defined(_WIN64)
#error "cpe needs a 64-bit platform: its kernels assume 64-bit sizes"
#endif
#elif !defined(__SIZEOF_POINTER__) || __SIZEOF_POINTER__ != 8
#error "cpe needs a 64-bit platform: its kernels assume 64-bit sizes"
#endif

#include <Python.h>

/* Row k * radix + d of rows holds (sin, cos)(d radix**k w) as a pair row (n_freq
 * sines, then n_freq cosines) once state[k * radix + d] is CPE_ROW_READY. */
typedef struct {
    double *rows;
    char *state;
    Py_ssize_t radix;
    int shift;
    int n_levels;
} cpe_levels;

enum { CPE_ROW_EMPTY = 0, CPE_ROW_BUSY = 1, CPE_ROW_READY = 2 };

/* The RoPE layouts of the fill loop (after the encoding layouts of kernels.pxd):
 * two outputs, cos and sin, each value twice. */
enum { CPE_LAYOUT_ROPE_HALF = 3, CPE_LAYOUT_ROPE_INTERLEAVED = 4 };

/* The shape of the levels of n_freq frequencies: up to 64 (D <= 128 in the
 * paper's layout) two levels of 256 rows, one product for |p| < 65536; up to
 * 256 (D <= 512) three levels of 128, one product for |p| < 16384 and two for
 * |p| < 2**21; else four levels of 32, at most three products for |p| < 2**20
 * (an encoding's levels take at most 1.5 MiB up to D = 512, 4 MiB at D = 4096).
 * At most 8 levels: the fill loop keeps one product per level. */
static inline void cpe_level_shape(Py_ssize_t n_freq, Py_ssize_t *radix, int *shift,
                                   int *n_levels) {
    if (n_freq <= 64) {
        *radix = 256, *shift = 8, *n_levels = 2;
    } else if (n_freq <= 256) {
        *radix = 128, *shift = 7, *n_levels = 3;
    } else {
        *radix = 32, *shift = 5, *n_levels = 4;
    }
}

/* The parts of one output filled by several threads (workers=) meet here after
 * their checks and allocations, before their first write: each passes once every
 * part has arrived, and none passes once one has failed, so that a failing part
 * (a position out of range, no memory) leaves the whole output unwritten, as one
 * call would. */
typedef struct {
    long parties;
    long arrived;
    long failed;
} cpe_gate;

/* A part stopped at the gate because another failed; nothing was written. */
enum { CPE_CANCELLED = -100 };

/* out[i] (and sin_out[i] for the RoPE layouts) encodes positions[i], or start + i
 * when positions is NULL. w_max: the largest |w_hi[j]| (NaN if one is NaN), which
 * the encoding knows, or negative for the loop to find it. amplitude: a finite
 * factor of RoPE's values (1 for the encodings). levels may be NULL: the loop then
 * makes what it needs. gate: NULL, or the gate of the parts this call is one of
 * (it fails the gate when it fails, and returns CPE_CANCELLED when another did). */
typedef int (*cpe_fill_f64_t)(double *out, double *sin_out, const double *positions,
                              double start, Py_ssize_t n, Py_ssize_t width,
                              const double *w_hi, const double *w_lo, Py_ssize_t n_freq,
                              double w_max, int layout, double amplitude,
                              cpe_levels *levels, cpe_gate *gate);
typedef int (*cpe_fill_f32_t)(float *out, float *sin_out, const double *positions,
                              double start, Py_ssize_t n, Py_ssize_t width,
                              const double *w_hi, const double *w_lo, Py_ssize_t n_freq,
                              double w_max, int layout, double amplitude,
                              cpe_levels *levels, cpe_gate *gate);

typedef struct {
    cpe_fill_f64_t fill_f64;
    cpe_fill_f32_t fill_f32;
} cpe_fill_api;

#define CPE_FILL_CAPSULE "cpe.kernels._fill_api"

/* Row states, published with release/acquire order: a thread that sees a row
 * ready also sees its values (free-threaded builds, several fills at once); and
 * the gate's counts. */
#if defined(_MSC_VER)
#include <intrin.h>
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h> /* SwitchToThread */
static __inline long cpe_gate_get(long *v) { return _InterlockedOr(v, 0); }
static __inline void cpe_gate_fail(cpe_gate *g) { _InterlockedExchange(&g->failed, 1); }
static __inline void cpe_gate_arrive(cpe_gate *g) { _InterlockedIncrement(&g->arrived); }
static __inline void cpe_gate_yield(void) { SwitchToThread(); }
static __inline char cpe_state_get(char *s) { return _InterlockedOr8(s, 0); }
static __inline void cpe_state_set(char *s, char v) { _InterlockedExchange8(s, v); }
static __inline int cpe_state_claim(char *s) {
    return _InterlockedCompareExchange8(s, CPE_ROW_BUSY, CPE_ROW_EMPTY) == CPE_ROW_EMPTY;
}
#else
#include <sched.h>
static inline long cpe_gate_get(long *v) { return __atomic_load_n(v, __ATOMIC_ACQUIRE); }
static inline void cpe_gate_fail(cpe_gate *g) {
    __atomic_store_n(&g->failed, 1, __ATOMIC_RELEASE);
}
static inline void cpe_gate_arrive(cpe_gate *g) {
    __atomic_add_fetch(&g->arrived, 1, __ATOMIC_ACQ_REL);
}
static inline void cpe_gate_yield(void) { sched_yield(); }
static inline char cpe_state_get(char *s) { return __atomic_load_n(s, __ATOMIC_ACQUIRE); }
static inline void cpe_state_set(char *s, char v) { __atomic_store_n(s, v, __ATOMIC_RELEASE); }
static inline int cpe_state_claim(char *s) {
    char expected = CPE_ROW_EMPTY;
    return __atomic_compare_exchange_n(s, &expected, CPE_ROW_BUSY, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}
#endif

/* Arrive, then wait for the others: 1 when every part has arrived, 0 when one
 * failed. A NULL gate (one part) passes at once. */
static inline int cpe_gate_pass(cpe_gate *g) {
    if (g == NULL) {
        return 1;
    }
    cpe_gate_arrive(g);
    for (;;) {
        if (cpe_gate_get(&g->failed)) {
            return 0;
        }
        if (cpe_gate_get(&g->arrived) >= g->parties) {
            return 1;
        }
        cpe_gate_yield();
    }
}

#endif /* CPE_FILL_H */
