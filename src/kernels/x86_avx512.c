/* x86-64 AVX-512 family (F, BW, VL, VNNI; with FMA and F16C): Intel Ice
 * Lake and later, AMD Zen 4 and later. Compiled with those flags for this
 * file only and chosen at run time (see family.h).
 *
 * fp32/fp16: one row at a time with two accumulators. Reading several rows
 * at once to share loads of x was measured 2.5x slower on short rows (the
 * 32000 x 288 classifier of stories15M): the decode loop is bound by streaming
 * the weights, and one stream per row keeps the prefetchers effective.
 *
 * q8_0: vpdpbusd multiplies unsigned by signed bytes, so the activations go
 * in as |q| and their signs move onto the weights (a masked negation), 64
 * bytes (two blocks) per instruction, two independent accumulators; block
 * scales are applied per lane after converting the int32 sums.
 *
 * q4_0: the nibbles are already unsigned (0..15), so they feed vpdpbusd
 * directly and the offset of 8 is the per-block term s (family.h). 64 bytes of
 * weights hold four blocks; their low nibbles are elements 0-15 of each block
 * and their high nibbles elements 16-31, so prep lays the activations of each
 * group of four blocks out in that order.
 *
 * k-quants (q4_K, q5_K, q6_K): vpdpbusd on the unsigned levels, one float
 * factor per sub-block (d * sc * dx) applied per lane, two rows at a time;
 * see the section below. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "family.h"

static int available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
}

static inline float hsum256(__m256 v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* ------------------------------------------------------------ fp32, fp16 */

static void rows_f32(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, n32 = n & ~31, n16 = n & ~15;
    const __mmask16 tail = (__mmask16)((1u << (n - n16)) - 1u);
    const float *x = a->x;
    for (int r = r0; r < r1; r++) {
        const float *w = (const float *)W->q + (size_t)r * n;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        for (int j = 0; j < n32; j += 32) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(x + j), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j + 16), _mm512_loadu_ps(x + j + 16), a1);
        }
        if (n16 > n32)
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + n32), _mm512_loadu_ps(x + n32), a0);
        if (tail)
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + n16), _mm512_maskz_loadu_ps(tail, x + n16), a1);
        float v = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

static void rows_f16(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, n32 = n & ~31, n16 = n & ~15;
    const __mmask16 tail = (__mmask16)((1u << (n - n16)) - 1u);
    const float *x = a->x;
    for (int r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)W->q + (size_t)r * n;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        for (int j = 0; j < n32; j += 32) {
            a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + j))),
                                 _mm512_loadu_ps(x + j), a0);
            a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + j + 16))),
                                 _mm512_loadu_ps(x + j + 16), a1);
        }
        if (n16 > n32)
            a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + n32))),
                                 _mm512_loadu_ps(x + n32), a0);
        if (tail)
            a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail, w + n16)),
                                 _mm512_maskz_loadu_ps(tail, x + n16), a1);
        float v = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        y[r - r0] = add ? y[r - r0] + v : v;
    }
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
 * and so were two rows at once (two streams: 11.3 against 12.1 GB/s). */
static inline void prefetch_l2(const void *p, int ahead)
{
    _mm_prefetch((const char *)p + ahead, _MM_HINT_T1);
}

static void rows_q8_0(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, nb = n / MI_QK;
    const __m512i zero = _mm512_setzero_si512();
    /* lanes 0-7 take block 2k's scale, lanes 8-15 block 2k+1's */
    const __m512i idx[4] = {
        _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
        _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
        _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6),
    };
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
                __m512i x0 = _mm512_loadu_si512(a->q + e), x1 = _mm512_loadu_si512(a->q + e + 64);
                __m512i w0 = _mm512_mask_sub_epi8(_mm512_loadu_si512(w + e), _mm512_movepi8_mask(x0), zero,
                                                  _mm512_loadu_si512(w + e));
                __m512i w1 = _mm512_mask_sub_epi8(_mm512_loadu_si512(w + e + 64), _mm512_movepi8_mask(x1), zero,
                                                  _mm512_loadu_si512(w + e + 64));
                __m512i d0 = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(x0), w0);
                __m512i d1 = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(x1), w1);
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(idx[k], s16), acc);
                acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(idx[k + 1], s16), acc1);
            }
        }
        acc = _mm512_add_ps(acc, acc1);
        for (; b + 2 <= nb; b += 2) {
            int e = b * MI_QK;
            __m512i x0 = _mm512_loadu_si512(a->q + e);
            __m512i wv = _mm512_mask_sub_epi8(_mm512_loadu_si512(w + e), _mm512_movepi8_mask(x0), zero,
                                              _mm512_loadu_si512(w + e));
            __m512i dot = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(x0), wv);
            __m512d lo = _mm512_castps_pd(_mm512_set1_ps(mi_f32_from_fp16(dw[b]) * a->d[b]));
            __m256d hi = _mm256_castps_pd(_mm256_set1_ps(mi_f32_from_fp16(dw[b + 1]) * a->d[b + 1]));
            __m512 sc = _mm512_castpd_ps(_mm512_insertf64x4(lo, hi, 1));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc);
        }
        float v = _mm512_reduce_add_ps(acc);
        if (b < nb) { /* one block left */
            int e = b * MI_QK;
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(a->q + e));
            __m256i wv = _mm256_loadu_si256((const __m256i *)(w + e));
            wv = _mm256_mask_sub_epi8(wv, _mm256_movepi8_mask(x0), _mm256_setzero_si256(), wv);
            __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(x0), wv);
            v += hsum256(_mm256_cvtepi32_ps(dot)) * (mi_f32_from_fp16(dw[b]) * a->d[b]);
        }
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* ------------------------------------------------------------ q4_0 */

/* int32 sums of four blocks (lanes 4j..4j+3 belong to block j) */
static inline __m512i dot4_q4(const uint8_t *w, const int8_t *xg)
{
    const __m512i lowmask = _mm512_set1_epi8(0x0f);
    __m512i v = _mm512_loadu_si512(w);
    __m512i lo = _mm512_and_si512(v, lowmask), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), lowmask);
    __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xg));
    return _mm512_dpbusd_epi32(dot, hi, _mm512_loadu_si512(xg + 64));
}

static void rows_q4_0(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, nb = n / MI_QK, nb4 = nb & ~3;
    /* lanes 4j..4j+3 take the scale of block j of the group */
    const __m512i idx[2] = {
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
        _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4),
    };
    const __m128i lowmask = _mm_set1_epi8(0x0f);
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
        float v_corr = 0.0f;
        if (b < nb4) { /* one group of four left */
            __m128 dw4 = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(dw + b)));
            __m512 s16 = _mm512_castps128_ps512(_mm_mul_ps(dw4, _mm_loadu_ps(a->d + b)));
            __m128 c4 = _mm_mul_ps(dw4, _mm_loadu_ps(a->s + b));
            c4 = _mm_add_ps(c4, _mm_movehl_ps(c4, c4));
            v_corr = _mm_cvtss_f32(_mm_add_ss(c4, _mm_movehdup_ps(c4)));
            __m512i dot = dot4_q4(w + b * (MI_QK / 2), a->q + b * MI_QK);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx[0], s16), acc);
            b += 4;
        }
        float v = _mm512_reduce_add_ps(acc) + hsum256(corr) + v_corr;
        for (; b < nb; b++) { /* up to three blocks, natural order */
            __m128i q = _mm_loadu_si128((const __m128i *)(w + b * (MI_QK / 2)));
            __m256i wv = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), lowmask), _mm_and_si128(q, lowmask));
            __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wv,
                                              _mm256_loadu_si256((const __m256i *)(a->q + b * MI_QK)));
            float dwf = mi_f32_from_fp16(dw[b]);
            v += dwf * (hsum256(_mm256_cvtepi32_ps(dot)) * a->d[b] + a->s[b]);
        }
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
/* A super-block's bytes, prefetched into L2 as q4_0's are: every 64th
 * byte of [p, p + span) 8 KB ahead, so that with consecutive super-blocks
 * each line is asked for at least once. In inline assembly: GCC 12 dropped
 * the _mm_prefetch calls from the q4_K and q5_K loops (not from q6_K's). */
static inline void prefetch_span(const uint8_t *p, int span)
{
    for (int o = 0; o < span; o += 64)
        __asm__ volatile("prefetcht1 %0" : : "m"(p[8192 + o]));
}

/* q4_K and q5_K (five: the fifth bits from qh). Per super-block one vector
 * of sixteen float factors: lanes 0-7 d * sc_j * dx_j, lanes 8-15
 * dmin * m_j * s_j (the mins' term, summed apart and subtracted at the end).
 * The levels (0..15 or 0..31) are unsigned and feed vpdpbusd directly; each
 * product's lanes 0-7 are one sub-block's, 8-15 another's, and take their
 * factor by a permute. The loop is bound by ports 0 and 5 (every 512-bit
 * operation goes there), so it spends as few as it can: q4_K's high nibbles
 * go in unshifted (16 times the level, at most 240) into their own
 * accumulator, scaled by 1/16 once a row (a power of two: the same rounding).
 *
 * Two rows at a time (each with its own accumulators and the same operations
 * in the same order as a row alone, so a row's bits do not depend on its
 * neighbour): with the per-super-block work about 1.5 times q4_0's, one
 * stream of weights left memory idle between demands; two streams decoded a
 * 2048 x 5632 q4_K matrix from memory at 11.0-11.3 GB/s against 9.0-9.4 for
 * one (1 thread, 7 alternating rounds, q4_0 12.8-13.7 in the same runs);
 * four streams were slower again (8.4). */

/* The 12 bytes of packed 6-bit scales and mins at p (see mi_kq_scales_mins)
 * as floats: lanes 0-7 the scales, 8-15 the mins. In vector registers: in
 * general-purpose ones (mi_kq_scales_mins, some 20 operations and two
 * transfers) q4_K ran at 20.2 GB/s from L2 against 21.1 this way. Reads 16
 * bytes (the 4 after the scales are the block's first values). */
static inline __m512 scales_mins(const uint8_t *p)
{
    /* lane i: byte i */
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    /* the low bits: sub-blocks 0-3 from bytes 0-3 (scales) and 4-7 (mins),
     * 4-7 from the nibbles of bytes 8-11 */
    __m512i lo = _mm512_permutexvar_epi32(_mm512_set_epi32(11, 10, 9, 8, 7, 6, 5, 4, 11, 10, 9, 8, 3, 2, 1, 0), b);
    lo = _mm512_srlv_epi32(lo, _mm512_set_epi32(4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
    /* the top two bits of sub-blocks 4-7: bits 6-7 of bytes 0-3 and 4-7, to bits 4-5 */
    __m512i hi = _mm512_permutexvar_epi32(_mm512_set_epi32(7, 6, 5, 4, 0, 0, 0, 0, 3, 2, 1, 0, 0, 0, 0, 0), b);
    hi = _mm512_and_si512(_mm512_srli_epi32(hi, 2),
                          _mm512_set_epi32(0x30, 0x30, 0x30, 0x30, 0, 0, 0, 0, 0x30, 0x30, 0x30, 0x30, 0, 0, 0, 0));
    const __m512i keep = _mm512_set_epi32(15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63);
    /* (lo & keep) | hi, as vpternlogd's truth table of A = 0xf0, B = 0xcc, C = 0xaa */
    return _mm512_cvtepi32_ps(_mm512_ternarylogic_epi32(lo, hi, keep, (0xf0 & 0xaa) | 0xcc));
}

/* One super-block's share of a q4_K/q5_K row: acc[0], acc[1] the products'
 * accumulators, acc[2] the mins' term. */
static inline __attribute__((always_inline)) void q45_step(const uint8_t *blk, int k, const mi_act *a, __m512 *acc,
                                                           const int five)
{
    const __m512i low = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10), zero = _mm512_setzero_si512();
    /* lanes 0-7 take sub-block j's factor, 8-15 sub-block j+2's */
    const __m512i idx[4] = {
        _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1),
        _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4),
        _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 5, 5, 5, 5, 5, 5, 5, 5),
    };
    /* d in lanes 0-7, dmin in 8-15 */
    const __m512i dd_idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    /* q5_K: qh's bit 2g is the fifth bit of sub-block 2g, 2g+1 of 2g+1; with
     * qh in both halves, these test the bits of the sub-blocks of each product */
    const __m512i bit[4] = {
        _mm512_inserti64x4(_mm512_set1_epi8(0x01), _mm256_set1_epi8(0x04), 1),
        _mm512_inserti64x4(_mm512_set1_epi8(0x02), _mm256_set1_epi8(0x08), 1),
        _mm512_inserti64x4(_mm512_set1_epi8(0x10), _mm256_set1_epi8(0x40), 1),
        _mm512_inserti64x4(_mm512_set1_epi8(0x20), _mm256_set1_epi8((char)0x80), 1),
    };
    __m512 scm = scales_mins(blk + 4);
    uint32_t dbits;
    memcpy(&dbits, blk, 4);
    __m512 dd = _mm512_permutexvar_ps(dd_idx, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dbits))));
    __m512d xs = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a->d + 8 * k))),
                                    _mm256_castps_pd(_mm256_loadu_ps(a->s + 8 * k)), 1);
    __m512 f = _mm512_mul_ps(_mm512_mul_ps(scm, dd), _mm512_castpd_ps(xs));
    acc[2] = _mm512_mask_add_ps(acc[2], (__mmask16)0xff00, acc[2], f);
    const uint8_t *qs = blk + (five ? 48 : 16);
    const int8_t *xq = a->q + (size_t)k * MI_QK_K;
    __m512i v0 = _mm512_loadu_si512(qs), v1 = _mm512_loadu_si512(qs + 64);
    __m512i l0 = _mm512_and_si512(v0, low), l1 = _mm512_and_si512(v1, low), h0, h1;
    if (!five) {
        h0 = _mm512_andnot_si512(low, v0);
        h1 = _mm512_andnot_si512(low, v1);
    } else {
        h0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), low);
        h1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), low);
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
        l0 = _mm512_mask_add_epi8(l0, _mm512_test_epi8_mask(qh, bit[0]), l0, b4);
        h0 = _mm512_mask_add_epi8(h0, _mm512_test_epi8_mask(qh, bit[1]), h0, b4);
        l1 = _mm512_mask_add_epi8(l1, _mm512_test_epi8_mask(qh, bit[2]), l1, b4);
        h1 = _mm512_mask_add_epi8(h1, _mm512_test_epi8_mask(qh, bit[3]), h1, b4);
    }
    __m512i d0 = _mm512_dpbusd_epi32(zero, l0, _mm512_loadu_si512(xq));
    __m512i d1 = _mm512_dpbusd_epi32(zero, h0, _mm512_loadu_si512(xq + 64));
    __m512i d2 = _mm512_dpbusd_epi32(zero, l1, _mm512_loadu_si512(xq + 128));
    __m512i d3 = _mm512_dpbusd_epi32(zero, h1, _mm512_loadu_si512(xq + 192));
    acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(idx[0], f), acc[0]);
    acc[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(idx[1], f), acc[1]);
    acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d2), _mm512_permutexvar_ps(idx[2], f), acc[0]);
    acc[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d3), _mm512_permutexvar_ps(idx[3], f), acc[1]);
}

/* a row's result from its accumulators (q4_K's high nibbles 16 times over) */
static inline float q45_total(const __m512 *acc, const int five)
{
    __m512 hi = five ? acc[1] : _mm512_mul_ps(acc[1], _mm512_set1_ps(1.0f / 16));
    return _mm512_reduce_add_ps(_mm512_add_ps(acc[0], hi)) - _mm512_reduce_add_ps(acc[2]);
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

/* q6_K: a half super-block's 64 low-nibble bytes and 32 high-bit bytes give
 * its 128 levels (0..63) as two 64-byte vectors in element order: low
 * nibbles with qh's bits 0-1 (bytes 0-31) and 2-3 (32-63), high nibbles with
 * bits 4-5 and 6-7; a per-half variable shift moves each pair to bits 4-5.
 * vpdpbusd takes them unsigned and the offset of 32 comes off as a second
 * vpdpbusd of 32s with the activations (exact in int32). Each product's lanes
 * are four sub-blocks of 16; lane j of the super-block's factor vector is
 * d * sc_j * dx of block j/2. */
static inline __attribute__((always_inline)) void q6_step(const uint8_t *blk, int k, const mi_act *a, __m512 *acc)
{
    const __m512i low = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i sh_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sh_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    /* lane j takes block j/2's dx */
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    /* lanes 4i..4i+3 of product p take sub-block 4p + i's factor */
    const __m512i idx[4] = {
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
        _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4),
        _mm512_set_epi32(11, 11, 11, 11, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 8, 8),
        _mm512_set_epi32(15, 15, 15, 15, 14, 14, 14, 14, 13, 13, 13, 13, 12, 12, 12, 12),
    };
    /* (A & C) | B, as vpternlogd's truth table of A = 0xf0, B = 0xcc, C = 0xaa */
    enum { A_AND_C_OR_B = (0xf0 & 0xaa) | 0xcc };
    uint16_t dh;
    memcpy(&dh, blk + 208, 2);
    __m256 dxd = _mm256_mul_ps(_mm256_loadu_ps(a->d + 8 * k), _mm256_set1_ps(_cvtsh_ss(dh)));
    __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192))));
    __m512 f = _mm512_mul_ps(sc, _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(dxd)));
    const int8_t *xq = a->q + (size_t)k * MI_QK_K;
    for (int h = 0; h < 2; h++) {
        __m512i L = _mm512_loadu_si512(blk + 64 * h);
        __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
        __m512i q0 =
            _mm512_ternarylogic_epi32(L, _mm512_and_si512(_mm512_sllv_epi16(H, sh_lo), m30), low, A_AND_C_OR_B);
        __m512i q1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(L, 4),
                                               _mm512_and_si512(_mm512_srlv_epi16(H, sh_hi), m30), low, A_AND_C_OR_B);
        __m512i x0 = _mm512_loadu_si512(xq + 128 * h), x1 = _mm512_loadu_si512(xq + 128 * h + 64);
        __m512i d0 = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, q0, x0), _mm512_dpbusd_epi32(zero, k32, x0));
        __m512i d1 = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, q1, x1), _mm512_dpbusd_epi32(zero, k32, x1));
        acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(idx[2 * h], f), acc[0]);
        acc[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(idx[2 * h + 1], f), acc[1]);
    }
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
};
