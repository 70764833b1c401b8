/* The AVX2 family's inline pieces that its row kernels (x86_avx2.c) and its
 * tile kernels (x86_avx2_tile.c) share, as x86_avx512.h does for AVX-512: a
 * weight block's decoding and its application to one activation row are one
 * piece of code in both, so every row's operations are the row kernel's
 * (family.h). Internal: only for files compiled with the family's flags. */
#ifndef MESHINFER_X86_AVX2_H
#define MESHINFER_X86_AVX2_H

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

static inline int hsum256_epi32(__m256i v)
{
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
    return _mm_cvtsi128_si32(h);
}

static inline float f16(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* lanes [0, k) set, for vmaskmov: masked-off lanes are not read, so a row's
 * last few elements never touch the bytes after it */
static inline __m256i lane_mask(int k)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256 load_f16x8(const uint16_t *h)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* q8_0: one block's int32 sums (8 lanes, each the dot of 4 elements) of the
 * weights w (32 bytes in a register) against the activations at q:
 * vpmaddubsw multiplies unsigned by signed bytes, so the activations go in as
 * |q| and their signs move onto the weights (vpsignb); with |w|, |q| <= 127 a
 * pair sum is at most 32258 and never saturates. (A weight of -128, which no
 * quantizer writes, would come out as +128 times |q|.) The other way round,
 * |w| with the signs on the activations (exact for -128 too, and |w| made
 * once for a tile kernel's rows), decoded from memory 1.3-1.4x slower. */
static inline __m256i dot_q8_w(__m256i w, const int8_t *q, __m256i ones)
{
    __m256i qv = _mm256_loadu_si256((const __m256i *)q);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(qv), _mm256_sign_epi8(w, qv)), ones);
}

static inline __m256i dot_q8(const int8_t *w, const int8_t *q, __m256i ones)
{
    return dot_q8_w(_mm256_loadu_si256((const __m256i *)w), q, ones);
}

/* q4_0: the low and high nibbles of 32 bytes of weights (a pair of blocks) */
static inline void q4_nibbles(const uint8_t *w, __m256i lowmask, __m256i *lo, __m256i *hi)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)w);
    *lo = _mm256_and_si256(v, lowmask);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lowmask);
}

/* int32 sums of a pair of blocks (lanes 0-3 the first, 4-7 the second) from
 * their nibbles; two nibble products (at most 2 * 2 * 15 * 127) add in 16
 * bits safely */
static inline __m256i dot2_q4_lohi(__m256i lo, __m256i hi, const int8_t *xg, __m256i ones)
{
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xg)),
                                 _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xg + 32))));
    return _mm256_madd_epi16(p, ones);
}

static inline __m256i dot2_q4(const uint8_t *w, const int8_t *xg, __m256i lowmask, __m256i ones)
{
    __m256i lo, hi;
    q4_nibbles(w, lowmask, &lo, &hi);
    return dot2_q4_lohi(lo, hi, xg, ones);
}

/* A q8_0 row's end after its loop over groups of eight blocks (b the first
 * block left): the blocks left one at a time, then the row's total. */
static inline float q8_0_finish(const int8_t *w, const uint16_t *dw, int b, int nb, const mi_act *a, __m256 *acc)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (; b < nb; b++) {
        int e = b * MI_QK;
        __m256i dot = dot_q8(w + e, a->q + e, ones);
        acc[b & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(f16(dw[b]) * a->d[b]), acc[b & 3]);
    }
    return hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

/* A q4_0 row's end after its loop over groups of eight blocks: pairs, a last
 * odd block, then the row's total with its offset terms. */
static inline float q4_0_finish(const uint8_t *w, const uint16_t *dw, int b, int nb, const mi_act *a, __m256 acc0,
                                __m256 acc1, __m256 acc2, __m256 acc3, __m256 corr)
{
    const __m256i lowmask = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const int nb2 = nb & ~1;
    float v_corr = 0.0f;
    for (; b < nb2; b += 2) { /* up to three pairs left */
        float dw0 = f16(dw[b]), dw1 = f16(dw[b + 1]);
        __m256 sc = _mm256_setr_m128(_mm_set1_ps(dw0 * a->d[b]), _mm_set1_ps(dw1 * a->d[b + 1]));
        v_corr += dw0 * a->s[b];
        v_corr += dw1 * a->s[b + 1];
        __m256i dot = dot2_q4(w + b * (MI_QK / 2), a->q + b * MI_QK, lowmask, ones);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), sc, acc0);
    }
    if (b < nb) { /* a last odd block, activations in natural order */
        __m128i q = _mm_loadu_si128((const __m128i *)(w + b * (MI_QK / 2)));
        __m256i wv = _mm256_and_si256(_mm256_setr_m128i(q, _mm_srli_epi16(q, 4)), lowmask);
        __m256i dot = _mm256_madd_epi16(
            _mm256_maddubs_epi16(wv, _mm256_loadu_si256((const __m256i *)(a->q + b * MI_QK))), ones);
        float dw0 = f16(dw[b]);
        v_corr += dw0 * a->s[b];
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw0 * a->d[b]), acc1);
    }
    float v = hsum256(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    v += hsum256(corr) + v_corr;
    return v;
}

/* ------------------------------------------------------------ k-quants */

/* q5_K's fifth bit of sub-block j (bit j of each qh byte) moved to bit 4 */
static inline __m256i fifth_bit(__m256i qh, int j)
{
    const __m256i b4 = _mm256_set1_epi8(0x10);
    switch (j) {
    case 0: return _mm256_and_si256(_mm256_slli_epi16(qh, 4), b4);
    case 1: return _mm256_and_si256(_mm256_slli_epi16(qh, 3), b4);
    case 2: return _mm256_and_si256(_mm256_slli_epi16(qh, 2), b4);
    case 3: return _mm256_and_si256(_mm256_slli_epi16(qh, 1), b4);
    case 4: return _mm256_and_si256(qh, b4);
    case 5: return _mm256_and_si256(_mm256_srli_epi16(qh, 1), b4);
    case 6: return _mm256_and_si256(_mm256_srli_epi16(qh, 2), b4);
    default: return _mm256_and_si256(_mm256_srli_epi16(qh, 3), b4);
    }
}

/* q4_K and q5_K (five: the fifth bits from qh). Per super-block eight float
 * factors d * sc_j * dx_j, one per sub-block (= activation block), and the
 * mins' term dmin * m_j * s_j summed apart and subtracted at the end. The
 * levels (0..15 or 0..31) are unsigned and feed vpmaddubsw directly: a pair
 * of products is at most 2 * 31 * 127, no saturation. One super-block's
 * share of a row: acc[0] and acc[1] the even and odd sub-blocks' products,
 * acc[2] the mins' term. */
typedef struct {
    __m256 sd, md;        /* d * sc_j and dmin * m_j */
    __m256i lo[4], hi[4]; /* group g's sub-blocks 2g and 2g+1 */
} q45_w;

static inline __attribute__((always_inline)) void q45_decode(const uint8_t *blk, q45_w *w, const int five)
{
    const __m256i low = _mm256_set1_epi8(0x0f);
    uint64_t sc, m;
    mi_kq_scales_mins(blk + 4, &sc, &m);
    uint32_t dbits;
    memcpy(&dbits, blk, 4);
    __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dbits));
    __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
    __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m)));
    w->sd = _mm256_mul_ps(scf, _mm256_broadcastss_ps(dd));
    w->md = _mm256_mul_ps(mf, _mm256_broadcastss_ps(_mm_movehdup_ps(dd)));
    const uint8_t *qs = blk + (five ? 48 : 16);
    __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    for (int g = 0; g < 4; g++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
        __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        if (five) {
            lo = _mm256_or_si256(lo, fifth_bit(qh, 2 * g));
            hi = _mm256_or_si256(hi, fifth_bit(qh, 2 * g + 1));
        }
        w->lo[g] = lo;
        w->hi[g] = hi;
    }
}

/* Super-block k of a decoded q4_K/q5_K row applied to activations a:
 * acc[0] and acc[1] the even and odd sub-blocks' products, acc[2] the mins' term. */
static inline __attribute__((always_inline)) void q45_apply(const q45_w *w, int k, const mi_act *a, __m256 *acc)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 f = _mm256_mul_ps(w->sd, _mm256_loadu_ps(a->d + 8 * k));
    acc[2] = _mm256_fmadd_ps(w->md, _mm256_loadu_ps(a->s + 8 * k), acc[2]);
    const int8_t *xq = a->q + (size_t)k * MI_QK_K;
    for (int g = 0; g < 4; g++) {
        __m256i p0 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(w->lo[g], _mm256_loadu_si256((const __m256i *)(xq + 64 * g))), ones);
        __m256i p1 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(w->hi[g], _mm256_loadu_si256((const __m256i *)(xq + 64 * g + 32))), ones);
        acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(2 * g)),
                                 acc[0]);
        acc[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(2 * g + 1)),
                                 acc[1]);
    }
}

/* q6_K: a half super-block's 64 low-nibble bytes L0, L1 and 32 high-bit
 * bytes H give its 128 levels (0..63) as four 32-byte vectors in element
 * order (L0's low nibbles with H's bits 0-1, L1's with 2-3, L0's high
 * nibbles with 4-5, L1's with 6-7), each one activation block. vpmaddubsw
 * takes them unsigned and the offset of 32 comes off in 16 bits (a pair of
 * (q - 32) x is at most 2 * 32 * 127). A block's eight int32 lanes are its
 * two sub-blocks of 16, four each; lane j of the factor vectors is
 * d * sc_j * dx of block j/2. */
typedef struct {
    __m256 sc[2];  /* the scales of sub-blocks 0-7 (blocks 0-3) and 8-15 (blocks 4-7) */
    float d;
    __m256i q[8];  /* half h's four level vectors are q[4h..4h+3] */
} q6_w;

static inline __attribute__((always_inline)) void q6_decode(const uint8_t *blk, q6_w *w)
{
    const __m256i low = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    uint16_t dh;
    memcpy(&dh, blk + 208, 2);
    w->d = f16(dh);
    __m128i scb = _mm_loadu_si128((const __m128i *)(blk + 192));
    w->sc[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(scb));
    w->sc[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(scb, scb)));
    for (int h = 0; h < 2; h++) {
        __m256i L0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
        __m256i L1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
        __m256i H = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        w->q[4 * h] = _mm256_or_si256(_mm256_and_si256(L0, low), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
        w->q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(L1, low), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
        w->q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), low), _mm256_and_si256(H, m30));
        w->q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), low),
                                          _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
    }
}

static inline __attribute__((always_inline)) void q6_apply(const q6_w *w, int k, const mi_act *a, __m256 *acc)
{
    const __m256i k32 = _mm256_set1_epi8(32), ones = _mm256_set1_epi16(1);
    __m256 dxd = _mm256_mul_ps(_mm256_loadu_ps(a->d + 8 * k), _mm256_set1_ps(w->d));
    __m256 fs[2] = {
        _mm256_mul_ps(w->sc[0], _mm256_permutevar8x32_ps(dxd, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))),
        _mm256_mul_ps(w->sc[1], _mm256_permutevar8x32_ps(dxd, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7))),
    };
    const int8_t *xq = a->q + (size_t)k * MI_QK_K;
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + 128 * h + 32 * i));
            __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(w->q[4 * h + i], xv), _mm256_maddubs_epi16(k32, xv));
            __m256i idx = _mm256_setr_epi32(2 * i, 2 * i, 2 * i, 2 * i, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1);
            acc[i & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)),
                                         _mm256_permutevar8x32_ps(fs[h], idx), acc[i & 1]);
        }
}

/* a k-quant row's result from its accumulators */
static inline float kq_total(const __m256 *acc)
{
    return hsum256(_mm256_add_ps(acc[0], acc[1])) - hsum256(acc[2]);
}

/* the tile kernels (x86_avx2_tile.c) */
void mi_avx2_tile_f32(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx2_tile_f16(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx2_tile_q8_0(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx2_tile_q4_0(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx2_tile_q4_K(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx2_tile_q5_K(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);
void mi_avx2_tile_q6_K(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add);

#endif
