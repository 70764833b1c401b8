/* x86-64 AVX2 family (with FMA and F16C): Intel Haswell and later, AMD Zen
 * and later. Compiled with those flags for this file only and chosen at run
 * time (see family.h).
 *
 * fp32/fp16 (the tile kernels of x86_avx2_tile.c at one activation row):
 * one weight row at a time with four accumulators (four-cycle FMA
 * latency, two FMA pipes). Reading several rows at once, or a row in column
 * chunks, was measured much slower: the decode loop is bound by streaming the
 * weights, and one forward stream keeps the hardware prefetchers effective.
 *
 * q8_0: vpmaddubsw multiplies unsigned by signed bytes, so the activations go
 * in as |q| and their signs move onto the weights with vpsignb; with |w|,
 * |q| <= 127 a pair sum is at most 32258 and never saturates (x86_avx2.h).
 * vpmaddwd with ones widens to int32, and each block's sums take their scale
 * dw * dx in one FMA. |q| is recomputed from q rather than stored: one more
 * ALU operation per block, but half the activation bytes in L1, which the
 * weight stream would otherwise evict on rows of a few thousand columns.
 *
 * q4_0: the nibbles are already unsigned (0..15), so they feed vpmaddubsw
 * directly and the offset of 8 is the per-block term s (family.h). 32 bytes
 * of weights hold two blocks; their low nibbles are elements 0-15 of each
 * block and their high nibbles elements 16-31, so prep lays the activations
 * of each pair of blocks out in that order.
 *
 * The block kernels prefetch the weights 4 KB ahead: they issue several times
 * more instructions per weight byte than the fp loops, so the out-of-order
 * window alone covers too little of the memory latency (measured +20-50%
 * on rows from memory; the fp loops got slower with it). A prefetch is a
 * hint that never faults, so running past the last row is harmless.
 *
 * k-quants (q4_K, q5_K, q6_K): vpmaddubsw on the unsigned levels, one float
 * factor per sub-block (d * sc * dx) applied per lane; see x86_avx2.h.
 *
 * Products of several activation rows: x86_avx2_tile.c. */
#include <cpuid.h>
#include <float.h>
#include <math.h>
#include <immintrin.h>
#include <string.h>

#include "x86_avx2.h"

static int available(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return 0;
    /* F16C straight from CPUID (leaf 1, ECX bit 29): clang before 16 has no
     * "f16c" for __builtin_cpu_supports; the AVX2 test above already covers
     * the OS saving the YMM registers */
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

/* ------------------------------------------------------------ fp32, fp16 */

static void rows_f32(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    mi_avx2_tile_f32(y, 0, W, r0, r1, a, 1, add);
}

static void rows_f16(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    mi_avx2_tile_f16(y, 0, W, r0, r1, a, 1, add);
}

/* ------------------------------------------------------- activations */

/* Quantize one block (the shared rule); returns d, the block's 32 int8 in
 * natural order in *q and their sum in *sum. */
static inline float quantize_block(const float *x, __m256i *q, int *sum)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
    __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
    /* a NaN or infinity marks the whole block (family.h): ordered compares
     * are false for both */
    const __m256 big = _mm256_set1_ps(FLT_MAX);
    __m256 ok = _mm256_and_ps(_mm256_cmp_ps(_mm256_and_ps(x0, absmask), big, _CMP_LE_OQ),
                              _mm256_cmp_ps(_mm256_and_ps(x1, absmask), big, _CMP_LE_OQ));
    ok = _mm256_and_ps(ok, _mm256_and_ps(_mm256_cmp_ps(_mm256_and_ps(x2, absmask), big, _CMP_LE_OQ),
                                         _mm256_cmp_ps(_mm256_and_ps(x3, absmask), big, _CMP_LE_OQ)));
    if (_mm256_movemask_ps(ok) != 0xff) {
        *q = _mm256_setzero_si256();
        *sum = 0;
        return NAN;
    }
    /* vmaxps returns its second operand when either is NaN: with the running
     * maximum second, a NaN element is skipped as the scalar rule's
     * "a > amax ? a : amax" skips it, and the maximum is never NaN */
    __m256 m = _mm256_max_ps(_mm256_and_ps(x0, absmask), _mm256_setzero_ps());
    m = _mm256_max_ps(_mm256_and_ps(x1, absmask), m);
    m = _mm256_max_ps(_mm256_and_ps(x2, absmask), m);
    m = _mm256_max_ps(_mm256_and_ps(x3, absmask), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float amax = _mm_cvtss_f32(h);
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    __m256 vid = _mm256_set1_ps(id);
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    /* vcvtps2dq rounds to nearest even under the default MXCSR, like nearbyintf */
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(x0, vid)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(x1, vid));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(x2, vid)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(x3, vid));
    i0 = _mm256_max_epi32(_mm256_min_epi32(i0, lim), nlim);
    i1 = _mm256_max_epi32(_mm256_min_epi32(i1, lim), nlim);
    i2 = _mm256_max_epi32(_mm256_min_epi32(i2, lim), nlim);
    i3 = _mm256_max_epi32(_mm256_min_epi32(i3, lim), nlim);
    *sum = hsum256_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    /* the packs work within 128-bit lanes: dwords come out as
     * 0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31; one dword permute restores the order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    *q = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    return d;
}

/* Natural order, s[b] = (float)(mult * sum of q) * d[b]: mult -8 gives
 * q4_0's offset terms, 1 the k-quants' block sums (family.h). */
static void prep_natural(const float *x, int n, void *scratch, mi_act *a, int mult)
{
    int nb = n / MI_QK;
    float *d, *s;
    int8_t *q;
    mi_act_layout(scratch, x, n, a, &d, &s, &q);
    for (int b = 0; b < nb; b++) {
        int sum;
        __m256i v;
        d[b] = quantize_block(x + b * MI_QK, &v, &sum);
        s[b] = (float)(mult * sum) * d[b];
        _mm256_store_si256((__m256i *)(q + b * MI_QK), v);
    }
}

/* q8_0: natural order. */
static void prep_q8_0(const float *x, int n, void *scratch, mi_act *a)
{
    prep_natural(x, n, scratch, a, -8);
}

/* q4_0: each pair of blocks laid out as elements 0-15 of both blocks, then
 * elements 16-31 of both (the order of the weights' low and high nibbles in
 * one 32-byte load); a last odd block in natural order. */
static void prep_q4_0(const float *x, int n, void *scratch, mi_act *a)
{
    int nb = n / MI_QK, nb2 = nb & ~1;
    float *d, *s;
    int8_t *q;
    mi_act_layout(scratch, x, n, a, &d, &s, &q);
    for (int b = 0; b < nb; b++) {
        int sum;
        __m256i v;
        d[b] = quantize_block(x + b * MI_QK, &v, &sum);
        s[b] = (float)(-8 * sum) * d[b];
        if (b < nb2) {
            int8_t *g = q + (b & ~1) * MI_QK + (b & 1) * 16;
            _mm_store_si128((__m128i *)g, _mm256_castsi256_si128(v));
            _mm_store_si128((__m128i *)(g + 32), _mm256_extracti128_si256(v, 1));
        } else {
            _mm256_store_si256((__m256i *)(q + b * MI_QK), v);
        }
    }
}

#define PREFETCH_BYTES 4096

static inline void prefetch(const void *p)
{
    _mm_prefetch((const char *)p + PREFETCH_BYTES, _MM_HINT_T0);
}

/* ------------------------------------------------------------ q8_0 */

static void rows_q8_0(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, nb = n / MI_QK;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->q + (size_t)r * n;
        const uint16_t *dw = W->d + (size_t)r * nb;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            const int8_t *wb = w + b * MI_QK, *q = a->q + b * MI_QK;
            for (int k = 0; k < 4; k++)
                prefetch(wb + 64 * k);
            /* eight combined scales at once, then each block's broadcast by
             * an in-lane vpermilps (storing them and broadcast-loading each
             * one measured 15% slower) */
            __m256 s8 = _mm256_mul_ps(load_f16x8(dw + b), _mm256_loadu_ps(a->d + b));
            __m256 s03 = _mm256_permute2f128_ps(s8, s8, 0x00), s47 = _mm256_permute2f128_ps(s8, s8, 0x11);
#define Q8_BLOCK(k, s, imm)                                                                                    \
    acc[(k) & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_q8(wb + (k) * MI_QK, q + (k) * MI_QK, ones)),        \
                                   _mm256_permute_ps(s, imm), acc[(k) & 3])
            Q8_BLOCK(0, s03, 0x00);
            Q8_BLOCK(1, s03, 0x55);
            Q8_BLOCK(2, s03, 0xaa);
            Q8_BLOCK(3, s03, 0xff);
            Q8_BLOCK(4, s47, 0x00);
            Q8_BLOCK(5, s47, 0x55);
            Q8_BLOCK(6, s47, 0xaa);
            Q8_BLOCK(7, s47, 0xff);
#undef Q8_BLOCK
        }
        float v = q8_0_finish(w, dw, b, nb, a, acc);
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* ------------------------------------------------------------ q4_0 */

static void rows_q4_0(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, nb = n / MI_QK;
    const __m256i lowmask = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    /* lanes 0-3 take the scale of the pair's first block, 4-7 the second's */
    const __m256i idx[4] = {
        _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
        _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
        _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5),
        _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7),
    };
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * (n / 2);
        const uint16_t *dw = W->d + (size_t)r * nb;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), corr = _mm256_setzero_ps();
        __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            prefetch(w + b * (MI_QK / 2));
            prefetch(w + b * (MI_QK / 2) + 64);
            __m256 dw8 = load_f16x8(dw + b);
            __m256 s8 = _mm256_mul_ps(dw8, _mm256_loadu_ps(a->d + b));
            corr = _mm256_fmadd_ps(dw8, _mm256_loadu_ps(a->s + b), corr);
            __m256i d0 = dot2_q4(w + b * (MI_QK / 2), a->q + b * MI_QK, lowmask, ones);
            __m256i d1 = dot2_q4(w + (b + 2) * (MI_QK / 2), a->q + (b + 2) * MI_QK, lowmask, ones);
            __m256i d2 = dot2_q4(w + (b + 4) * (MI_QK / 2), a->q + (b + 4) * MI_QK, lowmask, ones);
            __m256i d3 = dot2_q4(w + (b + 6) * (MI_QK / 2), a->q + (b + 6) * MI_QK, lowmask, ones);
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_permutevar8x32_ps(s8, idx[0]), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_permutevar8x32_ps(s8, idx[1]), acc1);
            acc2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d2), _mm256_permutevar8x32_ps(s8, idx[2]), acc2);
            acc3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d3), _mm256_permutevar8x32_ps(s8, idx[3]), acc3);
        }
        float v = q4_0_finish(w, dw, b, nb, a, acc0, acc1, acc2, acc3, corr);
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* ------------------------------------------------------------ k-quants */

/* Both k-quant layouts take the activations in natural order: a q4_K/q5_K
 * group's 32 bytes hold sub-block 2g in their low nibbles and 2g+1 in their
 * high ones, each one activation block; q6_K's level vectors come out in
 * element order too. s[b] is the block's sum of q times d (family.h). */
static void prep_qk(const float *x, int n, void *scratch, mi_act *a)
{
    prep_natural(x, n, scratch, a, 1);
}

/* Every line of a super-block's bytes [p, p + span) prefetched 4 KB ahead
 * (each 64th byte: with consecutive super-blocks every line is asked for).
 * In inline assembly: GCC 12 dropped _mm_prefetch from loops like these. */
static inline void prefetch_span(const uint8_t *p, int span)
{
    for (int o = 0; o < span; o += 64)
        __asm__ volatile("prefetcht0 %0" : : "m"(p[PREFETCH_BYTES + o]));
}

/* One super-block of a row: decoded, then applied (x86_avx2.h). */
static inline __attribute__((always_inline)) void q45_step(const uint8_t *blk, int k, const mi_act *a, __m256 *acc,
                                                           const int five)
{
    q45_w w;
    q45_decode(blk, &w, five);
    q45_apply(&w, k, a, acc);
}

static inline __attribute__((always_inline)) void q6_step(const uint8_t *blk, int k, const mi_act *a, __m256 *acc)
{
    q6_w w;
    q6_decode(blk, &w);
    q6_apply(&w, k, a, acc);
}

/* NR consecutive rows of a k-quant dtype t from w (rb bytes a row), their
 * results in v[]; each row has its own accumulators and the same operations
 * whether it goes alone or with a neighbour, so its bits do not depend on
 * which rows are computed together. */
static inline __attribute__((always_inline)) void kq_rows(const uint8_t *w, size_t rb, int ns, const mi_act *a,
                                                          float *v, const int t, const int nr)
{
    const int bb = t == MI_Q4_K ? 144 : t == MI_Q5_K ? 176 : 210;
    __m256 acc[2][3];
    for (int i = 0; i < nr; i++)
        acc[i][0] = acc[i][1] = acc[i][2] = _mm256_setzero_ps();
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < nr; i++) {
            const uint8_t *blk = w + i * rb + (size_t)k * bb;
            prefetch_span(blk, bb);
            if (t == MI_Q6_K)
                q6_step(blk, k, a, acc[i]);
            else
                q45_step(blk, k, a, acc[i], t == MI_Q5_K);
        }
    for (int i = 0; i < nr; i++)
        v[i] = kq_total(acc[i]);
}

/* q4_K and q5_K go two rows at a time (two weight streams: 9.2-9.5 against
 * 8.6-8.7 GB/s for a 2048 x 5632 q4_K matrix from memory, 1 thread, 7
 * alternating rounds); q6_K one (two were no faster). */
static inline __attribute__((always_inline)) void rows_kq(float *y, const mi_tensor *W, int r0, int r1,
                                                          const mi_act *a, int add, const int t)
{
    const int ns = W->cols / MI_QK_K;
    const size_t rb = mi_dtype_q_row_bytes(t, (size_t)W->cols);
    float v[2];
    int r = r0;
    if (t != MI_Q6_K)
        for (; r + 2 <= r1; r += 2) {
            kq_rows((const uint8_t *)W->q + (size_t)r * rb, rb, ns, a, v, t, 2);
            y[r - r0] = add ? y[r - r0] + v[0] : v[0];
            y[r + 1 - r0] = add ? y[r + 1 - r0] + v[1] : v[1];
        }
    for (; r < r1; r++) {
        kq_rows((const uint8_t *)W->q + (size_t)r * rb, rb, ns, a, v, t, 1);
        y[r - r0] = add ? y[r - r0] + v[0] : v[0];
    }
}

static void rows_q4_K(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    rows_kq(y, W, r0, r1, a, add, MI_Q4_K);
}

static void rows_q5_K(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    rows_kq(y, W, r0, r1, a, add, MI_Q5_K);
}

static void rows_q6_K(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    rows_kq(y, W, r0, r1, a, add, MI_Q6_K);
}

const mi_kernel_family mi_kernels_avx2 = {
    "avx2",
    available,
    {NULL, NULL, prep_q8_0, prep_q4_0, prep_qk, prep_qk, prep_qk},
    {rows_f32, rows_f16, rows_q8_0, rows_q4_0, rows_q4_K, rows_q5_K, rows_q6_K},
    {mi_avx2_tile_f32, mi_avx2_tile_f16, mi_avx2_tile_q8_0, mi_avx2_tile_q4_0, mi_avx2_tile_q4_K, mi_avx2_tile_q5_K,
     mi_avx2_tile_q6_K},
};
