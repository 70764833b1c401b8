/* How fast can one core multiply q4_0 and q8_0 weights by 8 activation rows
 * at once, if every row keeps the row kernel's arithmetic (bit-identical
 * rows, src/kernels/family.h)? The numbers behind issue 27's kernel targets
 * in docs/results.md.
 *
 * Four loops, all data in L1 (4 KB of weights, 8 rows of 2 KB activations),
 * so nothing waits for memory; each reports multiply-accumulates per second
 * (one int8 weight times one int8 activation = 1 MAC):
 *   peak   vpdpbusd alone on 16 independent accumulators: the core's int8
 *          VNNI ceiling, with no decoding and no float work at all (8 chains
 *          reach only about 80% of it: the instruction's latency);
 *   q4_0   the AVX-512 q4_0 tile's inner loop as src/kernels/x86_avx512_tile.c
 *          has it (nibbles once per 8 blocks, then per row the scales, the
 *          offset term, 4 vpdpbusd, 2 conversions, 2 permutes, 2 FMAs);
 *   q4_0x  the same with the rows' scales expanded beforehand (no permute):
 *          the fewest float operations a row keeping the row kernel's order
 *          can do;
 *   q8_0   the q8_0 tile's inner loop (|w| and signs, 4 vpdpbusd, 4 sign
 *          flips, 4 conversions, 4 permutes, 4 FMAs per row and 8 blocks);
 *   q8_0u  q8_0 with the weights offset to unsigned bytes once per group and
 *          each row's lane sums started from -128 * (its four activations),
 *          computed beforehand: the same int32 sums without the sign flips
 *          (a kernel built on it was no faster from memory: results.md).
 * Medians of 7 runs of about 0.2 s each, on the CPU clock of this thread.
 * GROUPS sets the activations' size (16: 4 KB a row); the ratios held at 8
 * to 44 (up to 11 KB a row, past L1).
 *
 *   cc -O3 -march=native -I src/kernels -I include -o /tmp/tile_ceiling jobs/experiments/tile_ceiling.c
 * (-O3 as the kernels are built: at -O2 GCC 12 keeps the 8 rows' accumulators
 * in memory, and the q4_0 loop runs at 93 instead of 124 G MAC/s)
 *   taskset -c 1 /tmp/tile_ceiling
 */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "x86_avx512.h" /* the kernels' scale permutations */

#define ROWS 8
#define GROUPS 16 /* groups of 8 blocks (256 weights) in the weight buffer */

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint8_t w4[GROUPS * 128] __attribute__((aligned(64)));
static int8_t w8[GROUPS * 256] __attribute__((aligned(64)));
static int8_t xq[ROWS][GROUPS * 256] __attribute__((aligned(64)));
static float xd[ROWS][GROUPS * 8], xs[ROWS][GROUPS * 8], dwf[GROUPS * 8];
static float xe[ROWS][GROUPS * 32] __attribute__((aligned(64))); /* expanded: 16 lanes x 2 per group */
static uint16_t dw[GROUPS * 8];
static volatile float sink;

static void fill(void)
{
    uint32_t s = 12345;
    for (int i = 0; i < GROUPS * 128; i++)
        w4[i] = (uint8_t)((s = s * 1664525u + 1013904223u) >> 24);
    for (int i = 0; i < GROUPS * 256; i++)
        w8[i] = (int8_t)((s = s * 1664525u + 1013904223u) >> 24);
    for (int t = 0; t < ROWS; t++)
        for (int i = 0; i < GROUPS * 256; i++)
            xq[t][i] = (int8_t)((int)((s = s * 1664525u + 1013904223u) >> 25) - 64);
    for (int t = 0; t < ROWS; t++)
        for (int i = 0; i < GROUPS * 8; i++) {
            xd[t][i] = 0.01f + 0.001f * (float)(i % 7);
            xs[t][i] = 0.5f;
        }
    for (int i = 0; i < GROUPS * 8; i++) {
        dwf[i] = 0.02f;
        dw[i] = 0x2400; /* fp16 0.0156 */
    }
    for (int t = 0; t < ROWS; t++)
        for (int i = 0; i < GROUPS * 32; i++)
            xe[t][i] = xd[t][i / 4 % (GROUPS * 8)];
}

/* peak: 16 independent vpdpbusd chains, 64 MACs each */
static double run_peak(long iters)
{
    __m512i acc[16];
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_set1_epi32(i);
    const __m512i a = _mm512_load_si512(w4), b = _mm512_load_si512(xq[0]);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 16; i++) {
            acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
            __asm__ volatile("" : "+v"(acc[i]));
        }
    __m512i s = acc[0];
    for (int i = 1; i < 16; i++)
        s = _mm512_add_epi32(s, acc[i]);
    sink = (float)_mm512_reduce_add_epi32(s);
    return (double)iters * 16 * 64;
}

static double run_q4(long iters, int expanded)
{
    const __m512i idx[2] = MI_Q4_SCALE_IDX, idx0 = idx[0], idx1 = idx[1];
    const __m512i lowmask = _mm512_set1_epi8(0x0f);
    __m512 acc[ROWS];
    __m256 corr[ROWS];
    for (int t = 0; t < ROWS; t++) {
        acc[t] = _mm512_setzero_ps();
        corr[t] = _mm256_setzero_ps();
    }
    for (long it = 0; it < iters; it++) {
        const int g = (int)(it % GROUPS);
        __m256 dw8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dw + g * 8)));
        __m512i lo[2], hi[2];
        for (int k = 0; k < 2; k++) {
            __m512i v = _mm512_load_si512(w4 + g * 128 + 64 * k);
            lo[k] = _mm512_and_si512(v, lowmask);
            hi[k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), lowmask);
        }
        __m512 dwe0 = _mm512_permutexvar_ps(idx0, _mm512_castps256_ps512(dw8));
        __m512 dwe1 = _mm512_permutexvar_ps(idx1, _mm512_castps256_ps512(dw8));
        for (int t = 0; t < ROWS; t++) {
            const int8_t *x = xq[t] + g * 256;
            corr[t] = _mm256_fmadd_ps(dw8, _mm256_loadu_ps(xs[t] + g * 8), corr[t]);
            __m512 s0, s1;
            if (expanded) {
                s0 = _mm512_mul_ps(dwe0, _mm512_load_ps(xe[t] + g * 32));
                s1 = _mm512_mul_ps(dwe1, _mm512_load_ps(xe[t] + g * 32 + 16));
            } else {
                __m512 s16 = _mm512_castps256_ps512(_mm256_mul_ps(dw8, _mm256_loadu_ps(xd[t] + g * 8)));
                s0 = _mm512_permutexvar_ps(idx0, s16);
                s1 = _mm512_permutexvar_ps(idx1, s16);
            }
            __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], _mm512_load_si512(x));
            d0 = _mm512_dpbusd_epi32(d0, hi[0], _mm512_load_si512(x + 64));
            __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[1], _mm512_load_si512(x + 128));
            d1 = _mm512_dpbusd_epi32(d1, hi[1], _mm512_load_si512(x + 192));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), s0, acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), s1, acc[t]);
        }
    }
    float s = 0;
    for (int t = 0; t < ROWS; t++)
        s += _mm512_reduce_add_ps(acc[t]) + corr[t][0];
    sink = s;
    return (double)iters * ROWS * 256;
}

/* q8_0, as the tile has it (offset 0: |w| and its signs moved onto each
 * row's activations), or with the weights offset to unsigned (w + 128, one
 * xor per weight vector) and each row's -128 * (sum of 4 activations) per
 * lane, computed beforehand, as the accumulators' start: the same lane sums
 * without the per-row sign flips */
static int32_t xc[ROWS][GROUPS * 64] __attribute__((aligned(64)));
static double run_q8(long iters, const int offset)
{
    const __m512i idx[4] = MI_Q8_SCALE_IDX;
    const __m512i zero = _mm512_setzero_si512(), bias = _mm512_set1_epi8((char)0x80);
    __m512 acc[ROWS], acc1[ROWS];
    for (int t = 0; t < ROWS; t++)
        acc[t] = acc1[t] = _mm512_setzero_ps();
    for (long it = 0; it < iters; it++) {
        const int g = (int)(it % GROUPS);
        __m256 dw8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dw + g * 8)));
        __m512i uw[4];
        __mmask64 neg[4];
        for (int i = 0; i < 4; i++) {
            __m512i v = _mm512_load_si512(w8 + g * 256 + 64 * i);
            uw[i] = offset ? _mm512_xor_si512(v, bias) : _mm512_abs_epi8(v);
            neg[i] = offset ? 0 : _mm512_movepi8_mask(v);
        }
        for (int t = 0; t < ROWS; t++) {
            __m512 s16 = _mm512_castps256_ps512(_mm256_mul_ps(dw8, _mm256_loadu_ps(xd[t] + g * 8)));
            const int8_t *x = xq[t] + g * 256;
            const int32_t *c = xc[t] + g * 64;
            for (int i = 0; i < 4; i++) {
                __m512i xi = _mm512_load_si512(x + 64 * i);
                __m512i d = offset ? _mm512_dpbusd_epi32(_mm512_load_si512(c + 16 * i), uw[i], xi)
                                   : _mm512_dpbusd_epi32(zero, uw[i], _mm512_mask_sub_epi8(xi, neg[i], zero, xi));
                __m512 *a = i % 2 ? &acc1[t] : &acc[t];
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx[i], s16), *a);
            }
        }
    }
    float s = 0;
    for (int t = 0; t < ROWS; t++)
        s += _mm512_reduce_add_ps(_mm512_add_ps(acc[t], acc1[t]));
    sink = s;
    return (double)iters * ROWS * 256;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double gmacs(int which)
{
    double r[7];
    for (int k = 0; k < 7; k++) {
        long iters = which == 0 ? 20000000L : 2000000L;
        double t0 = cpu_now(), macs;
        switch (which) {
        case 0: macs = run_peak(iters / 16); break;
        case 1: macs = run_q4(iters, 0); break;
        case 2: macs = run_q4(iters, 1); break;
        case 3: macs = run_q8(iters, 0); break;
        default: macs = run_q8(iters, 1); break;
        }
        r[k] = macs / (cpu_now() - t0) * 1e-9;
    }
    qsort(r, 7, sizeof r[0], cmp);
    return r[3];
}

int main(void)
{
    fill();
    const char *names[] = {"peak", "q4_0", "q4_0x", "q8_0", "q8_0u"};
    const char *what[] = {"vpdpbusd alone, 16 chains", "the q4_0 tile's loop, 8 rows",
                          "q4_0 with pre-expanded scales, 8 rows", "the q8_0 tile's loop, 8 rows",
                          "q8_0 with unsigned weights, corrections beforehand, 8 rows"};
    printf("loop   G MAC/s  what\n");
    for (int i = 0; i < 5; i++)
        printf("%-6s %7.1f  %s\n", names[i], gmacs(i), what[i]);
    return 0;
}
