/* The AVX-512 family's inline pieces that its row kernels (x86_avx512.c)
 * and its tile kernels (x86_avx512_tile.c) share, so that a weight block's
 * arithmetic is one piece of code in both: a k-quant super-block is decoded
 * (the weights' half: levels and scales) and then applied to one activation
 * row (the activations' half: factors, products, accumulators). A row kernel
 * does both per row; a tile kernel decodes once and applies it to each of its
 * activation rows, so every row's operations are the row kernel's (family.h).
 * Internal: only for files compiled with the family's flags. */
#ifndef MESHINFER_X86_AVX512_H
#define MESHINFER_X86_AVX512_H

#include <immintrin.h>
#include <string.h>

#include "family.h"

static inline float hsum256(__m256 v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* Indices for _mm512_permutexvar_ps that spread the products' block scales
 * (d_w * d_x of eight consecutive blocks, lanes 0-7) over the lanes of the
 * int32 sums: q8_0's vectors hold two blocks, so in idx[k] lanes 0-7 take
 * block k's scale and lanes 8-15 block k+1's (k even); q4_0's hold four, so in
 * idx[k] lanes 4j..4j+3 take block 4k+j's. Initialisers, for
 * `const __m512i idx[4] = MI_Q8_SCALE_IDX;` in a kernel. */
#define MI_Q8_SCALE_IDX                                                                                       \
    {                                                                                                         \
        _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),                                     \
        _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),                                     \
        _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),                                     \
        _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6),                                     \
    }
#define MI_Q4_SCALE_IDX                                                                                       \
    {                                                                                                         \
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),                                     \
        _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4),                                     \
    }

/* q4_0: the low and high nibbles of 64 bytes of weights (four blocks) */
static inline void q4_nibbles(const uint8_t *w, __m512i *lo, __m512i *hi)
{
    const __m512i lowmask = _mm512_set1_epi8(0x0f);
    __m512i v = _mm512_loadu_si512(w);
    *lo = _mm512_and_si512(v, lowmask);
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), lowmask);
}

/* int32 sums of four q4_0 blocks (lanes 4j..4j+3 belong to block j) from
 * their nibbles and the activations of the group at xg (prep_q4_0's order) */
static inline __m512i dot4_q4_lohi(__m512i lo, __m512i hi, const int8_t *xg)
{
    __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xg));
    return _mm512_dpbusd_epi32(dot, hi, _mm512_loadu_si512(xg + 64));
}

static inline __m512i dot4_q4(const uint8_t *w, const int8_t *xg)
{
    __m512i lo, hi;
    q4_nibbles(w, &lo, &hi);
    return dot4_q4_lohi(lo, hi, xg);
}

/* q8_0: 64 weights (two blocks) against 64 activations, the int32 sums of
 * four products per lane. vpdpbusd multiplies unsigned by signed bytes: the
 * weights go in as |w| (0..128 as unsigned bytes: exact also for -128) and
 * their signs move onto the activations (|q| <= 127, so negating is exact);
 * aw and the sign mask are the weights' share, made once per tile. */
static inline __m512i dot2_q8(__m512i aw, __mmask64 neg, __m512i x)
{
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_dpbusd_epi32(zero, aw, _mm512_mask_sub_epi8(x, neg, zero, x));
}

/* A q8_0 row's end after its loop over groups of eight blocks (b the first
 * block left, acc and acc1 its two accumulators): the pairs and the single
 * block left, then the row's total. */
static inline float q8_0_finish(const int8_t *w, const uint16_t *dw, int b, int nb, const mi_act *a, __m512 acc,
                                __m512 acc1)
{
    acc = _mm512_add_ps(acc, acc1);
    for (; b + 2 <= nb; b += 2) {
        int e = b * MI_QK;
        __m512i wv = _mm512_loadu_si512(w + e);
        __m512i dot = dot2_q8(_mm512_abs_epi8(wv), _mm512_movepi8_mask(wv), _mm512_loadu_si512(a->q + e));
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
        x0 = _mm256_mask_sub_epi8(x0, _mm256_movepi8_mask(wv), _mm256_setzero_si256(), x0);
        __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wv), x0);
        v += hsum256(_mm256_cvtepi32_ps(dot)) * (mi_f32_from_fp16(dw[b]) * a->d[b]);
    }
    return v;
}

/* A q4_0 row's end after its loop over groups of eight blocks: a group of
 * four left, the total, then up to three blocks in natural order. */
static inline float q4_0_finish(const uint8_t *w, const uint16_t *dw, int b, int nb, const mi_act *a, __m512 acc,
                                __m256 corr)
{
    const __m128i lowmask = _mm_set1_epi8(0x0f);
    float v_corr = 0.0f;
    if (b < (nb & ~3)) { /* one group of four left */
        __m128 dw4 = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(dw + b)));
        __m512 s16 = _mm512_castps128_ps512(_mm_mul_ps(dw4, _mm_loadu_ps(a->d + b)));
        __m128 c4 = _mm_mul_ps(dw4, _mm_loadu_ps(a->s + b));
        c4 = _mm_add_ps(c4, _mm_movehl_ps(c4, c4));
        v_corr = _mm_cvtss_f32(_mm_add_ss(c4, _mm_movehdup_ps(c4)));
        __m512i dot = dot4_q4(w + b * (MI_QK / 2), a->q + b * MI_QK);
        const __m512i idx0 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx0, s16), acc);
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
    return v;
}

/* ------------------------------------------------------------ k-quants */

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

/* A q4_K/q5_K super-block's weights, decoded: sd lanes 0-7 d * sc_j, lanes
 * 8-15 dmin * m_j; the levels of sub-blocks 0 and 2 (l0), 1 and 3 (h0), 4
 * and 6 (l1), 5 and 7 (h1), q4_K's high nibbles 16 times over. */
typedef struct {
    __m512 sd;
    __m512i l0, h0, l1, h1;
} q45_w;

static inline __attribute__((always_inline)) void q45_decode(const uint8_t *blk, q45_w *w, const int five)
{
    const __m512i low = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
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
    w->sd = _mm512_mul_ps(scm, dd);
    const uint8_t *qs = blk + (five ? 48 : 16);
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
    w->l0 = l0;
    w->h0 = h0;
    w->l1 = l1;
    w->h1 = h1;
}

/* Super-block k of a decoded q4_K/q5_K row applied to activations a:
 * acc[0], acc[1] the products' accumulators, acc[2] the mins' term. */
static inline __attribute__((always_inline)) void q45_apply(const q45_w *w, int k, const mi_act *a, __m512 *acc)
{
    const __m512i zero = _mm512_setzero_si512();
    /* lanes 0-7 take sub-block j's factor, 8-15 sub-block j+2's */
    const __m512i idx[4] = {
        _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1),
        _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4),
        _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 5, 5, 5, 5, 5, 5, 5, 5),
    };
    __m512d xs = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a->d + 8 * k))),
                                    _mm256_castps_pd(_mm256_loadu_ps(a->s + 8 * k)), 1);
    __m512 f = _mm512_mul_ps(w->sd, _mm512_castpd_ps(xs));
    acc[2] = _mm512_mask_add_ps(acc[2], (__mmask16)0xff00, acc[2], f);
    const int8_t *xq = a->q + (size_t)k * MI_QK_K;
    __m512i d0 = _mm512_dpbusd_epi32(zero, w->l0, _mm512_loadu_si512(xq));
    __m512i d1 = _mm512_dpbusd_epi32(zero, w->h0, _mm512_loadu_si512(xq + 64));
    __m512i d2 = _mm512_dpbusd_epi32(zero, w->l1, _mm512_loadu_si512(xq + 128));
    __m512i d3 = _mm512_dpbusd_epi32(zero, w->h1, _mm512_loadu_si512(xq + 192));
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

/* q6_K: a half super-block's 64 low-nibble bytes and 32 high-bit bytes give
 * its 128 levels (0..63) as two 64-byte vectors in element order: low
 * nibbles with qh's bits 0-1 (bytes 0-31) and 2-3 (32-63), high nibbles with
 * bits 4-5 and 6-7; a per-half variable shift moves each pair to bits 4-5.
 * vpdpbusd takes them unsigned and the offset of 32 comes off as a second
 * vpdpbusd of 32s with the activations (exact in int32). Each product's lanes
 * are four sub-blocks of 16; lane j of the super-block's factor vector is
 * d * sc_j * dx of block j/2. */
typedef struct {
    __m512 sc;    /* the sixteen sub-block scales */
    float d;
    __m512i q[4]; /* the levels: half h's two vectors are q[2h], q[2h + 1] */
} q6_w;

static inline __attribute__((always_inline)) void q6_decode(const uint8_t *blk, q6_w *w)
{
    const __m512i low = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i sh_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sh_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    /* (A & C) | B, as vpternlogd's truth table of A = 0xf0, B = 0xcc, C = 0xaa */
    enum { A_AND_C_OR_B = (0xf0 & 0xaa) | 0xcc };
    uint16_t dh;
    memcpy(&dh, blk + 208, 2);
    w->d = _cvtsh_ss(dh);
    w->sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192))));
    for (int h = 0; h < 2; h++) {
        __m512i L = _mm512_loadu_si512(blk + 64 * h);
        __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
        w->q[2 * h] =
            _mm512_ternarylogic_epi32(L, _mm512_and_si512(_mm512_sllv_epi16(H, sh_lo), m30), low, A_AND_C_OR_B);
        w->q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(L, 4),
                                                    _mm512_and_si512(_mm512_srlv_epi16(H, sh_hi), m30), low,
                                                    A_AND_C_OR_B);
    }
}

static inline __attribute__((always_inline)) void q6_apply(const q6_w *w, int k, const mi_act *a, __m512 *acc)
{
    const __m512i zero = _mm512_setzero_si512(), k32 = _mm512_set1_epi8(32);
    /* lane j takes block j/2's dx */
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    /* lanes 4i..4i+3 of product p take sub-block 4p + i's factor */
    const __m512i idx[4] = {
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
        _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4),
        _mm512_set_epi32(11, 11, 11, 11, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 8, 8),
        _mm512_set_epi32(15, 15, 15, 15, 14, 14, 14, 14, 13, 13, 13, 13, 12, 12, 12, 12),
    };
    __m256 dxd = _mm256_mul_ps(_mm256_loadu_ps(a->d + 8 * k), _mm256_set1_ps(w->d));
    __m512 f = _mm512_mul_ps(w->sc, _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(dxd)));
    const int8_t *xq = a->q + (size_t)k * MI_QK_K;
    for (int h = 0; h < 2; h++) {
        __m512i x0 = _mm512_loadu_si512(xq + 128 * h), x1 = _mm512_loadu_si512(xq + 128 * h + 64);
        __m512i d0 = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, w->q[2 * h], x0), _mm512_dpbusd_epi32(zero, k32, x0));
        __m512i d1 =
            _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, w->q[2 * h + 1], x1), _mm512_dpbusd_epi32(zero, k32, x1));
        acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(idx[2 * h], f), acc[0]);
        acc[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(idx[2 * h + 1], f), acc[1]);
    }
}

/* the tile kernels (x86_avx512_tile.c) */
void mi_avx512_tile_f32(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx512_tile_f16(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx512_tile_q8_0(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx512_tile_q4_0(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx512_tile_q4_K(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx512_tile_q5_K(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx512_tile_q6_K(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);

#endif
