/* The AArch64 families' tile kernels (family.h): weight rows against
 * several activation rows at once, each weight block read and decoded once
 * for all of them; per row the float operations are the row kernel's
 * (arm_neon.c), in its order, through the same inline pieces (arm_neon.h),
 * so every value is the T = 1 product's bit for bit. The neon-dotprod family
 * shares the fp32 and fp16 tiles and has its own block ones (SDOT).
 *
 * Tile heights for 32 vector registers: fp32 and fp16 4 rows (four
 * accumulators each); q8_0 and q4_0 8 (one accumulator each, four blocks of
 * weights); the k-quants 4 (three or four accumulators each; a super-block's
 * 16 level vectors may go to the stack, which costs loads, not the ALU
 * operations that bound these loops). A kernel takes any number of rows:
 * groups of its height, then one group of the rest, each group compiled for
 * its size. */
#include <string.h>

#include "arm_neon.h"

/* the tile heights (above) */
#define NT_FP 4
#define NT_Q 8
#define NT_K 4

/* ------------------------------------------------------------ fp32, fp16 */

MI_INLINE void f32_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n)
{
    const int cols = W->cols, n16 = cols & ~15, n4 = cols & ~3;
    for (int r = r0; r < r1; r++) {
        const float *w = (const float *)W->q + (size_t)r * cols;
        float32x4_t acc[NT_FP][4];
        for (int t = 0; t < n; t++)
            acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vdupq_n_f32(0.0f);
        int j = 0;
        for (; j < n16; j += 16) {
            float32x4_t w0 = vld1q_f32(w + j), w1 = vld1q_f32(w + j + 4);
            float32x4_t w2 = vld1q_f32(w + j + 8), w3 = vld1q_f32(w + j + 12);
            for (int t = 0; t < n; t++) {
                const float *x = a[t].x + j;
                acc[t][0] = vfmaq_f32(acc[t][0], w0, vld1q_f32(x));
                acc[t][1] = vfmaq_f32(acc[t][1], w1, vld1q_f32(x + 4));
                acc[t][2] = vfmaq_f32(acc[t][2], w2, vld1q_f32(x + 8));
                acc[t][3] = vfmaq_f32(acc[t][3], w3, vld1q_f32(x + 12));
            }
        }
        for (; j < n4; j += 4) { /* up to three groups of four */
            float32x4_t w0 = vld1q_f32(w + j);
            for (int t = 0; t < n; t++)
                acc[t][0] = vfmaq_f32(acc[t][0], w0, vld1q_f32(a[t].x + j));
        }
        for (int t = 0; t < n; t++) {
            const float *x = a[t].x;
            float v = vaddvq_f32(vaddq_f32(vaddq_f32(acc[t][0], acc[t][1]), vaddq_f32(acc[t][2], acc[t][3])));
            for (int i = j; i < cols; i++) /* up to three elements, as rows_f32 */
                v += w[i] * x[i];
            mi_tile_put(y + (size_t)t * ldy + (r - r0), v, add);
        }
    }
}

/* fp16: eight weights widened once (f16x8), then each row's FMAs; the last
 * few elements through zero-padded copies. (The row kernels rows_f32 and
 * rows_f16 are these tiles at one row.) */
MI_INLINE void f16_tile(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add, const int n)
{
    const int cols = W->cols, n16 = cols & ~15, n8 = cols & ~7;
    float xt[NT_FP][8];
    for (int t = 0; t < n; t++) {
        memset(xt[t], 0, sizeof xt[t]);
        memcpy(xt[t], a[t].x + n8, (size_t)(cols - n8) * sizeof(float));
    }
    for (int r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)W->q + (size_t)r * cols;
        float32x4_t acc[NT_FP][4];
        for (int t = 0; t < n; t++)
            acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vdupq_n_f32(0.0f);
        int j = 0;
        for (; j < n16; j += 16) {
            float32x4_t w0, w1, w2, w3;
            f16x8(vld1q_u16(w + j), &w0, &w1);
            f16x8(vld1q_u16(w + j + 8), &w2, &w3);
            for (int t = 0; t < n; t++) {
                const float *x = a[t].x + j;
                acc[t][0] = vfmaq_f32(acc[t][0], w0, vld1q_f32(x));
                acc[t][1] = vfmaq_f32(acc[t][1], w1, vld1q_f32(x + 4));
                acc[t][2] = vfmaq_f32(acc[t][2], w2, vld1q_f32(x + 8));
                acc[t][3] = vfmaq_f32(acc[t][3], w3, vld1q_f32(x + 12));
            }
        }
        if (j < n8) { /* one group of eight */
            float32x4_t w0, w1;
            f16x8(vld1q_u16(w + j), &w0, &w1);
            for (int t = 0; t < n; t++) {
                acc[t][0] = vfmaq_f32(acc[t][0], w0, vld1q_f32(a[t].x + j));
                acc[t][1] = vfmaq_f32(acc[t][1], w1, vld1q_f32(a[t].x + j + 4));
            }
        }
        if (n8 < cols) { /* up to seven elements: zero weights pad them */
            uint16_t wt[8] = {0};
            memcpy(wt, w + n8, (size_t)(cols - n8) * sizeof(uint16_t));
            float32x4_t w2, w3;
            f16x8(vld1q_u16(wt), &w2, &w3);
            for (int t = 0; t < n; t++) {
                acc[t][2] = vfmaq_f32(acc[t][2], w2, vld1q_f32(xt[t]));
                acc[t][3] = vfmaq_f32(acc[t][3], w3, vld1q_f32(xt[t] + 4));
            }
        }
        for (int t = 0; t < n; t++)
            mi_tile_put(y + (size_t)t * ldy + (r - r0),
                        vaddvq_f32(vaddq_f32(vaddq_f32(acc[t][0], acc[t][1]), vaddq_f32(acc[t][2], acc[t][3]))), add);
    }
}

MI_DEFINE_TILE(mi_neon_tile_f32, , f32_tile, NT_FP)
MI_DEFINE_TILE(mi_neon_tile_f16, , f16_tile, NT_FP)

/* ------------------------------------------------------ block products */

/* q8_0 and q4_0 per DOT (as DEFINE_ROWS_Q): each group of four blocks' weights
 * read once (WBLK) and their scales widened once, then every row's four
 * products, pairwise sums, scales and FMA. */
#define DEFINE_TILE_Q(NAME, ATTR, DOT, WBLK, TAIL, WT, BB)                                                       \
    ATTR MI_INLINE void NAME(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add,    \
                             const int n)                                                                        \
    {                                                                                                            \
        const int nb = W->cols / MI_QK, nb4 = nb & ~3;                                                           \
        for (int r = r0; r < r1; r++) {                                                                          \
            const WT *w = (const WT *)W->q + (size_t)r * nb * (BB);                                              \
            const uint16_t *dw = W->d + (size_t)r * nb;                                                          \
            float32x4_t acc[NT_Q];                                                                               \
            for (int t = 0; t < n; t++)                                                                          \
                acc[t] = vdupq_n_f32(0.0f);                                                                      \
            int b = 0;                                                                                           \
            for (; b < nb4; b += 4) {                                                                            \
                wblk wb[4];                                                                                      \
                for (int i = 0; i < 4; i++)                                                                      \
                    wb[i] = WBLK(w + (b + i) * (BB));                                                            \
                float32x4_t dw4 = f16x4(dw + b);                                                                 \
                for (int t = 0; t < n; t++) {                                                                    \
                    const int8_t *xq = a[t].q + b * MI_QK;                                                       \
                    int32x4_t s0 = DOT(wb[0], xq), s1 = DOT(wb[1], xq + MI_QK);                                  \
                    int32x4_t s2 = DOT(wb[2], xq + 2 * MI_QK), s3 = DOT(wb[3], xq + 3 * MI_QK);                  \
                    int32x4_t s = vpaddq_s32(vpaddq_s32(s0, s1), vpaddq_s32(s2, s3));                            \
                    float32x4_t sc = vmulq_f32(dw4, vld1q_f32(a[t].d + b));                                      \
                    acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(s), sc);                                            \
                }                                                                                                \
            }                                                                                                    \
            for (int t = 0; t < n; t++)                                                                          \
                mi_tile_put(y + (size_t)t * ldy + (r - r0), TAIL(w, dw, b, nb, &a[t], vaddvq_f32(acc[t])), add); \
        }                                                                                                        \
    }

DEFINE_TILE_Q(q8_0_tile_neon, , dot_q8_neon, q8_wblk, q8_tail_neon, int8_t, MI_QK)
DEFINE_TILE_Q(q4_0_tile_neon, , dot_q4_neon, q4_wblk, q4_tail_neon, uint8_t, MI_QK / 2)
DEFINE_TILE_Q(q8_0_tile_sdot, MI_DOTPROD, dot_q8_sdot, q8_wblk, q8_tail_sdot, int8_t, MI_QK)
DEFINE_TILE_Q(q4_0_tile_sdot, MI_DOTPROD, dot_q4_sdot, q4_wblk, q4_tail_sdot, uint8_t, MI_QK / 2)
MI_DEFINE_TILE(mi_neon_tile_q8_0, , q8_0_tile_neon, NT_Q)
MI_DEFINE_TILE(mi_neon_tile_q4_0, , q4_0_tile_neon, NT_Q)
MI_DEFINE_TILE(mi_sdot_tile_q8_0, MI_DOTPROD, q8_0_tile_sdot, NT_Q)
MI_DEFINE_TILE(mi_sdot_tile_q4_0, MI_DOTPROD, q4_0_tile_sdot, NT_Q)

/* ------------------------------------------------------------ k-quants */

/* Each super-block decoded once and applied to every row, per APPLY. */
#define DEFINE_TILE_Q45(NAME, ATTR, APPLY, FIVE)                                                               \
    ATTR MI_INLINE void NAME(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add,  \
                             const int n)                                                                      \
    {                                                                                                          \
        const int ns = W->cols / MI_QK_K, bb = (FIVE) ? 176 : 144;                                             \
        for (int r = r0; r < r1; r++) {                                                                        \
            const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;                                    \
            float32x4_t acc[NT_K][3];                                                                          \
            for (int t = 0; t < n; t++)                                                                        \
                acc[t][0] = acc[t][1] = acc[t][2] = vdupq_n_f32(0.0f);                                         \
            for (int k = 0; k < ns; k++) {                                                                     \
                q45_w d;                                                                                       \
                q45_decode(w + (size_t)k * bb, &d, FIVE);                                                      \
                for (int t = 0; t < n; t++)                                                                    \
                    APPLY(&d, k, &a[t], acc[t]);                                                               \
            }                                                                                                  \
            for (int t = 0; t < n; t++)                                                                        \
                mi_tile_put(y + (size_t)t * ldy + (r - r0), q45_total(acc[t]), add);                           \
        }                                                                                                      \
    }

#define DEFINE_TILE_Q6(NAME, ATTR, APPLY)                                                                      \
    ATTR MI_INLINE void NAME(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int add,  \
                             const int n)                                                                      \
    {                                                                                                          \
        const int ns = W->cols / MI_QK_K, bb = 210;                                                            \
        for (int r = r0; r < r1; r++) {                                                                        \
            const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;                                    \
            float32x4_t acc[NT_K][4];                                                                          \
            for (int t = 0; t < n; t++)                                                                        \
                acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vdupq_n_f32(0.0f);                             \
            for (int k = 0; k < ns; k++) {                                                                     \
                q6_w d;                                                                                        \
                q6_decode(w + (size_t)k * bb, &d);                                                             \
                for (int t = 0; t < n; t++)                                                                    \
                    APPLY(&d, k, &a[t], acc[t]);                                                               \
            }                                                                                                  \
            for (int t = 0; t < n; t++)                                                                        \
                mi_tile_put(y + (size_t)t * ldy + (r - r0), q6_total(acc[t]), add);                            \
        }                                                                                                      \
    }

DEFINE_TILE_Q45(q4_K_tile_neon, , q45_apply_neon, 0)
DEFINE_TILE_Q45(q5_K_tile_neon, , q45_apply_neon, 1)
DEFINE_TILE_Q6(q6_K_tile_neon, , q6_apply_neon)
DEFINE_TILE_Q45(q4_K_tile_sdot, MI_DOTPROD, q45_apply_sdot, 0)
DEFINE_TILE_Q45(q5_K_tile_sdot, MI_DOTPROD, q45_apply_sdot, 1)
DEFINE_TILE_Q6(q6_K_tile_sdot, MI_DOTPROD, q6_apply_sdot)
MI_DEFINE_TILE(mi_neon_tile_q4_K, , q4_K_tile_neon, NT_K)
MI_DEFINE_TILE(mi_neon_tile_q5_K, , q5_K_tile_neon, NT_K)
MI_DEFINE_TILE(mi_neon_tile_q6_K, , q6_K_tile_neon, NT_K)
MI_DEFINE_TILE(mi_sdot_tile_q4_K, MI_DOTPROD, q4_K_tile_sdot, NT_K)
MI_DEFINE_TILE(mi_sdot_tile_q5_K, MI_DOTPROD, q5_K_tile_sdot, NT_K)
MI_DEFINE_TILE(mi_sdot_tile_q6_K, MI_DOTPROD, q6_K_tile_sdot, NT_K)
