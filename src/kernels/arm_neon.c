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
 * fp32/fp16 (the tiles of arm_neon_tile.c at one activation row): one row
 * at a time (as x86_avx512.c explains, one stream per row keeps the
 * prefetchers effective in a loop bound by streaming the weights),
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
 * lane, four sub-blocks' factors (d * sc * dx) applied in one FMA; see
 * arm_neon.h. One row at a time: the two-row loop that helped on x86 has
 * not been measured on a Pi.
 *
 * The pieces shared with the tile kernels (products of several activation
 * rows, arm_neon_tile.c) are in arm_neon.h. */
#include <float.h>
#include <math.h>
#include <string.h>
#if defined(__linux__)
#include <sys/auxv.h>
#endif

#include "arm_neon.h"

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

/* ------------------------------------------------------------ fp32, fp16 */

static void rows_f32(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    mi_neon_tile_f32(y, 0, W, r0, r1, a, 1, add);
}

static void rows_f16(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    mi_neon_tile_f16(y, 0, W, r0, r1, a, 1, add);
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

/* The row loop of both block types and both families, stamped out per
 * block product DOT (a macro rather than a shared inline function so that
 * each copy is compiled with its family's target attribute ATTR). WBLK reads
 * a block's weights (arm_neon.h), WT is their element type and BB the bytes
 * of a block's values. Four blocks a step; up to three left over go one at a
 * time (TAIL). */
#define DEFINE_ROWS_Q(NAME, ATTR, DOT, WBLK, TAIL, WT, BB)                                         \
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
                int32x4_t s0 = DOT(WBLK(w + (b + 0) * (BB)), xq + (b + 0) * MI_QK);                 \
                int32x4_t s1 = DOT(WBLK(w + (b + 1) * (BB)), xq + (b + 1) * MI_QK);                 \
                int32x4_t s2 = DOT(WBLK(w + (b + 2) * (BB)), xq + (b + 2) * MI_QK);                 \
                int32x4_t s3 = DOT(WBLK(w + (b + 3) * (BB)), xq + (b + 3) * MI_QK);                 \
                /* lane k: block b + k's integer dot product */                                     \
                int32x4_t s = vpaddq_s32(vpaddq_s32(s0, s1), vpaddq_s32(s2, s3));                   \
                float32x4_t sc = vmulq_f32(f16x4(dw + b), vld1q_f32(a->d + b));                     \
                acc = vfmaq_f32(acc, vcvtq_f32_s32(s), sc);                                         \
            }                                                                                       \
            float v = TAIL(w, dw, b, nb, a, vaddvq_f32(acc));                                       \
            y[r - r0] = add ? y[r - r0] + v : v;                                                    \
        }                                                                                           \
    }

DEFINE_ROWS_Q(rows_q8_0_neon, , dot_q8_neon, q8_wblk, q8_tail_neon, int8_t, MI_QK)
DEFINE_ROWS_Q(rows_q4_0_neon, , dot_q4_neon, q4_wblk, q4_tail_neon, uint8_t, MI_QK / 2)
DEFINE_ROWS_Q(rows_q8_0_sdot, MI_DOTPROD, dot_q8_sdot, q8_wblk, q8_tail_sdot, int8_t, MI_QK)
DEFINE_ROWS_Q(rows_q4_0_sdot, MI_DOTPROD, dot_q4_sdot, q4_wblk, q4_tail_sdot, uint8_t, MI_QK / 2)

/* ------------------------------------------------------------ k-quants */

/* Both k-quant layouts read the activations in natural order (a q4_K/q5_K
 * group's low nibbles are sub-block 2g, its high ones 2g+1; q6_K's levels
 * are decoded in element order); s[b] is the block's sum of q times d. */
static void prep_qk(const float *x, int n, void *scratch, mi_act *a)
{
    prep_natural(x, n, scratch, a, 1);
}

/* q4_K and q5_K (FIVE: the fifth bits from qh), stamped out per APPLY
 * (arm_neon.h) as the q4_0 rows are: each super-block decoded, then applied. */
#define DEFINE_ROWS_Q45(NAME, ATTR, APPLY, FIVE)                                                    \
    ATTR static void NAME(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add) \
    {                                                                                              \
        const int ns = W->cols / MI_QK_K, bb = (FIVE) ? 176 : 144;                                 \
        for (int r = r0; r < r1; r++) {                                                            \
            const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;                        \
            float32x4_t acc[3] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};        \
            for (int k = 0; k < ns; k++) {                                                         \
                q45_w d;                                                                           \
                q45_decode(w + (size_t)k * bb, &d, FIVE);                                          \
                APPLY(&d, k, a, acc);                                                              \
            }                                                                                      \
            float v = q45_total(acc);                                                              \
            y[r - r0] = add ? y[r - r0] + v : v;                                                   \
        }                                                                                          \
    }

DEFINE_ROWS_Q45(rows_q4_K_neon, , q45_apply_neon, 0)
DEFINE_ROWS_Q45(rows_q5_K_neon, , q45_apply_neon, 1)
DEFINE_ROWS_Q45(rows_q4_K_sdot, MI_DOTPROD, q45_apply_sdot, 0)
DEFINE_ROWS_Q45(rows_q5_K_sdot, MI_DOTPROD, q45_apply_sdot, 1)

#define DEFINE_ROWS_Q6(NAME, ATTR, APPLY)                                                           \
    ATTR static void NAME(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add) \
    {                                                                                              \
        const int ns = W->cols / MI_QK_K, bb = 210;                                                \
        for (int r = r0; r < r1; r++) {                                                            \
            const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;                        \
            float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),         \
                                  vdupq_n_f32(0.0f)};                                              \
            for (int k = 0; k < ns; k++) {                                                         \
                q6_w d;                                                                            \
                q6_decode(w + (size_t)k * bb, &d);                                                 \
                APPLY(&d, k, a, acc);                                                              \
            }                                                                                      \
            float v = q6_total(acc);                                                               \
            y[r - r0] = add ? y[r - r0] + v : v;                                                   \
        }                                                                                          \
    }

DEFINE_ROWS_Q6(rows_q6_K_neon, , q6_apply_neon)
DEFINE_ROWS_Q6(rows_q6_K_sdot, MI_DOTPROD, q6_apply_sdot)

const mi_kernel_family mi_kernels_neon = {
    "neon",
    neon_available,
    {NULL, NULL, prep_q, prep_q, prep_qk, prep_qk, prep_qk},
    {rows_f32, rows_f16, rows_q8_0_neon, rows_q4_0_neon, rows_q4_K_neon, rows_q5_K_neon, rows_q6_K_neon},
    {mi_neon_tile_f32, mi_neon_tile_f16, mi_neon_tile_q8_0, mi_neon_tile_q4_0, mi_neon_tile_q4_K, mi_neon_tile_q5_K,
     mi_neon_tile_q6_K},
};

const mi_kernel_family mi_kernels_neon_dot = {
    "neon-dotprod",
    dot_available,
    {NULL, NULL, prep_q, prep_q, prep_qk, prep_qk, prep_qk},
    {rows_f32, rows_f16, rows_q8_0_sdot, rows_q4_0_sdot, rows_q4_K_sdot, rows_q5_K_sdot, rows_q6_K_sdot},
    {mi_neon_tile_f32, mi_neon_tile_f16, mi_sdot_tile_q8_0, mi_sdot_tile_q4_0, mi_sdot_tile_q4_K, mi_sdot_tile_q5_K,
     mi_sdot_tile_q6_K},
};
