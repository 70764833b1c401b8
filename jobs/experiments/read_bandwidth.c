/* How fast one core reads memory with no arithmetic: the ceiling of a
 * memory-bound decode on one thread. Sums a buffer of MB megabytes (huge
 * pages advised) with AVX-512 loads, as 1, 2, 4 and 8 interleaved streams,
 * without and with a software prefetch 2 KB ahead; 8 passes each, the first
 * dropped; prints the best and mean GB/s per variant and the best overall.
 *   cc -O3 -march=native -o /tmp/read_bandwidth jobs/experiments/read_bandwidth.c
 *   taskset -c 1 /tmp/read_bandwidth [MB]      (default 704: a 1B-parameter Q4_0 model's weights)
 * Needs AVX-512F. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_MONOTONIC under -std=c11 */
#define _DEFAULT_SOURCE           /* madvise */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    long mb = argc > 1 ? atol(argv[1]) : 704;
    if (mb < 64 || mb > 65536) {
        fprintf(stderr, "read_bandwidth: MB must be 64 to 65536 (a buffer well past the caches)\n");
        return 2;
    }
    size_t n = (size_t)mb << 20;
    char *b = aligned_alloc((size_t)2 << 20, n);
    if (!b) {
        fprintf(stderr, "read_bandwidth: cannot allocate %ld MB\n", mb);
        return 1;
    }
    madvise(b, n, MADV_HUGEPAGE);
    memset(b, 1, n);
    double top = 0;
    __m512i keep = _mm512_setzero_si512();
    for (int S = 1; S <= 8; S *= 2)
        for (int pf = 0; pf <= 2048; pf += 2048) {
            size_t h = n / (size_t)S / 128 * 128;
            double tot = 0, best = 1e30;
            for (int p = 0; p < 8; p++) {
                double t0 = now();
                __m512i a = _mm512_setzero_si512(), c = a;
                for (size_t j = 0; j < h; j += 128)
                    for (int s = 0; s < S; s++) {
                        const char *q = b + (size_t)s * h + j;
                        if (pf)
                            _mm_prefetch(q + pf, _MM_HINT_T0);
                        a = _mm512_add_epi32(a, _mm512_load_si512(q));
                        c = _mm512_add_epi32(c, _mm512_load_si512(q + 64));
                    }
                keep = _mm512_add_epi32(keep, _mm512_add_epi32(a, c));
                double d = now() - t0;
                if (p > 0) {
                    tot += d;
                    best = d < best ? d : best;
                }
            }
            double gb = (double)(h * (size_t)S) / 1e9;
            printf("%d stream%s, prefetch %4d B: best %5.1f GB/s, mean %5.1f\n", S, S > 1 ? "s" : " ", pf, gb / best,
                   gb * 7 / tot);
            top = gb / best > top ? gb / best : top;
        }
    printf("best %.1f GB/s (%ld MB; checksum bit %d)\n", top, mb, _mm512_reduce_add_epi32(keep) & 1);
    free(b);
    return 0;
}
