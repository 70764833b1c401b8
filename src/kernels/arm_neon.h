/* The AArch64 families' inline pieces that their row kernels (arm_neon.c)
 * and their tile kernels (arm_neon_tile.c) share, as x86_avx512.h does for
 * AVX-512: a weight block's decoding (its half that depends on the weights
 * alone) and its application to one activation row are one piece of code in
 * both, so every row's operations are the row kernel's (family.h). The
 * pieces that use SDOT are stamped out per family by macros, each copy
 * compiled with its family's target attribute. Internal. */
#ifndef MESHINFER_ARM_NEON_H
#define MESHINFER_ARM_NEON_H

#if defined(__clang__) && __clang_major__ < 16 && !defined(__ARM_FEATURE_DOTPROD)
/* clang before 16 declares the dot-product intrinsics only when the whole
 * file targets the extension; they compile in dotprod functions all the same */
#define __ARM_FEATURE_DOTPROD 1
#endif
#include <arm_neon.h>
#include <string.h>

#include "family.h"

/* Code using SDOT. GCC names the architecture; clang takes the feature. */
#if defined(__clang__)
#define MI_DOTPROD __attribute__((target("dotprod")))
#else
#define MI_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#define MI_INLINE static inline __attribute__((always_inline))

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

/* eight fp16 weights widened: lo elements 0-3, hi 4-7 */
static inline void f16x8(uint16x8_t h, float32x4_t *lo, float32x4_t *hi)
{
    float16x8_t f = vreinterpretq_f16_u16(h);
    *lo = vcvt_f32_f16(vget_low_f16(f));
    *hi = vcvt_high_f32_f16(f);
}

/* ------------------------------------------------------ block products */

/* A q8_0 or q4_0 block's 32 weights as signed bytes: elements 0-15, 16-31
 * (q4_0's nibbles less 8: -8..7). */
typedef struct {
    int8x16_t lo, hi;
} wblk;

static inline wblk q8_wblk(const int8_t *w)
{
    return (wblk){vld1q_s8(w), vld1q_s8(w + 16)};
}

static inline wblk q4_wblk(const uint8_t *w)
{
    const uint8x16_t v = vld1q_u8(w);
    const int8x16_t eight = vdupq_n_s8(8);
    return (wblk){vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f))), eight),
                  vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight)};
}

/* Each returns one block's int32x4 of partial sums (their total is the
 * block's integer dot product) against the activations at x. */

static inline int32x4_t dot_q8_neon(wblk w, const int8_t *x)
{
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w.lo), vget_low_s8(x0)), w.lo, x0);
    int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w.hi), vget_low_s8(x1)), w.hi, x1);
    return vpadalq_s16(vpaddlq_s16(p0), p1);
}

static inline int32x4_t dot_q4_neon(wblk w, const int8_t *x)
{
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p = vmull_s8(vget_low_s8(w.lo), vget_low_s8(x0));
    p = vmlal_high_s8(p, w.lo, x0);
    p = vmlal_s8(p, vget_low_s8(w.hi), vget_low_s8(x1));
    p = vmlal_high_s8(p, w.hi, x1);
    return vpaddlq_s16(p);
}

MI_DOTPROD static inline int32x4_t dot_q8_sdot(wblk w, const int8_t *x)
{
    int32x4_t s = vdotq_s32(vdupq_n_s32(0), w.lo, vld1q_s8(x));
    return vdotq_s32(s, w.hi, vld1q_s8(x + 16));
}

MI_DOTPROD static inline int32x4_t dot_q4_sdot(wblk w, const int8_t *x)
{
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w.lo, vld1q_s8(x)), w.hi, vld1q_s8(x + 16));
}

/* A q8_0/q4_0 row's blocks after the groups of four, one at a time, added to
 * v (the total of its accumulator), stamped out per block product DOT. */
#define DEFINE_Q_TAIL(NAME, ATTR, DOT, WBLK, WT, BB)                                                  \
    ATTR MI_INLINE float NAME(const WT *w, const uint16_t *dw, int b, int nb, const mi_act *a, float v) \
    {                                                                                                 \
        for (; b < nb; b++)                                                                           \
            v += (float)vaddvq_s32(DOT(WBLK(w + b * (BB)), a->q + b * MI_QK)) * (f16(dw[b]) * a->d[b]); \
        return v;                                                                                     \
    }

DEFINE_Q_TAIL(q8_tail_neon, , dot_q8_neon, q8_wblk, int8_t, MI_QK)
DEFINE_Q_TAIL(q4_tail_neon, , dot_q4_neon, q4_wblk, uint8_t, MI_QK / 2)
DEFINE_Q_TAIL(q8_tail_sdot, MI_DOTPROD, dot_q8_sdot, q8_wblk, int8_t, MI_QK)
DEFINE_Q_TAIL(q4_tail_sdot, MI_DOTPROD, dot_q4_sdot, q4_wblk, uint8_t, MI_QK / 2)

/* ------------------------------------------------------------ k-quants */

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

/* A q4_K/q5_K super-block decoded: sc[i] lane j = d * sc of sub-block
 * 4i + j, mn[i] the same of dmin * m; lv[4g..4g+3] group g's levels as
 * signed bytes (0..15, 0..31): sub-block 2g's elements 0-15 and 16-31, then
 * sub-block 2g+1's. */
typedef struct {
    float32x4_t sc[2], mn[2];
    int8x16_t lv[16];
} q45_w;

MI_INLINE void q45_decode(const uint8_t *blk, q45_w *w, const int five)
{
    const uint8x16_t low = vdupq_n_u8(0x0f), b4 = vdupq_n_u8(0x10);
    uint64_t sc, m;
    mi_kq_scales_mins(blk + 4, &sc, &m);
    uint32_t dbits;
    memcpy(&dbits, blk, 4);
    /* d, dmin, d, dmin */
    float32x4_t dd = vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(dbits)));
    uint16x8_t sc16 = vmovl_u8(vcreate_u8(sc)), m16 = vmovl_u8(vcreate_u8(m));
    w->sc[0] = vmulq_laneq_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(sc16))), dd, 0);
    w->sc[1] = vmulq_laneq_f32(vcvtq_f32_u32(vmovl_high_u16(sc16)), dd, 0);
    w->mn[0] = vmulq_laneq_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(m16))), dd, 1);
    w->mn[1] = vmulq_laneq_f32(vcvtq_f32_u32(vmovl_high_u16(m16)), dd, 1);
    const uint8_t *qs = blk + (five ? 48 : 16);
    uint8x16_t qh0 = vdupq_n_u8(0), qh1 = qh0;
    if (five) {
        qh0 = vld1q_u8(blk + 16);
        qh1 = vld1q_u8(blk + 32);
    }
    for (int g = 0; g < 4; g++) {
        uint8x16_t v0 = vld1q_u8(qs + 32 * g), v1 = vld1q_u8(qs + 32 * g + 16);
        uint8x16_t l0 = vandq_u8(v0, low), l1 = vandq_u8(v1, low);
        uint8x16_t h0 = vshrq_n_u8(v0, 4), h1 = vshrq_n_u8(v1, 4);
        if (five) { /* bit j of qh to bit 4: a shift by 4 - j (negative: right) */
            int8x16_t sl = vdupq_n_s8((int8_t)(4 - 2 * g)), sh = vdupq_n_s8((int8_t)(3 - 2 * g));
            l0 = vorrq_u8(l0, vandq_u8(vshlq_u8(qh0, sl), b4));
            l1 = vorrq_u8(l1, vandq_u8(vshlq_u8(qh1, sl), b4));
            h0 = vorrq_u8(h0, vandq_u8(vshlq_u8(qh0, sh), b4));
            h1 = vorrq_u8(h1, vandq_u8(vshlq_u8(qh1, sh), b4));
        }
        w->lv[4 * g] = vreinterpretq_s8_u8(l0);
        w->lv[4 * g + 1] = vreinterpretq_s8_u8(l1);
        w->lv[4 * g + 2] = vreinterpretq_s8_u8(h0);
        w->lv[4 * g + 3] = vreinterpretq_s8_u8(h1);
    }
}

/* Super-block k of a decoded q4_K/q5_K row applied to activations a: the
 * eight sub-blocks' integer dots to one lane each take their factors
 * d * sc_j * dx_j in two FMAs (acc[0], acc[1]); the mins' term
 * dmin * m_j * s_j goes to acc[2], subtracted at the end. */
#define DEFINE_Q45_APPLY(NAME, ATTR, DOT32)                                                                  \
    ATTR MI_INLINE void NAME(const q45_w *w, int k, const mi_act *a, float32x4_t *acc)                     \
    {                                                                                                       \
        const float *dx = a->d + 8 * k, *sx = a->s + 8 * k;                                                 \
        float32x4_t f0 = vmulq_f32(w->sc[0], vld1q_f32(dx)), f1 = vmulq_f32(w->sc[1], vld1q_f32(dx + 4));   \
        acc[2] = vfmaq_f32(acc[2], w->mn[0], vld1q_f32(sx));                                                \
        acc[2] = vfmaq_f32(acc[2], w->mn[1], vld1q_f32(sx + 4));                                            \
        const int8_t *xq = a->q + (size_t)k * MI_QK_K;                                                      \
        int32x4_t s[8];                                                                                     \
        for (int g = 0; g < 4; g++) {                                                                       \
            s[2 * g] = DOT32(w->lv[4 * g], w->lv[4 * g + 1], xq + 64 * g);                                  \
            s[2 * g + 1] = DOT32(w->lv[4 * g + 2], w->lv[4 * g + 3], xq + 64 * g + 32);                     \
        }                                                                                                   \
        acc[0] = vfmaq_f32(acc[0], vcvtq_f32_s32(totals4(s[0], s[1], s[2], s[3])), f0);                     \
        acc[1] = vfmaq_f32(acc[1], vcvtq_f32_s32(totals4(s[4], s[5], s[6], s[7])), f1);                     \
    }

DEFINE_Q45_APPLY(q45_apply_neon, , dot32_neon)
DEFINE_Q45_APPLY(q45_apply_sdot, MI_DOTPROD, dot32_sdot)

static inline float q45_total(const float32x4_t *acc)
{
    return vaddvq_f32(vaddq_f32(acc[0], acc[1])) - vaddvq_f32(acc[2]);
}

/* q6_K: a half super-block's 64 low-nibble bytes (L0-L3) and 32 high-bit
 * bytes (H0, H1) decoded into its 128 levels in element order, 16 at a time
 * (SLI inserts the high bits above a nibble), less the offset of 32; each
 * 16 is a sub-block (lv[8h + i]). sc[i] lane j: the scale of sub-block 4i + j. */
typedef struct {
    float32x4_t sc[4];
    float d;
    int8x16_t lv[16];
} q6_w;

MI_INLINE void q6_decode(const uint8_t *blk, q6_w *w)
{
    const uint8x16_t m3f = vdupq_n_u8(0x3f), m30 = vdupq_n_u8(0x30);
    const int8x16_t k32 = vdupq_n_s8(32);
    uint16_t dh;
    memcpy(&dh, blk + 208, 2);
    w->d = f16(dh);
    int8x16_t scb = vld1q_s8((const int8_t *)(blk + 192));
    int16x8_t sc0 = vmovl_s8(vget_low_s8(scb)), sc1 = vmovl_high_s8(scb);
    w->sc[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(sc0)));
    w->sc[1] = vcvtq_f32_s32(vmovl_high_s16(sc0));
    w->sc[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(sc1)));
    w->sc[3] = vcvtq_f32_s32(vmovl_high_s16(sc1));
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
        uint8x16_t L0 = vld1q_u8(ql), L1 = vld1q_u8(ql + 16);
        uint8x16_t L2 = vld1q_u8(ql + 32), L3 = vld1q_u8(ql + 48);
        uint8x16_t H0 = vld1q_u8(qh), H1 = vld1q_u8(qh + 16);
        uint8x16_t e[8] = {
            vandq_u8(vsliq_n_u8(L0, H0, 4), m3f),
            vandq_u8(vsliq_n_u8(L1, H1, 4), m3f),
            vandq_u8(vsliq_n_u8(L2, vshrq_n_u8(H0, 2), 4), m3f),
            vandq_u8(vsliq_n_u8(L3, vshrq_n_u8(H1, 2), 4), m3f),
            vorrq_u8(vshrq_n_u8(L0, 4), vandq_u8(H0, m30)),
            vorrq_u8(vshrq_n_u8(L1, 4), vandq_u8(H1, m30)),
            vsliq_n_u8(vshrq_n_u8(L2, 4), vshrq_n_u8(H0, 6), 4),
            vsliq_n_u8(vshrq_n_u8(L3, 4), vshrq_n_u8(H1, 6), 4),
        };
        for (int i = 0; i < 8; i++)
            w->lv[8 * h + i] = vsubq_s8(vreinterpretq_s8_u8(e[i]), k32);
    }
}

/* Super-block k of a decoded q6_K row applied to activations a: lane j of
 * f[i] is the factor d * sc_j * dx of sub-block 4i + j (block (4i + j) / 2). */
#define DEFINE_Q6_APPLY(NAME, ATTR, DOT16)                                                                   \
    ATTR MI_INLINE void NAME(const q6_w *w, int k, const mi_act *a, float32x4_t *acc)                      \
    {                                                                                                       \
        float32x4_t dx0 = vmulq_n_f32(vld1q_f32(a->d + 8 * k), w->d);                                       \
        float32x4_t dx1 = vmulq_n_f32(vld1q_f32(a->d + 8 * k + 4), w->d);                                   \
        float32x4_t f[4] = {                                                                                \
            vmulq_f32(w->sc[0], vzip1q_f32(dx0, dx0)),                                                      \
            vmulq_f32(w->sc[1], vzip2q_f32(dx0, dx0)),                                                      \
            vmulq_f32(w->sc[2], vzip1q_f32(dx1, dx1)),                                                      \
            vmulq_f32(w->sc[3], vzip2q_f32(dx1, dx1)),                                                      \
        };                                                                                                  \
        const int8_t *xq = a->q + (size_t)k * MI_QK_K;                                                      \
        for (int h = 0; h < 2; h++) {                                                                       \
            int32x4_t s[8];                                                                                 \
            for (int i = 0; i < 8; i++)                                                                     \
                s[i] = DOT16(w->lv[8 * h + i], xq + 128 * h + 16 * i);                                      \
            acc[2 * h] = vfmaq_f32(acc[2 * h], vcvtq_f32_s32(totals4(s[0], s[1], s[2], s[3])), f[2 * h]);   \
            acc[2 * h + 1] =                                                                                \
                vfmaq_f32(acc[2 * h + 1], vcvtq_f32_s32(totals4(s[4], s[5], s[6], s[7])), f[2 * h + 1]);    \
        }                                                                                                   \
    }

DEFINE_Q6_APPLY(q6_apply_neon, , dot16_neon)
DEFINE_Q6_APPLY(q6_apply_sdot, MI_DOTPROD, dot16_sdot)

static inline float q6_total(const float32x4_t *acc)
{
    return vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
}

/* the tile kernels (arm_neon_tile.c): fp32, fp16 shared by both families */
#define MI_NEON_TILE_FN(name)                                                                                \
    void name(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add)
MI_NEON_TILE_FN(mi_neon_tile_f32);
MI_NEON_TILE_FN(mi_neon_tile_f16);
MI_NEON_TILE_FN(mi_neon_tile_q8_0);
MI_NEON_TILE_FN(mi_neon_tile_q4_0);
MI_NEON_TILE_FN(mi_neon_tile_q4_K);
MI_NEON_TILE_FN(mi_neon_tile_q5_K);
MI_NEON_TILE_FN(mi_neon_tile_q6_K);
MI_NEON_TILE_FN(mi_sdot_tile_q8_0);
MI_NEON_TILE_FN(mi_sdot_tile_q4_0);
MI_NEON_TILE_FN(mi_sdot_tile_q4_K);
MI_NEON_TILE_FN(mi_sdot_tile_q5_K);
MI_NEON_TILE_FN(mi_sdot_tile_q6_K);

#endif
