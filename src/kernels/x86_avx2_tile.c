/* The AVX2 family's tile kernels (family.h): weight rows against several
 * activation rows at once, each weight vector loaded and decoded once for
 * all of them; per row the float operations are the row kernel's
 * (x86_avx2.c), in its order, through the same inline pieces (x86_avx2.h),
 * so every value is the T = 1 product's bit for bit.
 *
 * Tile heights for 16 vector registers: fp32 and fp16 3 rows (four
 * accumulators each, one weight vector at a time); q8_0 3 (four
 * accumulators each); q4_0 4 (five accumulators each, some of which the
 * compiler keeps in L1: a spill is a load and a store, while the ports that
 * bound these loops are the ALU ones); the k-quants 4 (three accumulators each, the super-block's decoded
 * levels on the stack). A kernel takes any number of rows: groups of its
 * height, then one group of the rest, each group compiled for its size. */
#include <immintrin.h>
#include <string.h>

#include "x86_avx2.h"

#define INLINE static inline __attribute__((always_inline))
#define NMAX 4

/* ------------------------------------------------------------ fp32, fp16 */

INLINE __m256 wload(const void *w, int j, const int half)
{
    return half ? load_f16x8((const uint16_t *)w + j) : _mm256_loadu_ps((const float *)w + j);
}

INLINE void fp_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n,
                    const int half)
{
    const int cols = W->cols, n32 = cols & ~31, n8 = cols & ~7;
    const __m256i tail = lane_mask(cols - n8);
    const float *x[NMAX];
    for (int t = 0; t < n; t++)
        x[t] = a[t].x;
    for (int r = r0; r < r1; r++) {
        const void *w = half ? (const void *)((const uint16_t *)W->q + (size_t)r * cols)
                             : (const void *)((const float *)W->q + (size_t)r * cols);
        __m256 acc[NMAX][4];
        for (int t = 0; t < n; t++)
            acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = _mm256_setzero_ps();
        for (int j = 0; j < n32; j += 32)
            for (int i = 0; i < 4; i++) {
                __m256 wv = wload(w, j + 8 * i, half);
                for (int t = 0; t < n; t++)
                    acc[t][i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[t] + j + 8 * i), acc[t][i]);
            }
        for (int j = n32; j < n8; j += 8) {
            __m256 wv = wload(w, j, half);
            for (int t = 0; t < n; t++)
                acc[t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[t] + j), acc[t][0]);
        }
        if (n8 < cols) {
            __m256 wv;
            if (half) { /* as rows_f16: the last halves in a zeroed buffer */
                uint16_t h[8] = {0};
                memcpy(h, (const uint16_t *)w + n8, (size_t)(cols - n8) * sizeof *h);
                wv = load_f16x8(h);
            } else {
                wv = _mm256_maskload_ps((const float *)w + n8, tail);
            }
            for (int t = 0; t < n; t++)
                acc[t][1] = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x[t] + n8, tail), acc[t][1]);
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0),
                        hsum256(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3]))),
                add);
    }
}

#define F32_TILE(y, ldy, W, r0, r1, a, add, n) fp_tile(y, ldy, W, r0, r1, a, add, n, 0)
#define F16_TILE(y, ldy, W, r0, r1, a, add, n) fp_tile(y, ldy, W, r0, r1, a, add, n, 1)
MI_DEFINE_TILE(mi_avx2_tile_f32, , F32_TILE, 3)
MI_DEFINE_TILE(mi_avx2_tile_f16, , F16_TILE, 3)

/* ------------------------------------------------------------ q8_0 */

/* Per group of eight blocks each row's eight scales dw * dx once (a store;
 * broadcasting one is rows_q8_0's in-lane permute, without the ALU), then
 * each block's weights loaded once and their product with every row, block k
 * into acc[k & 3]. */
INLINE void q8_0_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n)
{
    const int cols = W->cols, nb = cols / MI_QK;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->q + (size_t)r * cols;
        const uint16_t *dw = W->d + (size_t)r * nb;
        __m256 acc[NMAX][4];
        for (int t = 0; t < n; t++)
            acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = _mm256_setzero_ps();
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            __m256 dw8 = load_f16x8(dw + b);
            float sc[NMAX][8];
            for (int t = 0; t < n; t++)
                _mm256_storeu_ps(sc[t], _mm256_mul_ps(dw8, _mm256_loadu_ps(a[t].d + b)));
            for (int k = 0; k < 8; k++) {
                __m256i wv = _mm256_loadu_si256((const __m256i *)(w + (b + k) * MI_QK));
                for (int t = 0; t < n; t++) {
                    __m256i dot = dot_q8_w(wv, a[t].q + (b + k) * MI_QK, ones);
                    acc[t][k & 3] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcast_ss(&sc[t][k]), acc[t][k & 3]);
                }
            }
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0), q8_0_finish(w, dw, b, nb, &a[t], acc[t]), add);
    }
}

MI_DEFINE_TILE(mi_avx2_tile_q8_0, , q8_0_tile, 3)

/* ------------------------------------------------------------ q4_0 */

INLINE void q4_0_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n)
{
    const int cols = W->cols, nb = cols / MI_QK;
    const __m256i lowmask = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * (cols / 2);
        const uint16_t *dw = W->d + (size_t)r * nb;
        __m256 acc[NMAX][4], corr[NMAX];
        for (int t = 0; t < n; t++)
            acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = corr[t] = _mm256_setzero_ps();
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            __m256 dw8 = load_f16x8(dw + b);
            __m256i lo[4], hi[4];
            for (int i = 0; i < 4; i++)
                q4_nibbles(w + (b + 2 * i) * (MI_QK / 2), lowmask, &lo[i], &hi[i]);
            for (int t = 0; t < n; t++) {
                __m256 s8 = _mm256_mul_ps(dw8, _mm256_loadu_ps(a[t].d + b));
                corr[t] = _mm256_fmadd_ps(dw8, _mm256_loadu_ps(a[t].s + b), corr[t]);
                for (int i = 0; i < 4; i++) {
                    __m256i d = dot2_q4_lohi(lo[i], hi[i], a[t].q + (b + 2 * i) * MI_QK, ones);
                    __m256i idx = _mm256_setr_epi32(2 * i, 2 * i, 2 * i, 2 * i, 2 * i + 1, 2 * i + 1, 2 * i + 1,
                                                    2 * i + 1);
                    acc[t][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_permutevar8x32_ps(s8, idx), acc[t][i]);
                }
            }
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0),
                        q4_0_finish(w, dw, b, nb, &a[t], acc[t][0], acc[t][1], acc[t][2], acc[t][3], corr[t]), add);
    }
}

MI_DEFINE_TILE(mi_avx2_tile_q4_0, , q4_0_tile, 4)

/* ------------------------------------------------------------ k-quants */

INLINE void kq_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n,
                    const int t_dt)
{
    const int ns = W->cols / MI_QK_K, bb = t_dt == MI_Q4_K ? 144 : t_dt == MI_Q5_K ? 176 : 210;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;
        __m256 acc[NMAX][3];
        for (int t = 0; t < n; t++)
            acc[t][0] = acc[t][1] = acc[t][2] = _mm256_setzero_ps();
        for (int k = 0; k < ns; k++) {
            const uint8_t *blk = w + (size_t)k * bb;
            if (t_dt == MI_Q6_K) {
                q6_w d;
                q6_decode(blk, &d);
                for (int t = 0; t < n; t++)
                    q6_apply(&d, k, &a[t], acc[t]);
            } else {
                q45_w d;
                q45_decode(blk, &d, t_dt == MI_Q5_K);
                for (int t = 0; t < n; t++)
                    q45_apply(&d, k, &a[t], acc[t]);
            }
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0), kq_total(acc[t]), add);
    }
}

#define Q4_K_TILE(y, ldy, W, r0, r1, a, add, n) kq_tile(y, ldy, W, r0, r1, a, add, n, MI_Q4_K)
#define Q5_K_TILE(y, ldy, W, r0, r1, a, add, n) kq_tile(y, ldy, W, r0, r1, a, add, n, MI_Q5_K)
#define Q6_K_TILE(y, ldy, W, r0, r1, a, add, n) kq_tile(y, ldy, W, r0, r1, a, add, n, MI_Q6_K)
MI_DEFINE_TILE(mi_avx2_tile_q4_K, , Q4_K_TILE, 4)
MI_DEFINE_TILE(mi_avx2_tile_q5_K, , Q5_K_TILE, 4)
MI_DEFINE_TILE(mi_avx2_tile_q6_K, , Q6_K_TILE, 4)
