/* x86-64 AVX-512 family (F, BW, VL, VNNI; with FMA and F16C): Intel Ice
 * Lake and later, AMD Zen 4 and later. Compiled with those flags for this
 * file only and chosen at run time (see family.h).
 *
 * fp32/fp16 (the tile kernels of x86_avx512_tile.c at one activation row):
 * one weight row at a time with two accumulators. Reading several rows
 * at once to share loads of x was measured 2.5x slower on short rows (the
 * 32000 x 288 classifier of stories15M): the decode loop is bound by streaming
 * the weights, and one stream per row keeps the prefetchers effective.
 *
 * q8_0: vpdpbusd multiplies unsigned by signed bytes, so the weights go in
 * as |w| and their signs move onto the activations (a masked negation; this
 * way round every int8 weight, -128 too, gives its exact product, and a tile
 * kernel makes the weights' share once for all its activation rows), 64
 * bytes (two blocks) per instruction, two independent accumulators; block
 * scales are applied per lane after converting the int32 sums. (Four blocks
 * at a time as q4_0's, their halves permuted into two vectors so that each
 * lane sums eight products of one block, halved a tile kernel's converts and
 * FMAs, 3.7x the single-row throughput at 8 rows against 2.7x, but decoded
 * from memory 1.45-1.5x slower: not taken.)
 *
 * q4_0: the nibbles are already unsigned (0..15), so they feed vpdpbusd
 * directly and the offset of 8 is the per-block term s (family.h). 64 bytes of
 * weights hold four blocks; their low nibbles are elements 0-15 of each block
 * and their high nibbles elements 16-31, so prep lays the activations of each
 * group of four blocks out in that order. (One lane per block, sixteen blocks
 * at a time with their 32-bit words transposed, gives exact block sums, which
 * a tile kernel could make with AMX and keep the row kernel's bits; it decoded
 * from memory 1.24-1.42x slower, and the AMX tile built on it was only 1.1x
 * the VNNI one at 64 rows: not taken. See docs/results.md.)
 *
 * k-quants (q4_K, q5_K, q6_K): vpdpbusd on the unsigned levels, one float
 * factor per sub-block (d * sc * dx) applied per lane, two rows at a time;
 * see x86_avx512.h.
 *
 * Products of several activation rows: x86_avx512_tile.c. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "x86_avx512.h"

static int available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
}

/* ------------------------------------------------------------ fp32, fp16 */

static void rows_f32(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    mi_avx512_tile_f32(y, 0, W, r0, r1, a, 1, add);
}

static void rows_f16(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    mi_avx512_tile_f16(y, 0, W, r0, r1, a, 1, add);
}

/* ------------------------------------------------------- activations */

/* Quantize one block (the shared rule) into 32 int8 at q; returns d and
 * the block's sum of q. */
static inline float quantize_block(const float *x, int8_t *q, int *sum)
{
    __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    /* ordered compare: false for NaN and for infinity, so both mark the block */
    if ((__mmask16)(_mm512_cmp_ps_mask(_mm512_abs_ps(x0), big, _CMP_LE_OQ) &
                    _mm512_cmp_ps_mask(_mm512_abs_ps(x1), big, _CMP_LE_OQ)) != (__mmask16)0xffff) {
        memset(q, 0, MI_QK);
        *sum = 0;
        return NAN;
    }
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    __m512 vid = _mm512_set1_ps(id);
    __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)); /* round to nearest even */
    __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
    __m512i lim = _mm512_set1_epi32(127);
    i0 = _mm512_max_epi32(_mm512_min_epi32(i0, lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
    i1 = _mm512_max_epi32(_mm512_min_epi32(i1, lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(i0));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(i1));
    return d;
}

/* q8_0: natural order. (The kernel recomputes |q| and the signs from q: two
 * register operations are cheaper than a second activation stream competing
 * with the weights for L1, measured 10-20% faster on rows from memory.) */
static void prep_natural(const float *x, int n, void *scratch, mi_act *a, int mult)
{
    int nb = n / MI_QK;
    float *d, *s;
    int8_t *q;
    mi_act_layout(scratch, x, n, a, &d, &s, &q);
    for (int b = 0; b < nb; b++) {
        int sum;
        d[b] = quantize_block(x + b * MI_QK, q + b * MI_QK, &sum);
        s[b] = (float)(mult * sum) * d[b]; /* mult -8: q4_0's offset terms; 1: k-quant block sums */
    }
}

static void prep_q8_0(const float *x, int n, void *scratch, mi_act *a)
{
    prep_natural(x, n, scratch, a, -8);
}

/* q4_0: each group of four blocks laid out as elements 0-15 of blocks 0..3,
 * then elements 16-31 of blocks 0..3 (the order of the weights' low and high
 * nibbles); blocks after the last full group in natural order. */
static void prep_q4_0(const float *x, int n, void *scratch, mi_act *a)
{
    int nb = n / MI_QK, nb4 = nb & ~3;
    float *d, *s;
    int8_t *q;
    mi_act_layout(scratch, x, n, a, &d, &s, &q);
    int8_t tmp[MI_QK];
    for (int b = 0; b < nb; b++) {
        int sum;
        d[b] = quantize_block(x + b * MI_QK, tmp, &sum);
        s[b] = (float)(-8 * sum) * d[b];
        if (b < nb4) {
            int8_t *g = q + (b & ~3) * MI_QK;
            memcpy(g + (b & 3) * 16, tmp, 16);
            memcpy(g + 64 + (b & 3) * 16, tmp + 16, 16);
        } else {
            memcpy(q + b * MI_QK, tmp, MI_QK);
        }
    }
}

/* ------------------------------------------------------------ q8_0 */

/* The block kernels issue several times fewer loads per byte than the fp
 * loops, and the hardware prefetcher alone then leaves bandwidth unused on
 * rows from memory: a software prefetch 4 KB ahead (harmless past a row's
 * end: a prefetch never faults) was measured faster for the AVX2 family. */
static inline void prefetch(const void *p)
{
    _mm_prefetch((const char *)p + 4096, _MM_HINT_T0);
}

/* q4_0 reads half the bytes per element of q8_0: its weights prefetched
 * into L2 only, 8 KB ahead, decoded a Llama-3.2-1B-shape Q4_0 model at a
 * median 21.2 tokens/s against 19.9 prefetched into L1 4 KB ahead (1 thread,
 * 4 alternating rounds). Also prefetching the block scales was slower (18.9),
 * and so were two rows at once (two streams: 11.3 against 12.1 GB/s; again
 * later, each row with its own accumulators interleaved group by group as the
 * k-quants do: 1.22-1.24x slower on 2048 x 5632 and 8192 x 2048 from memory,
 * 9 alternating runs). */
static inline void prefetch_l2(const void *p, int ahead)
{
    _mm_prefetch((const char *)p + ahead, _MM_HINT_T1);
}

static void rows_q8_0(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, nb = n / MI_QK;
    /* lanes 0-7 take block 2k's scale, lanes 8-15 block 2k+1's */
    const __m512i idx[4] = MI_Q8_SCALE_IDX;
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->q + (size_t)r * n;
        const uint16_t *dw = W->d + (size_t)r * nb;
        __m512 acc = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            __m256 s8 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dw + b))),
                                      _mm256_loadu_ps(a->d + b));
            __m512 s16 = _mm512_castps256_ps512(s8);
            for (int k = 0; k < 4; k += 2) {
                int e = (b + 2 * k) * MI_QK;
                prefetch(w + e);
                prefetch(w + e + 64);
                __m512i w0 = _mm512_loadu_si512(w + e), w1 = _mm512_loadu_si512(w + e + 64);
                __m512i d0 = dot2_q8(_mm512_abs_epi8(w0), _mm512_movepi8_mask(w0), _mm512_loadu_si512(a->q + e));
                __m512i d1 =
                    dot2_q8(_mm512_abs_epi8(w1), _mm512_movepi8_mask(w1), _mm512_loadu_si512(a->q + e + 64));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(idx[k], s16), acc);
                acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(idx[k + 1], s16), acc1);
            }
        }
        float v = q8_0_finish(w, dw, b, nb, a, acc, acc1);
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* ------------------------------------------------------------ q4_0 */

static void rows_q4_0(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, nb = n / MI_QK;
    /* lanes 4j..4j+3 take the scale of block j of the group */
    const __m512i idx[2] = MI_Q4_SCALE_IDX;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * (n / 2);
        const uint16_t *dw = W->d + (size_t)r * nb;
        __m512 acc = _mm512_setzero_ps();
        __m256 corr = _mm256_setzero_ps();
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            __m256 dw8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dw + b)));
            __m512 s16 = _mm512_castps256_ps512(_mm256_mul_ps(dw8, _mm256_loadu_ps(a->d + b)));
            corr = _mm256_fmadd_ps(dw8, _mm256_loadu_ps(a->s + b), corr);
            for (int k = 0; k < 2; k++) {
                int g = b + 4 * k;
                prefetch_l2(w + g * (MI_QK / 2), 8192);
                __m512i dot = dot4_q4(w + g * (MI_QK / 2), a->q + g * MI_QK);
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx[k], s16), acc);
            }
        }
        float v = q4_0_finish(w, dw, b, nb, a, acc, corr);
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* ------------------------------------------------------------ k-quants */

/* q4_K/q5_K's activation order: a super-block's eight blocks as 0 2 1 3 4 6
 * 5 7 (the permutation is its own inverse). 64 bytes of values hold two
 * groups of 64 elements; their low nibbles are sub-blocks 2g and 2g+2, their
 * high nibbles 2g+1 and 2g+3, so each 64-byte run of activations then meets
 * one nibble half. Blocks past the last whole super-block (none in a k-quant
 * product, whose rows are whole super-blocks) stay in place. */
static inline int kq_pos(int b, int nb8)
{
    int j = b & 7;
    return b < nb8 ? (b & ~7) | (j & 4) | ((j & 1) << 1) | ((j >> 1) & 1) : b;
}

static void prep_q45_K(const float *x, int n, void *scratch, mi_act *a)
{
    int nb = n / MI_QK, nb8 = nb & ~7;
    float *d, *s;
    int8_t *q;
    mi_act_layout(scratch, x, n, a, &d, &s, &q);
    for (int b = 0; b < nb; b++) {
        int sum;
        d[b] = quantize_block(x + b * MI_QK, q + kq_pos(b, nb8) * MI_QK, &sum);
        s[b] = (float)sum * d[b];
    }
}

/* q6_K: natural order (its level vectors come out in element order). */
static void prep_q6_K(const float *x, int n, void *scratch, mi_act *a)
{
    prep_natural(x, n, scratch, a, 1);
}

/* A super-block's bytes, prefetched into L2 as q4_0's are: every 64th
 * byte of [p, p + span) 8 KB ahead, so that with consecutive super-blocks
 * each line is asked for at least once. In inline assembly: GCC 12 dropped
 * the _mm_prefetch calls from the q4_K and q5_K loops (not from q6_K's). */
static inline void prefetch_span(const uint8_t *p, int span)
{
    for (int o = 0; o < span; o += 64)
        __asm__ volatile("prefetcht1 %0" : : "m"(p[8192 + o]));
}

/* q4_K and q5_K: see x86_avx512.h. */
static inline __attribute__((always_inline)) void q45_step(const uint8_t *blk, int k, const mi_act *a, __m512 *acc,
                                                           const int five)
{
    q45_w w;
    q45_decode(blk, &w, five);
    q45_apply(&w, k, a, acc);
}

static inline __attribute__((always_inline)) void rows_q45(float *y, const mi_tensor *W, int r0, int r1,
                                                           const mi_act *a, int add, const int five)
{
    const int ns = W->cols / MI_QK_K;
    const int bb = five ? 176 : 144;
    int r = r0;
    for (; r + 2 <= r1; r += 2) {
        const uint8_t *w0 = (const uint8_t *)W->q + (size_t)r * ns * bb, *w1 = w0 + (size_t)ns * bb;
        __m512 acc0[3] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        __m512 acc1[3] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int k = 0; k < ns; k++) {
            prefetch_span(w0 + (size_t)k * bb, bb);
            prefetch_span(w1 + (size_t)k * bb, bb);
            q45_step(w0 + (size_t)k * bb, k, a, acc0, five);
            q45_step(w1 + (size_t)k * bb, k, a, acc1, five);
        }
        float v0 = q45_total(acc0, five), v1 = q45_total(acc1, five);
        y[r - r0] = add ? y[r - r0] + v0 : v0;
        y[r + 1 - r0] = add ? y[r + 1 - r0] + v1 : v1;
    }
    for (; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;
        __m512 acc[3] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int k = 0; k < ns; k++) {
            prefetch_span(w + (size_t)k * bb, bb);
            q45_step(w + (size_t)k * bb, k, a, acc, five);
        }
        float v = q45_total(acc, five);
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

static void rows_q4_K(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    rows_q45(y, W, r0, r1, a, add, 0);
}

static void rows_q5_K(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    rows_q45(y, W, r0, r1, a, add, 1);
}

/* q6_K: see x86_avx512.h. */
static inline __attribute__((always_inline)) void q6_step(const uint8_t *blk, int k, const mi_act *a, __m512 *acc)
{
    q6_w w;
    q6_decode(blk, &w);
    q6_apply(&w, k, a, acc);
}

/* Two rows at a time, as rows_q45. */
static void rows_q6_K(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int ns = W->cols / MI_QK_K, bb = 210;
    int r = r0;
    for (; r + 2 <= r1; r += 2) {
        const uint8_t *w0 = (const uint8_t *)W->q + (size_t)r * ns * bb, *w1 = w0 + (size_t)ns * bb;
        __m512 acc0[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
        __m512 acc1[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int k = 0; k < ns; k++) {
            prefetch_span(w0 + (size_t)k * bb, bb);
            prefetch_span(w1 + (size_t)k * bb, bb);
            q6_step(w0 + (size_t)k * bb, k, a, acc0);
            q6_step(w1 + (size_t)k * bb, k, a, acc1);
        }
        float v0 = _mm512_reduce_add_ps(_mm512_add_ps(acc0[0], acc0[1]));
        float v1 = _mm512_reduce_add_ps(_mm512_add_ps(acc1[0], acc1[1]));
        y[r - r0] = add ? y[r - r0] + v0 : v0;
        y[r + 1 - r0] = add ? y[r + 1 - r0] + v1 : v1;
    }
    for (; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;
        __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int k = 0; k < ns; k++) {
            prefetch_span(w + (size_t)k * bb, bb);
            q6_step(w + (size_t)k * bb, k, a, acc);
        }
        float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

const mi_kernel_family mi_kernels_avx512 = {
    "avx512",
    available,
    {NULL, NULL, prep_q8_0, prep_q4_0, prep_q45_K, prep_q45_K, prep_q6_K},
    {rows_f32, rows_f16, rows_q8_0, rows_q4_0, rows_q4_K, rows_q5_K, rows_q6_K},
    {mi_avx512_tile_f32, mi_avx512_tile_f16, mi_avx512_tile_q8_0, mi_avx512_tile_q4_0, mi_avx512_tile_q4_K,
     mi_avx512_tile_q5_K, mi_avx512_tile_q6_K},
};
