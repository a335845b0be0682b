/* The digit levels an encoding keeps between calls (cpe._core caches them) and
 * the engine's fill loop reads (_engine.pxd declares this file). Private: its
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

/* Row states, published with release/acquire order: a thread that sees a row
 * ready also sees its values (free-threaded builds, several fills at once). */
#if defined(_MSC_VER)
#include <intrin.h>
static __inline char cpe_state_get(char *s) { return _InterlockedOr8(s, 0); }
static __inline void cpe_state_set(char *s, char v) { _InterlockedExchange8(s, v); }
static __inline int cpe_state_claim(char *s) {
    return _InterlockedCompareExchange8(s, CPE_ROW_BUSY, CPE_ROW_EMPTY) == CPE_ROW_EMPTY;
}
#else
static inline char cpe_state_get(char *s) { return __atomic_load_n(s, __ATOMIC_ACQUIRE); }
static inline void cpe_state_set(char *s, char v) { __atomic_store_n(s, v, __ATOMIC_RELEASE); }
static inline int cpe_state_claim(char *s) {
    char expected = CPE_ROW_EMPTY;
    return __atomic_compare_exchange_n(s, &expected, CPE_ROW_BUSY, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}
#endif

#endif /* CPE_FILL_H */
