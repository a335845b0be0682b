/* Whether memory is mapped yet: what large outputs are written with, and where.
 *
 * A page of a new allocation is mapped by its first write: the kernel clears it
 * (which leaves it in the cache) and, for an anonymous mapping NumPy asked huge
 * pages for, maps 2 MiB at once where the mapping covers an aligned 2 MiB.
 * _engine.pyx streams large outputs only into memory already mapped (a streaming
 * store to a freshly cleared line first writes the zeros back to memory, see
 * docs/performance.md); _core.pyx moves a new large
 * output to a huge page boundary when NumPy's memory for it is not mapped yet.
 */
#ifndef CPE_MEMORY_H
#define CPE_MEMORY_H

/* mincore is a BSD/GNU extension: declared by <sys/mman.h> with this (Python.h,
   included first by Cython's modules, defines _GNU_SOURCE already). */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE
#endif

#include <stddef.h>
#include <stdint.h>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>

/* 1 if most of the n bytes at p are mapped to memory, 0 if most are not, -1 if
   that cannot be told (n below 16 pages, or mincore failed). 16 pages sampled
   evenly, none the first (the allocator writes its header there). Pages only
   read so far count as mapped (to the shared zero page): their first write
   still faults, rare enough in an output not to matter. */
static int cpe_mostly_mapped(const void *p, size_t n) {
    long page = sysconf(_SC_PAGESIZE);
    int samples = 16, mapped = 0;
    if (page <= 0 || n < (size_t)page * samples)
        return -1;
    for (int k = 0; k < samples; k++) {
        uintptr_t address = (uintptr_t)p + n / samples * k + n / (2 * samples);
        unsigned char resident = 0;
        if (mincore((void *)(address - address % (uintptr_t)page), 1, &resident) != 0)
            return -1;
        mapped += resident & 1;
    }
    return 2 * mapped >= samples;
}
#else
static int cpe_mostly_mapped(const void *p, size_t n) {
    (void)p;
    (void)n;
    return -1;
}
#endif

#endif /* CPE_MEMORY_H */
