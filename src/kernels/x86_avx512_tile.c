/* The AVX-512 family's tile kernels (family.h): weight rows against several
 * activation rows at once. Each weight vector is loaded and decoded once and
 * applied to every activation row of the tile, whose accumulators stay in
 * registers; per row the float operations are the row kernel's
 * (x86_avx512.c), in its order, through the same inline pieces
 * (x86_avx512.h), so every value is the T = 1 product's bit for bit.
 *
 * Tile heights: what fits 32 vector registers next to the decoded weights.
 * fp32, fp16, q8_0, q4_0: 8 rows (two accumulators each for fp and q8_0, an
 * accumulator and a 256-bit offset sum for q4_0); the k-quants: 4 (three
 * accumulators each, and four vectors of levels). A kernel takes any number
 * of rows: groups of its height, then one group of the rest, each group
 * compiled for its size (the row loops unrolled, the arrays in registers).
 *
 * The weights of a call are a tile of about 32 KB (matmul.c). With more
 * activation rows than the tile height the later groups find it in cache;
 * the first group, and a batch of 8 (one group) wholly, read it from memory,
 * so every tile prefetches each line of its weights TILE_AHEAD bytes ahead
 * (q4_0 TILE_AHEAD_Q4): 1.1-1.34x the tiles at T = 8 from memory, every
 * dtype (results.md); 2 to 16 KB ahead measured alike. */
#define TILE_AHEAD 4096
#define TILE_AHEAD_Q4 8192
#include <immintrin.h>
#include <string.h>

#include "x86_avx512.h"

#define INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------ fp32, fp16 */

/* The weights' 16 values at w + j as floats (fp32 or fp16), masked loads for a tail. */
INLINE __m512 wload(const void *w, int j, const int half)
{
    return half ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + j)))
                : _mm512_loadu_ps((const float *)w + j);
}

INLINE __m512 wload_tail(const void *w, int j, __mmask16 m, const int half)
{
    return half ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + j))
                : _mm512_maskz_loadu_ps(m, (const float *)w + j);
}

INLINE void fp_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n,
                    const int half)
{
    const int cols = W->cols, n32 = cols & ~31, n16 = cols & ~15;
    const __mmask16 tail = (__mmask16)((1u << (cols - n16)) - 1u);
    const float *x[MI_TILE_MAX];
    for (int t = 0; t < n; t++)
        x[t] = a[t].x;
    for (int r = r0; r < r1; r++) {
        const void *w = half ? (const void *)((const uint16_t *)W->q + (size_t)r * cols)
                             : (const void *)((const float *)W->q + (size_t)r * cols);
        __m512 a0[MI_TILE_MAX], a1[MI_TILE_MAX];
        for (int t = 0; t < n; t++)
            a0[t] = a1[t] = _mm512_setzero_ps();
        for (int j = 0; j < n32; j += 32) {
            const char *pw = (const char *)w + (size_t)j * (half ? 2 : 4) + TILE_AHEAD;
            _mm_prefetch(pw, _MM_HINT_T0);
            if (!half)
                _mm_prefetch(pw + 64, _MM_HINT_T0);
            __m512 w0 = wload(w, j, half), w1 = wload(w, j + 16, half);
            for (int t = 0; t < n; t++) {
                a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + j), a0[t]);
                a1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + j + 16), a1[t]);
            }
        }
        if (n16 > n32) {
            __m512 w0 = wload(w, n32, half);
            for (int t = 0; t < n; t++)
                a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + n32), a0[t]);
        }
        if (tail) {
            __m512 w1 = wload_tail(w, n16, tail, half);
            for (int t = 0; t < n; t++)
                a1[t] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(tail, x[t] + n16), a1[t]);
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0), _mm512_reduce_add_ps(_mm512_add_ps(a0[t], a1[t])), add);
    }
}

#define F32_TILE(y, ldy, W, r0, r1, a, add, n) fp_tile(y, ldy, W, r0, r1, a, add, n, 0)
#define F16_TILE(y, ldy, W, r0, r1, a, add, n) fp_tile(y, ldy, W, r0, r1, a, add, n, 1)
MI_DEFINE_TILE(mi_avx512_tile_f32, , F32_TILE, 8)
MI_DEFINE_TILE(mi_avx512_tile_f16, , F16_TILE, 8)

/* ------------------------------------------------------------ q8_0 */

/* Per group of eight blocks the four 64-byte weight vectors as |w| and sign
 * masks (dot2_q8), then each row's products as rows_q8_0 makes them: blocks
 * 0-1 and 4-5 into acc, 2-3 and 6-7 into acc1. */
INLINE void q8_0_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n)
{
    const int cols = W->cols, nb = cols / MI_QK;
    const __m512i idx[4] = MI_Q8_SCALE_IDX;
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->q + (size_t)r * cols;
        const uint16_t *dw = W->d + (size_t)r * nb;
        __m512 acc[MI_TILE_MAX], acc1[MI_TILE_MAX];
        for (int t = 0; t < n; t++)
            acc[t] = acc1[t] = _mm512_setzero_ps();
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            __m256 dw8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dw + b)));
            __m512i aw[4];
            __mmask64 neg[4];
            for (int i = 0; i < 4; i++) {
                _mm_prefetch((const char *)(w + b * MI_QK + 64 * i) + TILE_AHEAD, _MM_HINT_T0);
                __m512i v = _mm512_loadu_si512(w + b * MI_QK + 64 * i);
                aw[i] = _mm512_abs_epi8(v);
                neg[i] = _mm512_movepi8_mask(v);
            }
            /* unrolled, so that the 16 accumulators stay in registers (GCC 12 keeps them in
             * memory otherwise): 1.11x batch-8 decode in q8_0 before the prefetch (results.md);
             * the q4_0 and fp tiles measured no gain from it */
#pragma GCC unroll 8
            for (int t = 0; t < n; t++) {
                __m512 s16 = _mm512_castps256_ps512(_mm256_mul_ps(dw8, _mm256_loadu_ps(a[t].d + b)));
                const int8_t *xq = a[t].q + b * MI_QK;
                for (int i = 0; i < 4; i += 2) {
                    __m512i d0 = dot2_q8(aw[i], neg[i], _mm512_loadu_si512(xq + 64 * i));
                    __m512i d1 = dot2_q8(aw[i + 1], neg[i + 1], _mm512_loadu_si512(xq + 64 * i + 64));
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(idx[i], s16), acc[t]);
                    acc1[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(idx[i + 1], s16), acc1[t]);
                }
            }
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0), q8_0_finish(w, dw, b, nb, &a[t], acc[t], acc1[t]), add);
    }
}

MI_DEFINE_TILE(mi_avx512_tile_q8_0, , q8_0_tile, 8)

/* ------------------------------------------------------------ q4_0 */

/* Per group of eight blocks the nibbles of its two 64-byte vectors, then
 * each row's scales, offset terms and products as rows_q4_0 makes them. */
INLINE void q4_0_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n)
{
    const int cols = W->cols, nb = cols / MI_QK;
    const __m512i idx[2] = MI_Q4_SCALE_IDX;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * (cols / 2);
        const uint16_t *dw = W->d + (size_t)r * nb;
        __m512 acc[MI_TILE_MAX];
        __m256 corr[MI_TILE_MAX];
        for (int t = 0; t < n; t++) {
            acc[t] = _mm512_setzero_ps();
            corr[t] = _mm256_setzero_ps();
        }
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            __m256 dw8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dw + b)));
            __m512i lo[2], hi[2];
            _mm_prefetch((const char *)(w + b * (MI_QK / 2)) + TILE_AHEAD_Q4, _MM_HINT_T0);
            _mm_prefetch((const char *)(w + b * (MI_QK / 2)) + TILE_AHEAD_Q4 + 64, _MM_HINT_T0);
            q4_nibbles(w + b * (MI_QK / 2), &lo[0], &hi[0]);
            q4_nibbles(w + (b + 4) * (MI_QK / 2), &lo[1], &hi[1]);
            for (int t = 0; t < n; t++) {
                __m512 s16 = _mm512_castps256_ps512(_mm256_mul_ps(dw8, _mm256_loadu_ps(a[t].d + b)));
                corr[t] = _mm256_fmadd_ps(dw8, _mm256_loadu_ps(a[t].s + b), corr[t]);
                for (int k = 0; k < 2; k++) {
                    __m512i dot = dot4_q4_lohi(lo[k], hi[k], a[t].q + (b + 4 * k) * MI_QK);
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx[k], s16), acc[t]);
                }
            }
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0), q4_0_finish(w, dw, b, nb, &a[t], acc[t], corr[t]), add);
    }
}

MI_DEFINE_TILE(mi_avx512_tile_q4_0, , q4_0_tile, 8)

/* ------------------------------------------------------------ k-quants */

/* Each super-block decoded once (q45_decode, q6_decode) and applied to
 * every row (q45_apply, q6_apply), the rows' totals as rows_q45's and
 * rows_q6_K's. */
INLINE void q45_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n,
                     const int five)
{
    const int ns = W->cols / MI_QK_K, bb = five ? 176 : 144;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;
        __m512 acc[MI_TILE_MAX][3];
        for (int t = 0; t < n; t++)
            acc[t][0] = acc[t][1] = acc[t][2] = _mm512_setzero_ps();
        for (int k = 0; k < ns; k++) {
            for (int l = 0; l < bb; l += 64)
                _mm_prefetch((const char *)(w + (size_t)k * bb) + TILE_AHEAD + l, _MM_HINT_T0);
            q45_w d;
            q45_decode(w + (size_t)k * bb, &d, five);
            for (int t = 0; t < n; t++)
                q45_apply(&d, k, &a[t], acc[t]);
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0), q45_total(acc[t], five), add);
    }
}

INLINE void q6_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n)
{
    const int ns = W->cols / MI_QK_K, bb = 210;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;
        __m512 acc[MI_TILE_MAX][2];
        for (int t = 0; t < n; t++)
            acc[t][0] = acc[t][1] = _mm512_setzero_ps();
        for (int k = 0; k < ns; k++) {
            for (int l = 0; l < bb; l += 64)
                _mm_prefetch((const char *)(w + (size_t)k * bb) + TILE_AHEAD + l, _MM_HINT_T0);
            q6_w d;
            q6_decode(w + (size_t)k * bb, &d);
            for (int t = 0; t < n; t++)
                q6_apply(&d, k, &a[t], acc[t]);
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0), _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1])), add);
    }
}

#define Q4_K_TILE(y, ldy, W, r0, r1, a, add, n) q45_tile(y, ldy, W, r0, r1, a, add, n, 0)
#define Q5_K_TILE(y, ldy, W, r0, r1, a, add, n) q45_tile(y, ldy, W, r0, r1, a, add, n, 1)
MI_DEFINE_TILE(mi_avx512_tile_q4_K, , Q4_K_TILE, 4)
MI_DEFINE_TILE(mi_avx512_tile_q5_K, , Q5_K_TILE, 4)
MI_DEFINE_TILE(mi_avx512_tile_q6_K, , q6_tile, 4)
