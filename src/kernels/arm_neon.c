/* AArch64 families (see family.h):
 * - "neon": Advanced SIMD of every ARMv8-A core; Raspberry Pi 4 (Cortex-A72,
 *   no int8 dot product).
 * - "neon-dotprod": the same plus the int8 dot-product extension (SDOT,
 *   Armv8.2-A DotProd); Raspberry Pi 5 (Cortex-A76). It shares neon's fp32,
 *   fp16 and activation code and has its own q8_0 and q4_0 rows.
 * One file, built with the default flags: the functions that use SDOT are
 * compiled for armv8.2-a+dotprod through a target attribute and run only
 * when the kernel reports the feature (HWCAP_ASIMDDP), so a build for any
 * aarch64 CPU carries both families.
 *
 * fp32/fp16: one row at a time (as x86_avx512.c explains, one stream per row
 * keeps the prefetchers effective in a loop bound by streaming the weights),
 * four accumulators of four lanes, 16 elements per iteration. fp16 is widened
 * with FCVTL (vcvt_f32_f16), which base ARMv8-A has. Nothing reads past a
 * row's end: fp32's last few elements are scalar, fp16's (up to seven) go
 * through zero-padded copies.
 *
 * Activations: both block types use the natural order (q[i] is element i),
 * since a q4_0 block's low nibbles are its elements 0-15 and its high
 * nibbles elements 16-31, which are already two runs of 16 activations.
 * Quantization is family.h's shared rule, vectorised: the max of |x| does not
 * depend on the order, d and 1/d are the same scalar expressions, and FCVTNS
 * (vcvtnq_s32_f32) rounds to nearest even like nearbyintf does.
 *
 * Block products: per block an int32x4 of partial sums; four blocks' sums
 * reduce with pairwise adds (ADDP) to one lane per block, so the block scales
 * (dw * dx, four at a time) apply with one convert and one FMA per 4 blocks.
 * - neon: SMULL/SMLAL (vmull_s8, vmlal_high_s8) multiply int8 pairs into
 *   int16 lanes and SADALP (vpadalq_s16) widens into int32. q8_0 weights are
 *   at most 128 in magnitude and activations at most 127 (the clamp), so two
 *   products per int16 lane (at most 32512) cannot overflow.
 * - neon-dotprod: SDOT (vdotq_s32) adds four int8 products into each int32
 *   lane, 16 per instruction.
 * q4_0: subtracting 8 from the nibbles gives the signed weights (-8..7), so
 * the product is dw * dx * sum((w - 8) q) directly and the offset term s is
 * not needed (prep still fills it: every family's prep gives the scalar s).
 * That is the scalar reference's dw * (dx * sum(w q) + s) without its
 * cancellation: the integer sums are exact, only float rounding differs.
 * Four products of at most 8 * 127 per int16 lane fit easily.
 * k-quants (q4_K, q5_K, q6_K): each sub-block's integer dot reduced to one
 * lane, four sub-blocks' factors (d * sc * dx) applied in one FMA; see the
 * section below. One row at a time: the two-row loop that helped on x86 has
 * not been measured on a Pi. */
#if defined(__clang__) && __clang_major__ < 16 && !defined(__ARM_FEATURE_DOTPROD)
/* clang before 16 declares the dot-product intrinsics only when the whole
 * file targets the extension; they compile in dotprod functions all the same */
#define __ARM_FEATURE_DOTPROD 1
#endif
#include <arm_neon.h>
#include <float.h>
#include <math.h>
#include <string.h>
#if defined(__linux__)
#include <sys/auxv.h>
#endif

#include "family.h"

/* Code using SDOT. GCC names the architecture; clang takes the feature. */
#if defined(__clang__)
#define MI_DOTPROD __attribute__((target("dotprod")))
#else
#define MI_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif

static int neon_available(void)
{
    return 1; /* Advanced SIMD is mandatory in AArch64 */
}

static int dot_available(void)
{
#if defined(__linux__)
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20) /* the kernel's bit, for older headers */
#endif
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
    return 0; /* no run-time detection on other systems: the neon family runs */
#endif
}

/* fp16 bits to fp32 (exact, subnormals included) */
static inline float f16(uint16_t h)
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* four fp16 scales widened to fp32 */
static inline float32x4_t f16x4(const uint16_t *h)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* ------------------------------------------------------------ fp32, fp16 */

static void rows_f32(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, n16 = n & ~15, n4 = n & ~3;
    const float *x = a->x;
    for (int r = r0; r < r1; r++) {
        const float *w = (const float *)W->q + (size_t)r * n;
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
        int j = 0;
        for (; j < n16; j += 16) {
            a0 = vfmaq_f32(a0, vld1q_f32(w + j), vld1q_f32(x + j));
            a1 = vfmaq_f32(a1, vld1q_f32(w + j + 4), vld1q_f32(x + j + 4));
            a2 = vfmaq_f32(a2, vld1q_f32(w + j + 8), vld1q_f32(x + j + 8));
            a3 = vfmaq_f32(a3, vld1q_f32(w + j + 12), vld1q_f32(x + j + 12));
        }
        for (; j < n4; j += 4) /* up to three groups of four */
            a0 = vfmaq_f32(a0, vld1q_f32(w + j), vld1q_f32(x + j));
        float v = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
        for (; j < n; j++) /* up to three elements */
            v += w[j] * x[j];
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* acc_lo/acc_hi += 8 fp16 weights (widened) times 8 activations */
static inline void fma_f16x8(float32x4_t *lo, float32x4_t *hi, uint16x8_t h, const float *x)
{
    float16x8_t f = vreinterpretq_f16_u16(h);
    *lo = vfmaq_f32(*lo, vcvt_f32_f16(vget_low_f16(f)), vld1q_f32(x));
    *hi = vfmaq_f32(*hi, vcvt_high_f32_f16(f), vld1q_f32(x + 4));
}

static void rows_f16(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, n16 = n & ~15, n8 = n & ~7;
    const float *x = a->x;
    /* the activations' tail, zero-padded to 8 (the same for every row) */
    float xt[8] = {0};
    memcpy(xt, x + n8, (size_t)(n - n8) * sizeof(float));
    for (int r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)W->q + (size_t)r * n;
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
        int j = 0;
        for (; j < n16; j += 16) {
            fma_f16x8(&a0, &a1, vld1q_u16(w + j), x + j);
            fma_f16x8(&a2, &a3, vld1q_u16(w + j + 8), x + j + 8);
        }
        if (j < n8) /* one group of eight */
            fma_f16x8(&a0, &a1, vld1q_u16(w + j), x + j);
        if (n8 < n) { /* up to seven elements: zero weights pad them */
            uint16_t wt[8] = {0};
            memcpy(wt, w + n8, (size_t)(n - n8) * sizeof(uint16_t));
            fma_f16x8(&a2, &a3, vld1q_u16(wt), xt);
        }
        float v = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* ------------------------------------------------------- activations */

/* Quantize one block by the shared rule into 32 int8 at q; returns d and
 * the block's sum of q. */
static inline float quantize_block(const float *x, int8_t *q, int *sum)
{
    float32x4_t v[8];
    for (int i = 0; i < 8; i++)
        v[i] = vld1q_f32(x + 4 * i);
    /* FMAXNM skips NaN like the scalar comparison does; an all-NaN block
     * gives NaN, which the scalar rule's start at 0 turns into 0 */
    float32x4_t m = vmaxnmq_f32(vmaxnmq_f32(vmaxnmq_f32(vabsq_f32(v[0]), vabsq_f32(v[1])),
                                            vmaxnmq_f32(vabsq_f32(v[2]), vabsq_f32(v[3]))),
                                vmaxnmq_f32(vmaxnmq_f32(vabsq_f32(v[4]), vabsq_f32(v[5])),
                                            vmaxnmq_f32(vabsq_f32(v[6]), vabsq_f32(v[7]))));
    /* a NaN or infinity marks the whole block (family.h): ordered compares
     * are false for both */
    const float32x4_t big = vdupq_n_f32(FLT_MAX);
    uint32x4_t ok = vcleq_f32(vabsq_f32(v[0]), big);
    for (int i = 1; i < 8; i++)
        ok = vandq_u32(ok, vcleq_f32(vabsq_f32(v[i]), big));
    if (vminvq_u32(ok) == 0) {
        memset(q, 0, MI_QK);
        *sum = 0;
        return NAN;
    }
    float amax = vmaxnmvq_f32(m);
    if (!(amax > 0.0f))
        amax = 0.0f;
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const int32x4_t hi = vdupq_n_s32(127), lo = vdupq_n_s32(-127);
    int32x4_t total = vdupq_n_s32(0);
    for (int i = 0; i < 8; i += 2) {
        /* x * id rounded to nearest even, then clamped to +-127 */
        int32x4_t i0 = vmaxq_s32(vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(v[i], id)), hi), lo);
        int32x4_t i1 = vmaxq_s32(vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(v[i + 1], id)), hi), lo);
        total = vaddq_s32(total, vaddq_s32(i0, i1));
        int16x8_t h = vcombine_s16(vmovn_s32(i0), vmovn_s32(i1));
        vst1_s8(q + 4 * i, vmovn_s16(h));
    }
    *sum = vaddvq_s32(total);
    return d;
}

/* Natural order, scales d and s[b] = (float)(mult * sum of q) * d[b]: mult
 * -8 gives q8_0/q4_0's offset terms, 1 the k-quants' block sums. */
static void prep_natural(const float *x, int n, void *scratch, mi_act *a, int mult)
{
    int nb = n / MI_QK;
    float *d, *s;
    int8_t *q;
    mi_act_layout(scratch, x, n, a, &d, &s, &q);
    for (int b = 0; b < nb; b++) {
        int sum;
        d[b] = quantize_block(x + b * MI_QK, q + b * MI_QK, &sum);
        s[b] = (float)(mult * sum) * d[b];
    }
}

/* Both block types. */
static void prep_q(const float *x, int n, void *scratch, mi_act *a)
{
    prep_natural(x, n, scratch, a, -8);
}

/* ------------------------------------------------------ block products */

/* Each returns one block's int32x4 of partial sums (their total is the
 * block's integer dot product). */

static inline int32x4_t dot_q8_neon(const int8_t *w, const int8_t *x)
{
    int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16);
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), w0, x0);
    int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), w1, x1);
    return vpadalq_s16(vpaddlq_s16(p0), p1);
}

/* a q4_0 block's 16 bytes as signed weights: elements 0-15, then 16-31 */
static inline void q4_weights(const uint8_t *w, int8x16_t *lo, int8x16_t *hi)
{
    const uint8x16_t v = vld1q_u8(w);
    const int8x16_t eight = vdupq_n_s8(8);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f))), eight);
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
}

static inline int32x4_t dot_q4_neon(const uint8_t *w, const int8_t *x)
{
    int8x16_t lo, hi;
    q4_weights(w, &lo, &hi);
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p = vmull_s8(vget_low_s8(lo), vget_low_s8(x0));
    p = vmlal_high_s8(p, lo, x0);
    p = vmlal_s8(p, vget_low_s8(hi), vget_low_s8(x1));
    p = vmlal_high_s8(p, hi, x1);
    return vpaddlq_s16(p);
}

MI_DOTPROD static inline int32x4_t dot_q8_sdot(const int8_t *w, const int8_t *x)
{
    int32x4_t s = vdotq_s32(vdupq_n_s32(0), vld1q_s8(w), vld1q_s8(x));
    return vdotq_s32(s, vld1q_s8(w + 16), vld1q_s8(x + 16));
}

MI_DOTPROD static inline int32x4_t dot_q4_sdot(const uint8_t *w, const int8_t *x)
{
    int8x16_t lo, hi;
    q4_weights(w, &lo, &hi);
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, vld1q_s8(x)), hi, vld1q_s8(x + 16));
}

/* The row loop of both block types and both families, stamped out per
 * block product DOT (a macro rather than a shared inline function so that
 * each copy is compiled with its family's target attribute ATTR). WT is the
 * weights' element type and BB the bytes of a block's values. Four blocks a
 * step; up to three left over go one at a time. */
#define DEFINE_ROWS_Q(NAME, ATTR, DOT, WT, BB)                                                       \
    ATTR static void NAME(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)  \
    {                                                                                               \
        const int nb = W->cols / MI_QK, nb4 = nb & ~3;                                              \
        const int8_t *xq = a->q;                                                                    \
        for (int r = r0; r < r1; r++) {                                                             \
            const WT *w = (const WT *)W->q + (size_t)r * nb * (BB);                                 \
            const uint16_t *dw = W->d + (size_t)r * nb;                                             \
            float32x4_t acc = vdupq_n_f32(0.0f);                                                    \
            int b = 0;                                                                              \
            for (; b < nb4; b += 4) {                                                               \
                int32x4_t s0 = DOT(w + (b + 0) * (BB), xq + (b + 0) * MI_QK);                       \
                int32x4_t s1 = DOT(w + (b + 1) * (BB), xq + (b + 1) * MI_QK);                       \
                int32x4_t s2 = DOT(w + (b + 2) * (BB), xq + (b + 2) * MI_QK);                       \
                int32x4_t s3 = DOT(w + (b + 3) * (BB), xq + (b + 3) * MI_QK);                       \
                /* lane k: block b + k's integer dot product */                                     \
                int32x4_t s = vpaddq_s32(vpaddq_s32(s0, s1), vpaddq_s32(s2, s3));                   \
                float32x4_t sc = vmulq_f32(f16x4(dw + b), vld1q_f32(a->d + b));                     \
                acc = vfmaq_f32(acc, vcvtq_f32_s32(s), sc);                                         \
            }                                                                                       \
            float v = vaddvq_f32(acc);                                                              \
            for (; b < nb; b++)                                                                     \
                v += (float)vaddvq_s32(DOT(w + b * (BB), xq + b * MI_QK)) * (f16(dw[b]) * a->d[b]); \
            y[r - r0] = add ? y[r - r0] + v : v;                                                    \
        }                                                                                           \
    }

DEFINE_ROWS_Q(rows_q8_0_neon, , dot_q8_neon, int8_t, MI_QK)
DEFINE_ROWS_Q(rows_q4_0_neon, , dot_q4_neon, uint8_t, MI_QK / 2)
DEFINE_ROWS_Q(rows_q8_0_sdot, MI_DOTPROD, dot_q8_sdot, int8_t, MI_QK)
DEFINE_ROWS_Q(rows_q4_0_sdot, MI_DOTPROD, dot_q4_sdot, uint8_t, MI_QK / 2)

/* ------------------------------------------------------------ k-quants */

/* Both k-quant layouts read the activations in natural order (a q4_K/q5_K
 * group's low nibbles are sub-block 2g, its high ones 2g+1; q6_K's levels
 * are decoded in element order); s[b] is the block's sum of q times d. */
static void prep_qk(const float *x, int n, void *scratch, mi_act *a)
{
    prep_natural(x, n, scratch, a, 1);
}

/* int32x4 partial sums of 32 levels (w0: elements 0-15, w1: 16-31) times
 * the activations at x; q5_K's levels are at most 31, so four products per
 * int16 lane (at most 4 * 31 * 127) fit. */
static inline int32x4_t dot32_neon(int8x16_t w0, int8x16_t w1, const int8_t *x)
{
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p = vmull_s8(vget_low_s8(w0), vget_low_s8(x0));
    p = vmlal_high_s8(p, w0, x0);
    p = vmlal_s8(p, vget_low_s8(w1), vget_low_s8(x1));
    p = vmlal_high_s8(p, w1, x1);
    return vpaddlq_s16(p);
}

MI_DOTPROD static inline int32x4_t dot32_sdot(int8x16_t w0, int8x16_t w1, const int8_t *x)
{
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(x)), w1, vld1q_s8(x + 16));
}

/* 16 levels (q6_K's -32..31: two products per int16 lane) */
static inline int32x4_t dot16_neon(int8x16_t w, const int8_t *x)
{
    int8x16_t xv = vld1q_s8(x);
    return vpaddlq_s16(vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(xv)), w, xv));
}

MI_DOTPROD static inline int32x4_t dot16_sdot(int8x16_t w, const int8_t *x)
{
    return vdotq_s32(vdupq_n_s32(0), w, vld1q_s8(x));
}

/* lane j: the total of s[j] (four sub-blocks' partial sums to one lane each) */
static inline int32x4_t totals4(int32x4_t s0, int32x4_t s1, int32x4_t s2, int32x4_t s3)
{
    return vpaddq_s32(vpaddq_s32(s0, s1), vpaddq_s32(s2, s3));
}

/* q4_K and q5_K (FIVE: the fifth bits from qh), stamped out per DOT32 as the
 * q4_0 rows are. Per super-block the eight sub-blocks' integer dots go to
 * one lane each and take their factors d * sc_j * dx_j in two FMAs; the
 * mins' term dmin * m_j * s_j is summed apart and subtracted at the end. The
 * levels (0..15, 0..31) are small enough to be used as signed bytes. */
#define DEFINE_ROWS_Q45(NAME, ATTR, DOT32, FIVE)                                                             \
    ATTR static void NAME(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)          \
    {                                                                                                       \
        const int ns = W->cols / MI_QK_K, bb = (FIVE) ? 176 : 144;                                          \
        const uint8x16_t low = vdupq_n_u8(0x0f), b4 = vdupq_n_u8(0x10);                                     \
        for (int r = r0; r < r1; r++) {                                                                     \
            const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;                                 \
            float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = acc0, mins = acc0;                                 \
            for (int k = 0; k < ns; k++) {                                                                  \
                const uint8_t *blk = w + (size_t)k * bb;                                                    \
                uint64_t sc, m;                                                                             \
                mi_kq_scales_mins(blk + 4, &sc, &m);                                                        \
                uint32_t dbits;                                                                             \
                memcpy(&dbits, blk, 4);                                                                     \
                /* d, dmin, d, dmin */                                                                      \
                float32x4_t dd = vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(dbits)));                     \
                uint16x8_t sc16 = vmovl_u8(vcreate_u8(sc)), m16 = vmovl_u8(vcreate_u8(m));                  \
                const float *dx = a->d + 8 * k, *sx = a->s + 8 * k;                                         \
                float32x4_t f0 = vmulq_f32(vmulq_laneq_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(sc16))), dd, 0), \
                                           vld1q_f32(dx));                                                  \
                float32x4_t f1 = vmulq_f32(vmulq_laneq_f32(vcvtq_f32_u32(vmovl_high_u16(sc16)), dd, 0),     \
                                           vld1q_f32(dx + 4));                                              \
                mins = vfmaq_f32(mins, vmulq_laneq_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(m16))), dd, 1), \
                                 vld1q_f32(sx));                                                            \
                mins = vfmaq_f32(mins, vmulq_laneq_f32(vcvtq_f32_u32(vmovl_high_u16(m16)), dd, 1),          \
                                 vld1q_f32(sx + 4));                                                        \
                const uint8_t *qs = blk + ((FIVE) ? 48 : 16);                                               \
                const int8_t *xq = a->q + (size_t)k * MI_QK_K;                                              \
                uint8x16_t qh0 = vdupq_n_u8(0), qh1 = qh0;                                                  \
                if (FIVE) {                                                                                 \
                    qh0 = vld1q_u8(blk + 16);                                                               \
                    qh1 = vld1q_u8(blk + 32);                                                               \
                }                                                                                           \
                int32x4_t s[8];                                                                             \
                for (int g = 0; g < 4; g++) {                                                               \
                    uint8x16_t v0 = vld1q_u8(qs + 32 * g), v1 = vld1q_u8(qs + 32 * g + 16);                 \
                    uint8x16_t l0 = vandq_u8(v0, low), l1 = vandq_u8(v1, low);                              \
                    uint8x16_t h0 = vshrq_n_u8(v0, 4), h1 = vshrq_n_u8(v1, 4);                              \
                    if (FIVE) { /* bit j of qh to bit 4: a shift by 4 - j (negative: right) */              \
                        int8x16_t sl = vdupq_n_s8((int8_t)(4 - 2 * g)), sh = vdupq_n_s8((int8_t)(3 - 2 * g)); \
                        l0 = vorrq_u8(l0, vandq_u8(vshlq_u8(qh0, sl), b4));                                 \
                        l1 = vorrq_u8(l1, vandq_u8(vshlq_u8(qh1, sl), b4));                                 \
                        h0 = vorrq_u8(h0, vandq_u8(vshlq_u8(qh0, sh), b4));                                 \
                        h1 = vorrq_u8(h1, vandq_u8(vshlq_u8(qh1, sh), b4));                                 \
                    }                                                                                       \
                    s[2 * g] = DOT32(vreinterpretq_s8_u8(l0), vreinterpretq_s8_u8(l1), xq + 64 * g);        \
                    s[2 * g + 1] = DOT32(vreinterpretq_s8_u8(h0), vreinterpretq_s8_u8(h1), xq + 64 * g + 32); \
                }                                                                                           \
                acc0 = vfmaq_f32(acc0, vcvtq_f32_s32(totals4(s[0], s[1], s[2], s[3])), f0);                 \
                acc1 = vfmaq_f32(acc1, vcvtq_f32_s32(totals4(s[4], s[5], s[6], s[7])), f1);                 \
            }                                                                                               \
            float v = vaddvq_f32(vaddq_f32(acc0, acc1)) - vaddvq_f32(mins);                                 \
            y[r - r0] = add ? y[r - r0] + v : v;                                                            \
        }                                                                                                   \
    }

DEFINE_ROWS_Q45(rows_q4_K_neon, , dot32_neon, 0)
DEFINE_ROWS_Q45(rows_q5_K_neon, , dot32_neon, 1)
DEFINE_ROWS_Q45(rows_q4_K_sdot, MI_DOTPROD, dot32_sdot, 0)
DEFINE_ROWS_Q45(rows_q5_K_sdot, MI_DOTPROD, dot32_sdot, 1)

/* q6_K: a half super-block's 64 low-nibble bytes (L0-L3) and 32 high-bit
 * bytes (H0, H1) decoded into its 128 levels in element order, 16 at a time
 * (SLI inserts the high bits above a nibble), less the offset of 32; each
 * 16 is a sub-block. Lane j of f[i] is the factor d * sc_j * dx of
 * sub-block 4i + j (block (4i + j) / 2). */
#define DEFINE_ROWS_Q6(NAME, ATTR, DOT16)                                                                   \
    ATTR static void NAME(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)          \
    {                                                                                                       \
        const int ns = W->cols / MI_QK_K, bb = 210;                                                         \
        const uint8x16_t m3f = vdupq_n_u8(0x3f), m30 = vdupq_n_u8(0x30);                                    \
        const int8x16_t k32 = vdupq_n_s8(32);                                                               \
        for (int r = r0; r < r1; r++) {                                                                     \
            const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;                                 \
            float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; \
            for (int k = 0; k < ns; k++) {                                                                  \
                const uint8_t *blk = w + (size_t)k * bb;                                                    \
                uint16_t dh;                                                                                \
                memcpy(&dh, blk + 208, 2);                                                                  \
                float d = f16(dh);                                                                          \
                float32x4_t dx0 = vmulq_n_f32(vld1q_f32(a->d + 8 * k), d);                                  \
                float32x4_t dx1 = vmulq_n_f32(vld1q_f32(a->d + 8 * k + 4), d);                              \
                int8x16_t scb = vld1q_s8((const int8_t *)(blk + 192));                                      \
                int16x8_t sc0 = vmovl_s8(vget_low_s8(scb)), sc1 = vmovl_high_s8(scb);                       \
                float32x4_t f[4] = {                                                                        \
                    vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(sc0))), vzip1q_f32(dx0, dx0)),           \
                    vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(sc0)), vzip2q_f32(dx0, dx0)),                    \
                    vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(sc1))), vzip1q_f32(dx1, dx1)),           \
                    vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(sc1)), vzip2q_f32(dx1, dx1)),                    \
                };                                                                                          \
                const int8_t *xq = a->q + (size_t)k * MI_QK_K;                                              \
                for (int h = 0; h < 2; h++) {                                                               \
                    const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;                             \
                    uint8x16_t L0 = vld1q_u8(ql), L1 = vld1q_u8(ql + 16);                                   \
                    uint8x16_t L2 = vld1q_u8(ql + 32), L3 = vld1q_u8(ql + 48);                              \
                    uint8x16_t H0 = vld1q_u8(qh), H1 = vld1q_u8(qh + 16);                                   \
                    uint8x16_t e[8] = {                                                                     \
                        vandq_u8(vsliq_n_u8(L0, H0, 4), m3f),                                               \
                        vandq_u8(vsliq_n_u8(L1, H1, 4), m3f),                                               \
                        vandq_u8(vsliq_n_u8(L2, vshrq_n_u8(H0, 2), 4), m3f),                                \
                        vandq_u8(vsliq_n_u8(L3, vshrq_n_u8(H1, 2), 4), m3f),                                \
                        vorrq_u8(vshrq_n_u8(L0, 4), vandq_u8(H0, m30)),                                     \
                        vorrq_u8(vshrq_n_u8(L1, 4), vandq_u8(H1, m30)),                                     \
                        vsliq_n_u8(vshrq_n_u8(L2, 4), vshrq_n_u8(H0, 6), 4),                                \
                        vsliq_n_u8(vshrq_n_u8(L3, 4), vshrq_n_u8(H1, 6), 4),                                \
                    };                                                                                      \
                    int32x4_t s[8];                                                                         \
                    for (int i = 0; i < 8; i++)                                                             \
                        s[i] = DOT16(vsubq_s8(vreinterpretq_s8_u8(e[i]), k32), xq + 128 * h + 16 * i);      \
                    acc[2 * h] = vfmaq_f32(acc[2 * h], vcvtq_f32_s32(totals4(s[0], s[1], s[2], s[3])), f[2 * h]); \
                    acc[2 * h + 1] =                                                                        \
                        vfmaq_f32(acc[2 * h + 1], vcvtq_f32_s32(totals4(s[4], s[5], s[6], s[7])), f[2 * h + 1]); \
                }                                                                                           \
            }                                                                                               \
            float v = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));          \
            y[r - r0] = add ? y[r - r0] + v : v;                                                            \
        }                                                                                                   \
    }

DEFINE_ROWS_Q6(rows_q6_K_neon, , dot16_neon)
DEFINE_ROWS_Q6(rows_q6_K_sdot, MI_DOTPROD, dot16_sdot)

const mi_kernel_family mi_kernels_neon = {
    "neon",
    neon_available,
    {NULL, NULL, prep_q, prep_q, prep_qk, prep_qk, prep_qk},
    {rows_f32, rows_f16, rows_q8_0_neon, rows_q4_0_neon, rows_q4_K_neon, rows_q5_K_neon, rows_q6_K_neon},
};

const mi_kernel_family mi_kernels_neon_dot = {
    "neon-dotprod",
    dot_available,
    {NULL, NULL, prep_q, prep_q, prep_qk, prep_qk, prep_qk},
    {rows_f32, rows_f16, rows_q8_0_sdot, rows_q4_0_sdot, rows_q4_K_sdot, rows_q5_K_sdot, rows_q6_K_sdot},
};
