/* Rows of sines and cosines of double-double angles, without libm.
 *
 * cpe_sincos_row(row, p, w_hi, w_lo, n) writes sin(p w_j) to row[j] and
 * cos(p w_j) to row[n + j], for w_j = w_hi[j] + w_lo[j]. libm's sincos does not
 * vectorize; this loop does, and keeps the accuracy:
 *
 *   - the angle p w_j is formed exactly as th + tl (an exact product: fma or
 *     Dekker's splitting, which give the same bits);
 *   - th is reduced by k pi/2 with pi/2 in three pieces (Cody and Waite): the
 *     first two products are exact for |k| < 2**20, and the remainder is kept
 *     as a double-double (x, y);
 *   - sin and cos of x + y are fdlibm's kernels (__kernel_sin/__kernel_cos,
 *     FreeBSD msun), error below one ulp.
 *
 * Angles outside [CPE_TINY, CPE_REDUCE_LIMIT] (and positions or frequencies
 * beyond CPE_HUGE, where the splitting would overflow) are recomputed by the
 * caller's scalar fallback, so every element gets an accurate value whatever
 * the inputs.
 *
 * Copies of the loop are compiled: a portable one, and on x86-64 with GCC or
 * Clang one for AVX2 + FMA and one for AVX-512 (and, for the bfloat16 stores,
 * one for AVX-512 with AVX512_BF16), chosen at run time (cpe_rows_init). All
 * do the same operations in the same order and none contracts a*b+c (the build
 * passes -ffp-contract=off), so they give identical bits; a test checks it.
 */
#ifndef CPE_ROWS_H
#define CPE_ROWS_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <Python.h>

#if defined(_MSC_VER)
#define CPE_ALWAYS_INLINE static __forceinline
#define CPE_RESTRICT __restrict
#else
#define CPE_ALWAYS_INLINE static inline __attribute__((always_inline))
#define CPE_RESTRICT __restrict__
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define CPE_X86_DISPATCH 1
#else
#define CPE_X86_DISPATCH 0
#endif

/* |k| < 2**20 keeps k * pio2_1 and k * pio2_2 exact. */
#define CPE_REDUCE_LIMIT 1.6e6
/* About 2**-900 and 2**900 (decimal: MSVC's C compiler may not read hex floats). */
#define CPE_TINY 1e-271
#define CPE_HUGE 1e271

/* Whether the fast loop computes sin/cos(p w) accurately (see above). */
CPE_ALWAYS_INLINE int cpe_fast_element(double p, double w) {
    double a = fabs(p * w);
    /* & and |, not && and ||: no branches, so that the SIMD loops vectorize */
    return (fabs(p) <= CPE_HUGE) & (fabs(w) <= CPE_HUGE)
           & ((p == 0.0) | (w == 0.0) | ((a >= CPE_TINY) & (a <= CPE_REDUCE_LIMIT)));
}

CPE_ALWAYS_INLINE void cpe_split(double a, double *hi, double *lo) {
    double t = 134217729.0 * a; /* 2**27 + 1 */
    *hi = t - (t - a);
    *lo = a - *hi;
}

/* sin and cos of x + y (|x| at most pi/4 and a little, |y| below half an ulp of
   x), then moved to quadrant q (the low two bits of k, the angle being
   k pi/2 + x + y): fdlibm's kernels. */
CPE_ALWAYS_INLINE void cpe_sincos_kernel(double x, double y, uint64_t q, double *s, double *c) {
    const double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                 S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                 S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
    const double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                 C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                 C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
    double z = x * x, w = z * z, v = z * x;
    double rs = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
    double sn = x - ((z * (0.5 * y - v * rs) - y) - v * S1);
    double rc = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
    double hz = 0.5 * z;
    double one_minus = 1.0 - hz;
    double cs = one_minus + (((1.0 - one_minus) - hz) + (z * rc - x * y));
    /* Odd k swaps sin and cos; k = 2, 3 (mod 4) negate the sine and k = 1, 2 the
       cosine. Done on the bits (masks and sign flips) so that plain SSE2
       vectorizes it too. */
    uint64_t sn_bits, cs_bits;
    memcpy(&sn_bits, &sn, sizeof sn_bits);
    memcpy(&cs_bits, &cs, sizeof cs_bits);
    uint64_t swap = (uint64_t)0 - (q & 1);
    uint64_t s_bits = ((cs_bits & swap) | (sn_bits & ~swap)) ^ ((q & 2) << 62);
    uint64_t c_bits = ((sn_bits & swap) | (cs_bits & ~swap)) ^ (((q + 1) & 2) << 62);
    memcpy(s, &s_bits, sizeof s_bits);
    memcpy(c, &c_bits, sizeof c_bits);
}

/* sin and cos of th + tl, |th| <= CPE_REDUCE_LIMIT: th reduced by k pi/2 with
   pi/2 in three pieces (Cody and Waite), the remainder a double-double. */
CPE_ALWAYS_INLINE void cpe_sincos_dd(double th, double tl, double *s, double *c) {
    const double invpio2 = 6.36619772367581382433e-01;
    const double shifter = 6755399441055744.0; /* 1.5 * 2**52: adding it rounds to an integer */
    const double pio2_1 = 1.57079632673412561417e+00;  /* first 33 bits of pi/2 */
    const double pio2_2 = 6.07710050630396597660e-11;  /* next 33 bits */
    const double pio2_2t = 2.02226624879595063154e-21; /* pi/2 - pio2_1 - pio2_2 */
    double shifted = th * invpio2 + shifter;
    int64_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    double k = shifted - shifter;
    double r1 = th - k * pio2_1;   /* exact */
    double t2 = k * pio2_2;        /* exact */
    double y0 = r1 - t2;
    double bb = y0 - r1;
    double y1 = ((r1 - (y0 - bb)) - (t2 + bb)) + (tl - k * pio2_2t);
    double x = y0 + y1;
    /* (k mod 4 is in the low bits of the shifted sum) */
    cpe_sincos_kernel(x, y1 - (x - y0), (uint64_t)bits, s, c);
}

/* Whether a is within the range where Dekker's splitting neither overflows nor
   loses bits (2**-500 to 2**500 or so). */
CPE_ALWAYS_INLINE int cpe_splits(double a) {
    return (fabs(a) > 3.06e-151) & (fabs(a) < 3.27e150);
}

/* a * b - p for p = a * b rounded, from the halves of a and b (cpe_split):
   Dekker's exact error term. */
CPE_ALWAYS_INLINE double cpe_dekker_error(double p, double a_hi, double a_lo, double b_hi,
                                          double b_lo) {
    return ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
}

/* Dekker's exact product a * b = *hi + *lo, for |a|, |b| below 2**996 and a
   product that does not underflow. */
CPE_ALWAYS_INLINE void cpe_two_prod(double a, double b, double *hi, double *lo) {
    double a_hi, a_lo, b_hi, b_lo;
    cpe_split(a, &a_hi, &a_lo);
    cpe_split(b, &b_hi, &b_lo);
    *hi = a * b;
    *lo = cpe_dekker_error(*hi, a_hi, a_lo, b_hi, b_lo);
}

/* hi + lo += t, the sum hi + t exact (two_sum), its error added to lo. */
CPE_ALWAYS_INLINE void cpe_accumulate(double *hi, double *lo, double t) {
    double s = *hi + t;
    double bb = s - *hi;
    *lo += (*hi - (s - bb)) + (t - bb);
    *hi = s;
}

/* sin(p w) and cos(p w), w = w_hi + w_lo, for the elements the loop leaves
   (cpe_fast_element false), with the same kernels and no libm call, so that
   every value is a function of its inputs alone on every platform:
   - the product p w_hi is exact (th + its error), formed on p and w_hi, or on
     them scaled by powers of two into the range of Dekker's splitting;
   - tiny angles (below CPE_TINY) have sine th + tl and cosine 1 (the next
     terms are below 2**-1700 of them);
   - angles up to CPE_REDUCE_LIMIT are reduced as the loop reduces them;
   - larger ones (accepted up to 2**53) by k pi/2 with pi/2 in four pieces
     (212 bits): each k * piece is an exact double-double (k < 2**54) and the
     remainder is summed exactly but for its last additions (~2**-105 of 1). */
static void cpe_sincos_exact(double p, double w_hi, double w_lo, double *s, double *c) {
    const double invpio2 = 6.36619772367581382433e-01;
    const double pio2[4] = {1.5707963267948966, 6.123233995736766e-17,
                            -1.4973849048591698e-33, 5.562271104316826e-50};
    int ep, ew;
    double th, err, hi, lo, a, b;
    if (cpe_splits(p) && cpe_splits(w_hi)) {
        cpe_two_prod(p, w_hi, &th, &err);
    } else { /* (the same exact product, on operands scaled into that range) */
        (void)frexp(p, &ep);
        (void)frexp(w_hi, &ew);
        cpe_two_prod(ldexp(p, -(ep - ew) / 2), ldexp(w_hi, (ep - ew) / 2), &th, &err);
    }
    double tl = err + p * w_lo;
    if (!(fabs(th) >= CPE_TINY)) {
        *s = th + tl;
        *c = 1.0;
        return;
    }
    if (fabs(th) <= CPE_REDUCE_LIMIT) {
        cpe_sincos_dd(th, tl, s, c);
        return;
    }
    /* k, the integer nearest to (th + tl) 2/pi: th 2/pi as a double-double, for
       its fraction (a double near 2**53 has none), so that |x + y| <= pi/4
       (and a little), where the kernels are accurate. */
    double v, f;
    cpe_two_prod(th, invpio2, &v, &f);
    f += th * -3.935735335036497e-17 + tl * invpio2; /* 2/pi - invpio2 */
    double k = floor(v);
    k += floor((v - k) + f + 0.5);
    cpe_two_prod(k, pio2[0], &a, &b);
    hi = th - a; /* exact: th and a are within a factor of 2 */
    lo = 0.0;
    cpe_accumulate(&hi, &lo, -b);
    cpe_accumulate(&hi, &lo, tl);
    cpe_two_prod(k, pio2[1], &a, &b);
    cpe_accumulate(&hi, &lo, -a);
    cpe_accumulate(&hi, &lo, -b);
    cpe_two_prod(k, pio2[2], &a, &b);
    cpe_accumulate(&hi, &lo, -a);
    cpe_accumulate(&hi, &lo, -b);
    cpe_accumulate(&hi, &lo, -(k * pio2[3]));
    double x = hi + lo;
    cpe_sincos_kernel(x, lo - (x - hi), (uint64_t)(int64_t)k, s, c);
}

/* Returns 1 when some element is outside the range of the loop (cpe_fast_element).
   The SIMD copies check inside the loop; the portable one checks in a second
   loop, which keeps the first vectorizable with plain SSE2. */
CPE_ALWAYS_INLINE int cpe_sincos_row_body(double *row, double p, const double *w_hi,
                                          const double *w_lo, Py_ssize_t n, const int use_fma) {
    double p_hi, p_lo;
    cpe_split(p, &p_hi, &p_lo);
    double *cosines = row + n;
    int outside = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        double w = w_hi[j];
        double th = p * w;
        double err;
        if (use_fma) {
            err = fma(p, w, -th);
        } else {
            double w_h, w_l;
            cpe_split(w, &w_h, &w_l);
            err = cpe_dekker_error(th, p_hi, p_lo, w_h, w_l);
        }
        cpe_sincos_dd(th, err + p * w_lo[j], &row[j], &cosines[j]);
        if (use_fma) {
            outside |= !cpe_fast_element(p, w);
        }
    }
    if (!use_fma) {
        for (Py_ssize_t j = 0; j < n; j++) {
            outside |= !cpe_fast_element(p, w_hi[j]);
        }
    }
    return outside;
}

static int cpe_sincos_row_portable(double *row, double p, const double *w_hi,
                                   const double *w_lo, Py_ssize_t n) {
    return cpe_sincos_row_body(row, p, w_hi, w_lo, n, 0);
}

#if CPE_X86_DISPATCH
/* GCC's SLP vectorizer may turn a*b + c*d beside a*b - c*d into fmaddsub/fmsubadd
   even under -ffp-contract=off, which would make the FMA
   copies round differently from the portable one: it is off in those copies
   (their loops are vectorized by the loop vectorizer). */
#if defined(__clang__)
#define CPE_NO_SLP
#else
#define CPE_NO_SLP __attribute__((optimize("no-tree-slp-vectorize")))
#endif
#define CPE_AVX2_TARGET __attribute__((target("avx2,fma,f16c"))) CPE_NO_SLP
CPE_AVX2_TARGET static int cpe_sincos_row_avx2(
        double *row, double p, const double *w_hi, const double *w_lo, Py_ssize_t n) {
    return cpe_sincos_row_body(row, p, w_hi, w_lo, n, 1);
}
#if defined(__clang__)
#define CPE_AVX512_TARGET __attribute__((target("avx512f,avx512dq,avx512vl,fma,f16c")))
#else
#define CPE_AVX512_TARGET \
    __attribute__((target("avx512f,avx512dq,avx512vl,fma,f16c,prefer-vector-width=512"))) CPE_NO_SLP
#endif
/* AVX-512 with its bfloat16 conversions (AVX512_BF16): the bfloat16 stores only. */
#if defined(__clang__)
#define CPE_AVX512BF16_TARGET \
    __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx512bf16,fma,f16c")))
#else
#define CPE_AVX512BF16_TARGET                                                                   \
    __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx512bf16,fma,f16c,"              \
                          "prefer-vector-width=512"))) CPE_NO_SLP
#endif
CPE_AVX512_TARGET static int cpe_sincos_row_avx512(
        double *row, double p, const double *w_hi, const double *w_lo, Py_ssize_t n) {
    return cpe_sincos_row_body(row, p, w_hi, w_lo, n, 1);
}
#endif

/* Which copy of the loop runs: 0 portable, 1 AVX2 + FMA, 2 AVX-512, 3 AVX-512 whose
   bfloat16 stores use AVX512_BF16 (every other loop is that of 2); set once at import. */
static int cpe_rows_level = 0;

#if CPE_X86_DISPATCH
#include <cpuid.h>
/* 3 for AVX-512 with AVX512_BF16, 2 for AVX-512 (F, DQ, VL; BW too for 3), 1 for
   AVX2 + FMA (all with F16C, which every CPU
   with AVX2 has), 0 otherwise: what the CPU has and the operating system saves
   (XCR0). Read with cpuid/xgetbv rather than __builtin_cpu_supports, whose
   libgcc symbol not every toolchain provides. */
static int cpe_x86_level(void) {
    unsigned int a, b, c, d, xcr0_lo, xcr0_hi;
    if (!__get_cpuid(1, &a, &b, &c, &d)) {
        return 0;
    }
    if (!((c >> 12) & 1) || !((c >> 27) & 1) || !((c >> 28) & 1) || !((c >> 29) & 1)) {
        return 0; /* FMA, OSXSAVE, AVX, F16C */
    }
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 0x6) != 0x6) {
        return 0; /* XMM and YMM state */
    }
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((b >> 5) & 1)) {
        return 0; /* AVX2 */
    }
    if (((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 31) & 1)
            && (xcr0_lo & 0xE0) == 0xE0) { /* AVX512F, AVX512DQ, AVX512VL; opmask and ZMM state */
        unsigned int bw = (b >> 30) & 1, subleaves = a;
        if (bw && subleaves >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1)) {
            return 3; /* AVX512BW, AVX512_BF16 */
        }
        return 2;
    }
    return 1;
}
#endif

/* max_level caps the choice (0: portable only), for tests and CPE_DISABLE_SIMD. */
static void cpe_rows_init(int max_level) {
#if CPE_X86_DISPATCH
    int level = cpe_x86_level();
    cpe_rows_level = level < max_level ? level : max_level;
#else
    (void)max_level;
    cpe_rows_level = 0;
#endif
}

/* Calls name##_avx512, name##_avx2 or name##_portable with args, whichever
   cpe_rows_level selects; ret is return in a function with a result, empty in a
   void one. Without x86 dispatch (MSVC, other CPUs) only the portable copy exists. */
#if CPE_X86_DISPATCH
#define CPE_DISPATCH(ret, name, args)   \
    if (cpe_rows_level >= 2) {          \
        ret name##_avx512 args;         \
    } else if (cpe_rows_level == 1) {   \
        ret name##_avx2 args;           \
    } else {                            \
        ret name##_portable args;       \
    }
#else
#define CPE_DISPATCH(ret, name, args) ret name##_portable args;
#endif

/* The fast loop over the whole row; returns 1 when some elements are outside its
   range (the caller then recomputes those, see cpe_fast_element), 0 otherwise. */
static int cpe_sincos_row_fast(double *row, double p, const double *w_hi, const double *w_lo,
                               Py_ssize_t n) {
    if (!(fabs(p) <= CPE_HUGE)) {
        return 1;
    }
    CPE_DISPATCH(return, cpe_sincos_row, (row, p, w_hi, w_lo, n))
}

/* One copy of name##_impl per instruction set and a function, name, that calls
   the one in use. The SIMD copies (CPE_COPY) exist in CPE_X86_DISPATCH builds
   only; CPE_MULTIVERSION_OWN_AVX512 takes a name##_avx512 written by hand. */
#if CPE_X86_DISPATCH
#define CPE_COPY(target, name, suffix, params, args) \
    target static void name##suffix params { name##_impl args; }
#else
#define CPE_COPY(target, name, suffix, params, args)
#endif
#define CPE_MULTIVERSION(name, params, args)                       \
    CPE_COPY(CPE_AVX512_TARGET, name, _avx512, params, args)       \
    CPE_MULTIVERSION_OWN_AVX512(name, params, args)
#define CPE_MULTIVERSION_OWN_AVX512(name, params, args)            \
    static void name##_portable params { name##_impl args; }       \
    CPE_COPY(CPE_AVX2_TARGET, name, _avx2, params, args)           \
    static void name params { CPE_DISPATCH(, name, args) }

/* ---- positions checked ----
 * *largest = the largest |x[i]|, i < n (0 when n is 0): infinity if one is
 * infinite, a NaN if one is NaN. Taken on the bits, sign cleared, whose order as
 * integers is the magnitudes' (a NaN's above infinity's): a reduction without
 * branches, which vectorizes where a comparison of doubles would not. */
CPE_ALWAYS_INLINE void cpe_largest_magnitude_impl(const double *x, Py_ssize_t n,
                                                  double *largest) {
    int64_t most = 0, bits;
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(&bits, x + i, 8);
        bits &= INT64_MAX;
        most = bits > most ? bits : most;
    }
    memcpy(largest, &most, 8);
}
CPE_MULTIVERSION(cpe_largest_magnitude, (const double *x, Py_ssize_t n, double *largest),
                 (x, n, largest))

/* ---- angle addition: the row of x_0 + x_1 + ... from up to four pair rows ----
 * Pair rows hold n sines then n cosines. acc = rows[0], then
 * acc = (sin, cos)(acc + rows[r]) for r = 1, 2, ...: the one complex product
 * (cpe_chain_step), the result stored in a layout. A single row is stored as it
 * is, its zeros +0 (see cpe_chain_impl). These loops are
 * memory- and multiply-bound; the SIMD copies run the same operations (no FMA)
 * as the portable one, so all give the same bits. */

CPE_ALWAYS_INLINE void cpe_chain_step(double *s, double *c, const double *a, Py_ssize_t j,
                                      Py_ssize_t n) {
    double a_s = a[j], a_c = a[n + j];
    double next_s = *s * a_c + *c * a_s;
    double next_c = *c * a_c - *s * a_s;
    *s = next_s;
    *c = next_c;
}

CPE_ALWAYS_INLINE void cpe_chain_impl(const double *r0, const double *r1, const double *r2,
                                      const double *r3, const int count, Py_ssize_t j,
                                      Py_ssize_t n, double *s, double *c) {
    if (count == 1) {
        /* The row's product with the identity (0, 1), 0 c + 1 s and 1 c - 0 s,
           has the bits of s + 0 and c + 0 but for signed zeros (s = -0 with
           c <= -0, c = -0 with s >= +0: rows of angles reduced to exactly pi/2
           or pi modulo 2 pi, as the frequencies of a caller can give): a zero
           is stored as +0, at half the arithmetic. */
        *s = r0[j] + 0.0;
        *c = r0[n + j] + 0.0;
        return;
    }
    *s = r0[j];
    *c = r0[n + j];
    if (count > 1) cpe_chain_step(s, c, r1, j, n);
    if (count > 2) cpe_chain_step(s, c, r2, j, n);
    if (count > 3) cpe_chain_step(s, c, r3, j, n);
}

/* The sine of column j, for the odd columns left over by the loops below. */
static double cpe_chain_sine(const double *const *rows, int count, Py_ssize_t j, Py_ssize_t n) {
    double s, c;
    cpe_chain_impl(rows[0], rows[1], rows[2], rows[3], count, j, n, &s, &c);
    return s;
}

#define CPE_CHAIN_LOOP(count, STORE)                                             \
    for (Py_ssize_t j = 0; j < n_pairs; j++) {                                  \
        double s, c;                                                             \
        cpe_chain_impl(r0, r1, r2, r3, count, j, n_freq, &s, &c);                \
        STORE;                                                                   \
    }
#define CPE_CHAIN_SWITCH(STORE)                                                  \
    const double *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];     \
    if (count == 1) {                                                            \
        CPE_CHAIN_LOOP(1, STORE)                                                 \
    } else if (count == 2) {                                                     \
        CPE_CHAIN_LOOP(2, STORE)                                                 \
    } else if (count == 3) {                                                     \
        CPE_CHAIN_LOOP(3, STORE)                                                 \
    } else {                                                                     \
        CPE_CHAIN_LOOP(4, STORE)                                                 \
    }

/* The layouts, for 1 <= count <= 4 rows (rows[count..3] may be anything readable
   as a pointer) and j < n_pairs, writing one or two arrays (first, second):
   interleaved (first[2j] = sin, first[2j + 1] = cos; second unused); blocked
   (first[j] = sin, second[j] = cos: the sin_cos and cos_sin layouts, and pair
   rows); RoPE's cos (first) and sin (second) tables, each value twice, as
   [v_0 .. v_{n-1}, v_0 .. v_{n-1}] ("half") or [v_0, v_0, v_1, v_1, ...]
   (n_pairs = n_freq = n, below). The two arrays never overlap: R is CPE_RESTRICT in the
   inlined bodies (_impl), whose loops then vectorize without run-time overlap
   checks, and empty in the functions that call them.
   RoPE's stores multiply every value by the attention factor (amplitude) in
   double before the one rounding to T: 1 leaves the bits of the product. They
   also place the values of frequency j at column c_j ("half": and c2_j;
   "interleaved": pair c_j): c_j = j and c2_j = half_at + j, or, when a map is
   given, c_j = columns[j] and c2_j = columns[n_freq + j] (a map of 2 n_freq
   columns, "half"; of n_freq pairs, interleaved), so that the frequencies of
   several axes go straight to their columns; a whole table is columns NULL,
   half_at n_freq. Their functions take
   these as more parameters: kind ROPE, where the others are kind PLAIN. */
#define CPE_CHAIN_EXTRA_PARAMS_PLAIN
#define CPE_CHAIN_EXTRA_PARAMS_ROPE , double amplitude, const Py_ssize_t *columns, Py_ssize_t half_at
#define CPE_CHAIN_EXTRA_ARGS_PLAIN
#define CPE_CHAIN_EXTRA_ARGS_ROPE , amplitude, columns, half_at
#define CPE_CHAIN_PARAMS(T, kind, R)                                                    \
    (T *R first, T *R second, const double *const *rows, int count, Py_ssize_t n_pairs, \
     Py_ssize_t n_freq CPE_CHAIN_EXTRA_PARAMS_##kind)
#define CPE_CHAIN_ARGS(kind) \
    (first, second, rows, count, n_pairs, n_freq CPE_CHAIN_EXTRA_ARGS_##kind)
#define CPE_CHAIN_STORE(T, kind, name, STORE)                                           \
    CPE_ALWAYS_INLINE void cpe_chain_##name##_##T##_impl                                \
    CPE_CHAIN_PARAMS(T, kind, CPE_RESTRICT) {                                           \
        CPE_CHAIN_SWITCH(STORE)                                                         \
    }
/* RoPE's: the loop without a column map written apart, where its stores are
   contiguous and vectorize as a whole table's. */
#define CPE_CHAIN_STORE_ROPE(T, name, STORE)                                            \
    CPE_ALWAYS_INLINE void cpe_chain_##name##_##T##_impl                                \
    CPE_CHAIN_PARAMS(T, ROPE, CPE_RESTRICT) {                                           \
        if (columns == NULL) {                                                          \
            CPE_CHAIN_SWITCH(STORE(j, half_at + j))                                     \
        } else {                                                                        \
            CPE_CHAIN_SWITCH(STORE(columns[j], columns[n_freq + j]))                    \
        }                                                                               \
    }
/* (at, at2: the columns of the two copies; interleaved, at is a pair and at2 is
   not read) */
#define CPE_ROPE_HALF(T, at, at2)                                                       \
    (first[at] = first[at2] = (T)(amplitude * c),                                       \
     second[at] = second[at2] = (T)(amplitude * s))
#define CPE_ROPE_INTERLEAVED(T, at, at2)                                                \
    (first[2 * (at)] = first[2 * (at) + 1] = (T)(amplitude * c),                        \
     second[2 * (at)] = second[2 * (at) + 1] = (T)(amplitude * s))
#define CPE_ROPE_HALF_double(at, at2) CPE_ROPE_HALF(double, at, at2)
#define CPE_ROPE_HALF_float(at, at2) CPE_ROPE_HALF(float, at, at2)
#define CPE_ROPE_INTERLEAVED_double(at, at2) CPE_ROPE_INTERLEAVED(double, at, at2)
#define CPE_ROPE_INTERLEAVED_float(at, at2) CPE_ROPE_INTERLEAVED(float, at, at2)
#define CPE_CHAIN_STORES(T)                                                             \
    CPE_CHAIN_STORE(T, PLAIN, interleaved, (first[2 * j] = (T)s, first[2 * j + 1] = (T)c)) \
    CPE_CHAIN_STORE(T, PLAIN, blocked, (first[j] = (T)s, second[j] = (T)c))             \
    CPE_CHAIN_STORE_ROPE(T, rope_half, CPE_ROPE_HALF_##T)                               \
    CPE_CHAIN_STORE_ROPE(T, rope_interleaved, CPE_ROPE_INTERLEAVED_##T)
CPE_CHAIN_STORES(double)
CPE_CHAIN_STORES(float)

#if CPE_X86_DISPATCH
#include <immintrin.h>
/* Interleaved float rows of two factors (the tables' rows): cpe_chain_step
   eight pairs at a time, rounded to float and interleaved by one vpermt2ps,
   which GCC's vectorization of the loop above does not find. */
CPE_AVX512_TARGET static void cpe_chain_interleaved_float_avx512 CPE_CHAIN_PARAMS(float, PLAIN, ) {
    const __m512i pairs = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19,
                                            4, 20, 5, 21, 6, 22, 7, 23);
    Py_ssize_t j = 0;
    for (; count == 2 && j + 8 <= n_pairs; j += 8) {
        __m512d s = _mm512_loadu_pd(rows[0] + j), c = _mm512_loadu_pd(rows[0] + n_freq + j);
        __m512d a_s = _mm512_loadu_pd(rows[1] + j), a_c = _mm512_loadu_pd(rows[1] + n_freq + j);
        __m512d next_s = _mm512_add_pd(_mm512_mul_pd(s, a_c), _mm512_mul_pd(c, a_s));
        __m512d next_c = _mm512_sub_pd(_mm512_mul_pd(c, a_c), _mm512_mul_pd(s, a_s));
        __m512 s8 = _mm512_castps256_ps512(_mm512_cvtpd_ps(next_s));
        __m512 c8 = _mm512_castps256_ps512(_mm512_cvtpd_ps(next_c));
        _mm512_storeu_ps(first + 2 * j, _mm512_permutex2var_ps(s8, pairs, c8));
    }
    const double *rest[4] = {rows[0], rows[1], rows[2], rows[3]};
    for (int r = 0; r < count; r++) rest[r] += j;
    cpe_chain_interleaved_float_impl(first + 2 * j, second, rest, count, n_pairs - j, n_freq);
}
#endif

#define CPE_CHAIN_MULTIVERSION(MULTIVERSION, T, kind, name) \
    MULTIVERSION(cpe_chain_##name##_##T, CPE_CHAIN_PARAMS(T, kind, ), CPE_CHAIN_ARGS(kind))
CPE_CHAIN_MULTIVERSION(CPE_MULTIVERSION, double, PLAIN, interleaved)
CPE_CHAIN_MULTIVERSION(CPE_MULTIVERSION_OWN_AVX512, float, PLAIN, interleaved)
CPE_CHAIN_MULTIVERSION(CPE_MULTIVERSION, double, PLAIN, blocked)
CPE_CHAIN_MULTIVERSION(CPE_MULTIVERSION, float, PLAIN, blocked)
CPE_CHAIN_MULTIVERSION(CPE_MULTIVERSION, double, ROPE, rope_half)
CPE_CHAIN_MULTIVERSION(CPE_MULTIVERSION, float, ROPE, rope_half)
CPE_CHAIN_MULTIVERSION(CPE_MULTIVERSION, double, ROPE, rope_interleaved)
CPE_CHAIN_MULTIVERSION(CPE_MULTIVERSION, float, ROPE, rope_interleaved)

/* A hint that the n bytes at p will be used soon (nothing else changes).
   Always inlined: a function that only prefetches has no effect the compiler
   must keep, and calls to it may be removed. */
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <xmmintrin.h>
CPE_ALWAYS_INLINE void cpe_prefetch_bytes(const char *p, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k += 64) _mm_prefetch(p + k, _MM_HINT_T0);
}
#elif defined(__GNUC__) || defined(__clang__)
CPE_ALWAYS_INLINE void cpe_prefetch_bytes(const char *p, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k += 64) __builtin_prefetch(p + k, 0, 3);
}
#else
CPE_ALWAYS_INLINE void cpe_prefetch_bytes(const char *p, Py_ssize_t n) { (void)p, (void)n; }
#endif
/* A row soon changed in place (x == y), or copied from x into y: its bytes
   (all of them: part of a row alone would leave the hardware's prefetcher, which
   follows whole lines in order, to fetch the rest late). */
CPE_ALWAYS_INLINE void cpe_prefetch_row(const char *x, const char *y, Py_ssize_t row_bytes) {
    cpe_prefetch_bytes(y, row_bytes);
    if (x != y) cpe_prefetch_bytes(x, row_bytes);
}

/* ---- the caller's values: loaded exactly, stored rounded once from double ----
 * float16 and bfloat16 are their bits (uint16_t): cpe_f16 and cpe_bf16. A double
 * is rounded once to either through float rounded to odd (of the two floats
 * around it, the one whose last bit is odd, unless it is exact), which keeps
 * enough bits for the second rounding, to nearest even, to give the nearest
 * value (Boldo and Melquiond, 2008). */
typedef uint16_t cpe_f16;
typedef uint16_t cpe_bf16;

CPE_ALWAYS_INLINE uint32_t cpe_float_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

CPE_ALWAYS_INLINE float cpe_float_of_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* d rounded to float, to odd: truncated toward zero (infinity becomes the largest
   float), then the last bit set when inexact; NaN stays NaN. */
CPE_ALWAYS_INLINE uint32_t cpe_odd_float_bits(double d) {
    float f = (float)d;
    uint32_t b = cpe_float_bits(f);
    b -= fabs((double)f) > fabs(d);
    b |= (double)f != d;
    return b;
}

CPE_ALWAYS_INLINE double cpe_load_bf16(cpe_bf16 h) {
    return (double)cpe_float_of_bits((uint32_t)h << 16);
}

CPE_ALWAYS_INLINE cpe_bf16 cpe_store_bf16(double d) {
    /* (Selected, not branched: the loops that store values then vectorize.) */
    uint32_t b = cpe_odd_float_bits(d);
    uint32_t nearest = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
    uint32_t nan = (b >> 16) | 0x0040u; /* a quiet NaN, its sign kept */
    return (cpe_bf16)(d != d ? nan : nearest);
}

CPE_ALWAYS_INLINE double cpe_load_f16(cpe_f16 h) {
    uint64_t sign = (uint64_t)(h & 0x8000u) << 48, bits;
    uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
    double value;
    if (exponent == 0) { /* zero or subnormal: mantissa * 2**-24, exact */
        value = (double)mantissa * 5.9604644775390625e-08;
        return sign ? -value : value;
    }
    bits = sign | ((uint64_t)mantissa << 42) |
           (exponent == 31 ? 0x7FF0000000000000u : (uint64_t)(exponent + 1008) << 52);
    memcpy(&value, &bits, 8);
    return value;
}

CPE_ALWAYS_INLINE cpe_f16 cpe_store_f16(double d) {
    uint32_t b = cpe_odd_float_bits(d), sign = (b >> 16) & 0x8000u, a = b & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (cpe_f16)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* NaN */
    if (a >= 0x477FF000u) return (cpe_f16)(sign | 0x7C00u); /* from 65520 on: infinity */
    if (a < 0x38800000u) { /* below 2**-14: multiples of 2**-24, to nearest even */
        float r = cpe_float_of_bits(a) * 16777216.0f;
        r = (r + 8388608.0f) - 8388608.0f;
        return (cpe_f16)(sign | (uint32_t)r);
    }
    a -= 0x38000000u; /* the exponent rebased, 127 to 15 */
    return (cpe_f16)(sign | ((a + 0x0FFFu + ((a >> 13) & 1u)) >> 13));
}

#define CPE_LOAD_double(v) (v)
#define CPE_LOAD_float(v) ((double)(v))
#define CPE_LOAD_cpe_f16(v) cpe_load_f16(v)
#define CPE_LOAD_cpe_bf16(v) cpe_load_bf16(v)
#define CPE_STORE_double(d) (d)
#define CPE_STORE_float(d) ((float)(d))
#define CPE_STORE_cpe_f16(d) cpe_store_f16(d)
#define CPE_STORE_cpe_bf16(d) cpe_store_bf16(d)

/* ---- rotation: RoPE applied in place to a row of the caller's ----
 * Pair j, (a[j], b[j]) ("half": a is the row, b its second half) or
 * (x[2j], x[2j + 1]) ("interleaved"), for j < n, is rotated by the angle whose
 * cosine and sine are c[j] and s[j]: (x1 c - x2 s, x2 c + x1 s), computed in
 * double from the pair's values and rounded once to T. As for the chains, every
 * copy runs the same operations (no FMA), so all give the same bits, a NaN's
 * payload aside (which of two NaNs an addition passes on is the compiler's
 * choice; a NaN and an infinity at a zero cosine or sine make two). */
#define CPE_ROTATE_PAIR(T, first, second)                                       \
    {                                                                           \
        double x1 = CPE_LOAD_##T(first), x2 = CPE_LOAD_##T(second);             \
        (first) = CPE_STORE_##T(x1 * c[j] - x2 * s[j]);                         \
        (second) = CPE_STORE_##T(x2 * c[j] + x1 * s[j]);                        \
    }
#define CPE_ROTATE_KERNELS(T, MULTIVERSION)                                     \
    CPE_ALWAYS_INLINE void cpe_rotate_half_##T##_impl(                          \
        T *CPE_RESTRICT a, T *CPE_RESTRICT b, const double *CPE_RESTRICT c,     \
        const double *CPE_RESTRICT s, Py_ssize_t n) {                           \
        for (Py_ssize_t j = 0; j < n; j++) CPE_ROTATE_PAIR(T, a[j], b[j])       \
    }                                                                           \
    CPE_ALWAYS_INLINE void cpe_rotate_interleaved_##T##_impl(                   \
        T *CPE_RESTRICT x, T *CPE_RESTRICT unused, const double *CPE_RESTRICT c, \
        const double *CPE_RESTRICT s, Py_ssize_t n) {                           \
        (void)unused;                                                           \
        for (Py_ssize_t j = 0; j < n; j++) CPE_ROTATE_PAIR(T, x[2 * j], x[2 * j + 1]) \
    }                                                                           \
    MULTIVERSION(cpe_rotate_half_##T,                                           \
                 (T * a, T * b, const double *c, const double *s, Py_ssize_t n),  \
                 (a, b, c, s, n))                                               \
    MULTIVERSION(cpe_rotate_interleaved_##T,                                    \
                 (T * a, T * b, const double *c, const double *s, Py_ssize_t n),  \
                 (a, b, c, s, n))
/* ---- the SIMD copies of the narrow floats' loops (float, float16, bfloat16) ----
 * GCC vectorizes the conversions above poorly (at 256 bits at most for the
 * 16-bit floats, with the rounding to odd spelled out; each float vector loaded
 * twice); these copies convert a vector at a time with the same roundings by
 * the same floating-point operations (so that they agree under flush-to-zero
 * too), so every value's bits are those of the scalar functions: a float
 * rounded to nearest (float), or rounded to odd (rounded to nearest, then
 * stepped toward zero when that went beyond, its last bit set when inexact),
 * then to nearest even on the float's bits (bfloat16) or by vcvtps2ph
 * (float16). (A NaN's payload aside: which NaN an operation passes on may
 * differ between copies.)
 * One loop per job, written once over the vector type (GCC's and Clang's vector
 * arithmetic), with per-instruction-set helpers:
 * load/store (a vector of doubles from or to T), loadu (doubles), pairs (the
 * lanes of a vector's first or second half each twice), swap (the lanes of
 * each pair swapped) and signs (-1, 1, -1, ...: x1 c + x2 (-s) and x2 c + x1 s
 * are the values x1 c - x2 s and x2 c + x1 s). */
#if CPE_X86_DISPATCH
#include <immintrin.h>
#define CPE_TARGET_avx512 CPE_AVX512_TARGET
#define CPE_TARGET_avx2 CPE_AVX2_TARGET

CPE_AVX512_TARGET static inline __m256i cpe_odd_float_bits_avx512(__m512d d) {
    __m256 f = _mm512_cvtpd_ps(d);
    __m512d back = _mm512_cvtps_pd(f);
    __mmask8 beyond = _mm512_cmp_pd_mask(_mm512_abs_pd(back), _mm512_abs_pd(d), _CMP_GT_OQ);
    __mmask8 inexact = _mm512_cmp_pd_mask(back, d, _CMP_NEQ_UQ);
    __m256i b = _mm256_castps_si256(f);
    b = _mm256_mask_sub_epi32(b, beyond, b, _mm256_set1_epi32(1));
    return _mm256_mask_or_epi32(b, inexact, b, _mm256_set1_epi32(1));
}
CPE_TARGET_avx2 static inline __m128i cpe_odd_float_bits_avx2(__m256d d) {
    const __m256d magnitude = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FFFFFFFFFFFFFFF));
    const __m256i low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    __m128 f = _mm256_cvtpd_ps(d);
    __m256d back = _mm256_cvtps_pd(f);
    __m256d beyond = _mm256_cmp_pd(_mm256_and_pd(back, magnitude), _mm256_and_pd(d, magnitude),
                                   _CMP_GT_OQ);
    __m256d inexact = _mm256_cmp_pd(back, d, _CMP_NEQ_UQ);
    __m128i beyond32 = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(beyond), low_halves));
    __m128i inexact32 = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), low_halves));
    __m128i b = _mm_add_epi32(_mm_castps_si128(f), beyond32); /* all ones: minus one */
    return _mm_or_si128(b, _mm_and_si128(inexact32, _mm_set1_epi32(1)));
}
/* bfloat16 of a float's bits: to nearest even; a NaN quiet, its sign kept. */
#define CPE_BF16_OF_FLOAT_BITS(VI, P, SI, b, out)                                    \
    {                                                                                \
        VI high = P##_srli_epi32(b, 16);                                             \
        VI nearest = P##_srli_epi32(P##_add_epi32(P##_add_epi32(b, P##_set1_epi32(0x7FFF)), \
                                                  P##_and_##SI(high, P##_set1_epi32(1))),   \
                                    16);                                             \
        VI nan = P##_cmpgt_epi32(P##_and_##SI(b, P##_set1_epi32(0x7FFFFFFF)),        \
                                 P##_set1_epi32(0x7F800000));                        \
        out = P##_blendv_epi8(nearest, P##_or_##SI(high, P##_set1_epi32(0x40)), nan); \
    }

CPE_AVX512_TARGET static inline __m512d cpe_loadu_avx512(const double *p) {
    return _mm512_loadu_pd(p);
}
CPE_AVX512_TARGET static inline __m512d cpe_pairs_avx512(__m512d v, int second) {
    return _mm512_permutexvar_pd(second ? _mm512_setr_epi64(4, 4, 5, 5, 6, 6, 7, 7)
                                        : _mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3), v);
}
CPE_AVX512_TARGET static inline __m512d cpe_swap_avx512(__m512d v) {
    return _mm512_permute_pd(v, 0x55);
}
CPE_AVX512_TARGET static inline __m512d cpe_signs_avx512(void) {
    return _mm512_setr_pd(-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0);
}
CPE_AVX512_TARGET static inline __m512d cpe_load_avx512_float(const float *p) {
    return _mm512_cvtps_pd(_mm256_loadu_ps(p));
}
CPE_AVX512_TARGET static inline void cpe_store_avx512_float(float *p, __m512d d) {
    _mm256_storeu_ps(p, _mm512_cvtpd_ps(d));
}
CPE_AVX512_TARGET static inline __m512d cpe_load_avx512_cpe_bf16(const cpe_bf16 *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
}
/* A double of magnitude in [2**-126, 2**128) is a bfloat16 normal (or infinity)
   once rounded: rounded to nearest even on its own bits at bit 45, its exponent
   rebased from 1023 to 127, it has the bits of cpe_store_bf16 (whose rounding
   through a float rounded to odd gives the nearest bfloat16 too), with no float
   conversion to obey flush-to-zero. Zeros keep their sign; a vector with any
   other value (a subnormal, infinity, NaN) goes the float route, by
   cpe_store_bf16's own operations (as the AVX2 copy does every vector). */
CPE_AVX512_TARGET static inline void cpe_store_avx512_cpe_bf16(cpe_bf16 *p, __m512d d) {
    const __m512i low = _mm512_set1_epi64(0x3810000000000000); /* 2**-126 */
    const __m512i span = _mm512_set1_epi64(0x47F0000000000000 - 0x3810000000000000);
    /* 2**44 - 1 (half of bit 45, less one) minus the exponents' offset, 896 << 52 */
    const __m512i half_rebased = _mm512_set1_epi64((int64_t)0xC8000FFFFFFFFFFFu);
    __m512i bits = _mm512_castpd_si512(d);
    __m512i a = _mm512_and_si512(bits, _mm512_set1_epi64(0x7FFFFFFFFFFFFFFF));
    __mmask8 normal = _mm512_cmplt_epu64_mask(_mm512_sub_epi64(a, low), span);
    __mmask8 zero = _mm512_cmpeq_epi64_mask(a, _mm512_setzero_si512());
    if (!_kortestc_mask8_u8(normal, zero)) { /* the float route, as cpe_store_bf16 */
        __m256i b = cpe_odd_float_bits_avx512(d), special;
        CPE_BF16_OF_FLOAT_BITS(__m256i, _mm256, si256, b, special)
        _mm_storeu_si128((__m128i *)p, _mm256_cvtepi32_epi16(special));
        return;
    }
    __m512i odd = _mm512_and_si512(_mm512_srli_epi64(a, 45), _mm512_set1_epi64(1));
    __m512i r = _mm512_maskz_srli_epi64(
        normal, _mm512_add_epi64(_mm512_add_epi64(a, half_rebased), odd), 45);
    /* r | (the sign, at bit 15) */
    __m512i out = _mm512_ternarylogic_epi64(r, _mm512_srli_epi64(bits, 48),
                                            _mm512_set1_epi64(0x8000), 0xF8);
    _mm_storeu_si128((__m128i *)p, _mm512_cvtepi64_epi16(out));
}
/* With AVX512_BF16: the double truncated to a float (which flush-to-zero does not
   touch at a normal float) and its last bit set when that dropped bits (the low
   29 of a double that becomes a normal float, or a larger one, which becomes the
   largest float, whose last bit is set) is the float rounded to odd; vcvtneps2bf16
   rounds it to nearest even, as cpe_store_bf16 does, and passes on a NaN as it
   does (quiet, sign and high bits kept). That instruction flushes subnormal
   floats, so a vector with a zero or subnormal float goes the way above. */
#define CPE_TARGET_avx512bf16 CPE_AVX512BF16_TARGET
CPE_AVX512BF16_TARGET static inline void cpe_store_avx512bf16_cpe_bf16(cpe_bf16 *p, __m512d d) {
    __m256 f = _mm512_cvt_roundpd_ps(d, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __mmask8 dropped = _mm512_test_epi64_mask(_mm512_castpd_si512(d),
                                              _mm512_set1_epi64(0x1FFFFFFF));
    __m256i b = _mm256_mask_or_epi32(_mm256_castps_si256(f), dropped, _mm256_castps_si256(f),
                                     _mm256_set1_epi32(1));
    f = _mm256_castsi256_ps(b);
    if (_mm256_fpclass_ps_mask(f, 0x02 | 0x04 | 0x20)) { /* +0, -0, subnormal */
        cpe_store_avx512_cpe_bf16(p, d);
        return;
    }
    __m128bh h = _mm256_cvtneps_pbh(f);
    _mm_storeu_si128((__m128i *)p, (__m128i)h);
}
/* Its other helpers are those of AVX-512. */
#define cpe_loadu_avx512bf16 cpe_loadu_avx512
#define cpe_pairs_avx512bf16 cpe_pairs_avx512
#define cpe_swap_avx512bf16 cpe_swap_avx512
#define cpe_signs_avx512bf16 cpe_signs_avx512
#define cpe_load_avx512bf16_cpe_bf16 cpe_load_avx512_cpe_bf16
CPE_AVX512_TARGET static inline __m512d cpe_load_avx512_cpe_f16(const cpe_f16 *p) {
    return _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
}
CPE_AVX512_TARGET static inline void cpe_store_avx512_cpe_f16(cpe_f16 *p, __m512d d) {
    __m256 odd = _mm256_castsi256_ps(cpe_odd_float_bits_avx512(d));
    _mm_storeu_si128((__m128i *)p,
                     _mm256_cvtps_ph(odd, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

CPE_TARGET_avx2 static inline __m256d cpe_loadu_avx2(const double *p) {
    return _mm256_loadu_pd(p);
}
CPE_TARGET_avx2 static inline __m256d cpe_pairs_avx2(__m256d v, int second) {
    return second ? _mm256_permute4x64_pd(v, 0xFA) : _mm256_permute4x64_pd(v, 0x50);
}
CPE_TARGET_avx2 static inline __m256d cpe_swap_avx2(__m256d v) {
    return _mm256_permute_pd(v, 0x5);
}
CPE_TARGET_avx2 static inline __m256d cpe_signs_avx2(void) {
    return _mm256_setr_pd(-1.0, 1.0, -1.0, 1.0);
}
CPE_TARGET_avx2 static inline __m256d cpe_load_avx2_float(const float *p) {
    return _mm256_cvtps_pd(_mm_loadu_ps(p));
}
CPE_TARGET_avx2 static inline void cpe_store_avx2_float(float *p, __m256d d) {
    _mm_storeu_ps(p, _mm256_cvtpd_ps(d));
}
CPE_TARGET_avx2 static inline __m256d cpe_load_avx2_cpe_bf16(const cpe_bf16 *p) {
    __m128i w = _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(w, 16)));
}
CPE_TARGET_avx2 static inline void cpe_store_avx2_cpe_bf16(cpe_bf16 *p, __m256d d) {
    __m128i b = cpe_odd_float_bits_avx2(d), out;
    CPE_BF16_OF_FLOAT_BITS(__m128i, _mm, si128, b, out)
    _mm_storel_epi64((__m128i *)p, _mm_packus_epi32(out, out));
}
CPE_TARGET_avx2 static inline __m256d cpe_load_avx2_cpe_f16(const cpe_f16 *p) {
    return _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p)));
}
CPE_TARGET_avx2 static inline void cpe_store_avx2_cpe_f16(cpe_f16 *p, __m256d d) {
    __m128 odd = _mm_castsi128_ps(cpe_odd_float_bits_avx2(d));
    _mm_storel_epi64((__m128i *)p,
                     _mm_cvtps_ph(odd, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* The loops, for T and an instruction set whose vectors V hold L doubles. */
#define CPE_NARROW_KERNELS_SIMD(T, isa, V, L)                                         \
    CPE_TARGET_##isa static void cpe_rotate_half_##T##_##isa(                     \
        T *a, T *b, const double *c, const double *s, Py_ssize_t n) {             \
        Py_ssize_t j = 0;                                                         \
        for (; j + L <= n; j += L) {                                              \
            V x1 = cpe_load_##isa##_##T(a + j), x2 = cpe_load_##isa##_##T(b + j);  \
            V cj = cpe_loadu_##isa(c + j), sj = cpe_loadu_##isa(s + j);           \
            cpe_store_##isa##_##T(a + j, x1 * cj - x2 * sj);                      \
            cpe_store_##isa##_##T(b + j, x2 * cj + x1 * sj);                      \
        }                                                                         \
        for (; j < n; j++) CPE_ROTATE_PAIR(T, a[j], b[j])                         \
    }                                                                             \
    CPE_TARGET_##isa static void cpe_rotate_interleaved_##T##_##isa(              \
        T *x, T *unused, const double *c, const double *s, Py_ssize_t n) {        \
        Py_ssize_t j = 0;                                                         \
        (void)unused;                                                             \
        for (; j + L <= n; j += L) {                                              \
            V cj = cpe_loadu_##isa(c + j), sj = cpe_loadu_##isa(s + j);           \
            for (int half = 0; half < 2; half++) {                                \
                V v = cpe_load_##isa##_##T(x + 2 * j + L * half);                 \
                V ss = cpe_pairs_##isa(sj, half) * cpe_signs_##isa();             \
                cpe_store_##isa##_##T(x + 2 * j + L * half,                       \
                                      v * cpe_pairs_##isa(cj, half) + cpe_swap_##isa(v) * ss); \
            }                                                                     \
        }                                                                         \
        for (; j < n; j++) CPE_ROTATE_PAIR(T, x[2 * j], x[2 * j + 1])             \
    }                                                                             \
    CPE_TARGET_##isa static void cpe_add_row_##T##_##isa(                         \
        T *x, const double *e, double x_scale, Py_ssize_t n) {                    \
        Py_ssize_t j = 0;                                                         \
        for (; j + L <= n; j += L)                                                \
            cpe_store_##isa##_##T(x + j, cpe_load_##isa##_##T(x + j) * x_scale    \
                                             + cpe_loadu_##isa(e + j));           \
        for (; j < n; j++) x[j] = CPE_STORE_##T(CPE_LOAD_##T(x[j]) * x_scale + e[j]); \
    }
CPE_NARROW_KERNELS_SIMD(float, avx512, __m512d, 8)
CPE_NARROW_KERNELS_SIMD(cpe_f16, avx512, __m512d, 8)
CPE_NARROW_KERNELS_SIMD(cpe_bf16, avx512, __m512d, 8)
CPE_NARROW_KERNELS_SIMD(cpe_bf16, avx512bf16, __m512d, 8)
CPE_NARROW_KERNELS_SIMD(float, avx2, __m256d, 4)
CPE_NARROW_KERNELS_SIMD(cpe_f16, avx2, __m256d, 4)
CPE_NARROW_KERNELS_SIMD(cpe_bf16, avx2, __m256d, 4)
/* The narrowing of a 16-bit table's rows (see below), a vector at a time. */
#define CPE_TABLE_NARROW_SIMD(T, isa, L)                                                  \
    CPE_TARGET_##isa static void cpe_narrow_##T##_##isa(const double *x, T *out, Py_ssize_t n) { \
        Py_ssize_t j = 0;                                                                  \
        for (; j + L <= n; j += L) cpe_store_##isa##_##T(out + j, cpe_loadu_##isa(x + j));  \
        for (; j < n; j++) out[j] = CPE_STORE_##T(x[j]);                                   \
    }
CPE_TABLE_NARROW_SIMD(cpe_f16, avx512, 8)
CPE_TABLE_NARROW_SIMD(cpe_bf16, avx512, 8)
CPE_TABLE_NARROW_SIMD(cpe_bf16, avx512bf16, 8)
CPE_TABLE_NARROW_SIMD(cpe_f16, avx2, 4)
CPE_TABLE_NARROW_SIMD(cpe_bf16, avx2, 4)
/* Both SIMD copies written above: the portable one and the dispatcher. */
#define CPE_MULTIVERSION_NARROW(name, params, args)          \
    static void name##_portable params { name##_impl args; } \
    static void name params { CPE_DISPATCH(, name, args) }
/* And bfloat16's, with the copy for AVX512_BF16. */
#define CPE_MULTIVERSION_BF16(name, params, args)             \
    static void name##_portable params { name##_impl args; } \
    static void name params {                                 \
        if (cpe_rows_level == 3) {                            \
            name##_avx512bf16 args;                           \
        } else {                                              \
            CPE_DISPATCH(, name, args)                        \
        }                                                     \
    }
#else
#define CPE_MULTIVERSION_NARROW CPE_MULTIVERSION
#define CPE_MULTIVERSION_BF16 CPE_MULTIVERSION
#endif

CPE_ROTATE_KERNELS(double, CPE_MULTIVERSION)
CPE_ROTATE_KERNELS(float, CPE_MULTIVERSION_NARROW)
CPE_ROTATE_KERNELS(cpe_f16, CPE_MULTIVERSION_NARROW)
CPE_ROTATE_KERNELS(cpe_bf16, CPE_MULTIVERSION_BF16)

/* ---- addition: an encoding added to a row of the caller's ----
 * x[j] * x_scale + e[j] for j < n, in double, rounded once to T (x_scale 1
 * leaves x[j] exact). */
#define CPE_ADD_KERNELS(T, MULTIVERSION)                                        \
    CPE_ALWAYS_INLINE void cpe_add_row_##T##_impl(T *CPE_RESTRICT x,             \
                                                  const double *CPE_RESTRICT e,  \
                                                  double x_scale, Py_ssize_t n) { \
        for (Py_ssize_t j = 0; j < n; j++)                                      \
            x[j] = CPE_STORE_##T(CPE_LOAD_##T(x[j]) * x_scale + e[j]);          \
    }                                                                           \
    MULTIVERSION(cpe_add_row_##T, (T * x, const double *e, double x_scale, Py_ssize_t n), \
                 (x, e, x_scale, n))
CPE_ADD_KERNELS(double, CPE_MULTIVERSION)
CPE_ADD_KERNELS(float, CPE_MULTIVERSION_NARROW)
CPE_ADD_KERNELS(cpe_f16, CPE_MULTIVERSION_NARROW)
CPE_ADD_KERNELS(cpe_bf16, CPE_MULTIVERSION_BF16)

/* ---- narrowing: the float64 rows of a 16-bit table on their way out ----
 * out[j] = x[j] rounded once to T, j < n, by the rotations' and additions'
 * stores. */
#define CPE_TABLE_NARROW(T, MULTIVERSION)                                        \
    CPE_ALWAYS_INLINE void cpe_narrow_##T##_impl(const double *CPE_RESTRICT x,   \
                                                 T *CPE_RESTRICT out, Py_ssize_t n) { \
        for (Py_ssize_t j = 0; j < n; j++) out[j] = CPE_STORE_##T(x[j]);        \
    }                                                                            \
    MULTIVERSION(cpe_narrow_##T, (const double *x, T *out, Py_ssize_t n), (x, out, n))
CPE_TABLE_NARROW(cpe_f16, CPE_MULTIVERSION_NARROW)
CPE_TABLE_NARROW(cpe_bf16, CPE_MULTIVERSION_BF16)

/* ---- streaming (non-temporal) stores ----
 * Large outputs are written without first reading every cache line, which is
 * what limits plain stores: the fill loop builds a chunk of rows in a buffer
 * that stays in L1 and streams it with cpe_stream_bytes (SSE2, part of every
 * x86-64 CPU, with AVX2 and AVX-512 copies). The caller ends a run of these with
 * cpe_stream_fence(). */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define CPE_HAVE_STREAM 1

static void cpe_stream_fence(void) { _mm_sfence(); }

/* n bytes from src to dst, dst 16-byte aligned, with non-temporal stores: 16
   bytes at a time up to a cache line boundary, then whole lines (of one store
   each in the AVX-512 copy, two in the AVX2 one), then 16 bytes at a time; the
   last n % 16 bytes (the end of an output) with ordinary stores. */
#define CPE_STREAM_BYTES_BODY(LINE)                                                     \
    size_t k = 0;                                                                       \
    for (; k + 16 <= n && ((uintptr_t)(dst + k) & 63); k += 16)                         \
        _mm_stream_si128((__m128i *)(dst + k), _mm_loadu_si128((const __m128i *)(src + k))); \
    for (; k + 64 <= n; k += 64) {                                                      \
        LINE;                                                                           \
    }                                                                                   \
    for (; k + 16 <= n; k += 16)                                                        \
        _mm_stream_si128((__m128i *)(dst + k), _mm_loadu_si128((const __m128i *)(src + k))); \
    if (k < n) memcpy(dst + k, src + k, n - k);

/* SSE2 (every x86-64 CPU): the portable copy. */
static void cpe_stream_bytes_portable(char *dst, const char *src, size_t n) {
    CPE_STREAM_BYTES_BODY(
        for (int q = 0; q < 64; q += 16) _mm_stream_si128(
            (__m128i *)(dst + k + q), _mm_loadu_si128((const __m128i *)(src + k + q))))
}
#if CPE_X86_DISPATCH
CPE_AVX2_TARGET static void cpe_stream_bytes_avx2(char *dst, const char *src, size_t n) {
    CPE_STREAM_BYTES_BODY(
        _mm256_stream_si256((__m256i *)(dst + k), _mm256_loadu_si256((const __m256i *)(src + k)));
        _mm256_stream_si256((__m256i *)(dst + k + 32),
                            _mm256_loadu_si256((const __m256i *)(src + k + 32))))
}
CPE_AVX512_TARGET static void cpe_stream_bytes_avx512(char *dst, const char *src, size_t n) {
    CPE_STREAM_BYTES_BODY(
        _mm512_stream_si512((void *)(dst + k), _mm512_loadu_si512((const void *)(src + k))))
}
#endif
static void cpe_stream_bytes(char *dst, const char *src, size_t n) {
    CPE_DISPATCH(, cpe_stream_bytes, (dst, src, n))
}
#else
#define CPE_HAVE_STREAM 0
static void cpe_stream_fence(void) {}
static void cpe_stream_bytes(char *dst, const char *src, size_t n) { memcpy(dst, src, n); }
#endif

#endif /* CPE_ROWS_H */
