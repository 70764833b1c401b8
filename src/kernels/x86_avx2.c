/* x86-64 AVX2 family (with FMA and F16C): Intel Haswell and later, AMD Zen
 * and later. Compiled with those flags for this file only and chosen at run
 * time (see family.h).
 *
 * fp32/fp16: one row at a time with four accumulators (four-cycle FMA
 * latency, two FMA pipes). Reading several rows at once, or a row in column
 * chunks, was measured much slower: the decode loop is bound by streaming the
 * weights, and one forward stream keeps the hardware prefetchers effective.
 *
 * q8_0: vpmaddubsw multiplies unsigned by signed bytes, so the activations go
 * in as |q| and their signs move onto the weights with vpsignb; with |w|,
 * |q| <= 127 a pair sum is at most 32258 and never saturates. vpmaddwd with
 * ones widens to int32, and each block's sums take their scale dw * dx in one
 * FMA. |q| is recomputed from q rather than stored: one more ALU operation
 * per block, but half the activation bytes in L1, which the weight stream
 * would otherwise evict on rows of a few thousand columns.
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
 * factor per sub-block (d * sc * dx) applied per lane; see the section
 * below. */
#include <cpuid.h>
#include <float.h>
#include <math.h>
#include <immintrin.h>
#include <string.h>

#include "family.h"

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

/* ------------------------------------------------------------ fp32, fp16 */

static void rows_f32(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, n32 = n & ~31, n8 = n & ~7;
    const __m256i tail = lane_mask(n - n8);
    const float *x = a->x;
    for (int r = r0; r < r1; r++) {
        const float *w = (const float *)W->q + (size_t)r * n;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int j = 0; j < n32; j += 32) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 16), _mm256_loadu_ps(x + j + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 24), _mm256_loadu_ps(x + j + 24), a3);
        }
        for (int j = n32; j < n8; j += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
        if (n8 < n)
            a1 = _mm256_fmadd_ps(_mm256_maskload_ps(w + n8, tail), _mm256_maskload_ps(x + n8, tail), a1);
        float v = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

static inline __m256 load_f16x8(const uint16_t *h)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

static void rows_f16(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, n32 = n & ~31, n8 = n & ~7;
    const __m256i tail = lane_mask(n - n8);
    const float *x = a->x;
    for (int r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)W->q + (size_t)r * n;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int j = 0; j < n32; j += 32) {
            a0 = _mm256_fmadd_ps(load_f16x8(w + j), _mm256_loadu_ps(x + j), a0);
            a1 = _mm256_fmadd_ps(load_f16x8(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
            a2 = _mm256_fmadd_ps(load_f16x8(w + j + 16), _mm256_loadu_ps(x + j + 16), a2);
            a3 = _mm256_fmadd_ps(load_f16x8(w + j + 24), _mm256_loadu_ps(x + j + 24), a3);
        }
        for (int j = n32; j < n8; j += 8)
            a0 = _mm256_fmadd_ps(load_f16x8(w + j), _mm256_loadu_ps(x + j), a0);
        if (n8 < n) {
            /* AVX2 has no 16-bit masked load: copy the last halves into a
             * zeroed buffer (zeros times masked-off x add nothing) */
            uint16_t h[8] = {0};
            memcpy(h, w + n8, (size_t)(n - n8) * sizeof *h);
            a1 = _mm256_fmadd_ps(load_f16x8(h), _mm256_maskload_ps(x + n8, tail), a1);
        }
        float v = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        y[r - r0] = add ? y[r - r0] + v : v;
    }
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

/* int32 sums of one block: 8 lanes, each the dot of 4 elements */
static inline __m256i dot_q8(const int8_t *w, const int8_t *q, __m256i ones)
{
    __m256i qv = _mm256_loadu_si256((const __m256i *)q);
    __m256i sw = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)w), qv);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(qv), sw), ones);
}

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
        for (; b < nb; b++) {
            int e = b * MI_QK;
            __m256i dot = dot_q8(w + e, a->q + e, ones);
            acc[b & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(f16(dw[b]) * a->d[b]), acc[b & 3]);
        }
        float v = hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* ------------------------------------------------------------ q4_0 */

/* int32 sums of a pair of blocks (lanes 0-3 the first, 4-7 the second);
 * two nibble products (at most 2 * 2 * 15 * 127) add in 16 bits safely */
static inline __m256i dot2_q4(const uint8_t *w, const int8_t *xg, __m256i lowmask, __m256i ones)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)w);
    __m256i lo = _mm256_and_si256(v, lowmask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lowmask);
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xg)),
                                 _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xg + 32))));
    return _mm256_madd_epi16(p, ones);
}

static void rows_q4_0(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    const int n = W->cols, nb = n / MI_QK, nb2 = nb & ~1;
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
static inline __attribute__((always_inline)) void q45_step(const uint8_t *blk, int k, const mi_act *a, __m256 *acc,
                                                           const int five)
{
    const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    uint64_t sc, m;
    mi_kq_scales_mins(blk + 4, &sc, &m);
    uint32_t dbits;
    memcpy(&dbits, blk, 4);
    __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dbits));
    __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
    __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m)));
    __m256 f = _mm256_mul_ps(_mm256_mul_ps(scf, _mm256_broadcastss_ps(dd)), _mm256_loadu_ps(a->d + 8 * k));
    acc[2] = _mm256_fmadd_ps(_mm256_mul_ps(mf, _mm256_broadcastss_ps(_mm_movehdup_ps(dd))),
                             _mm256_loadu_ps(a->s + 8 * k), acc[2]);
    const uint8_t *qs = blk + (five ? 48 : 16);
    const int8_t *xq = a->q + (size_t)k * MI_QK_K;
    __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    for (int g = 0; g < 4; g++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
        __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        if (five) {
            lo = _mm256_or_si256(lo, fifth_bit(qh, 2 * g));
            hi = _mm256_or_si256(hi, fifth_bit(qh, 2 * g + 1));
        }
        __m256i p0 =
            _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(xq + 64 * g))), ones);
        __m256i p1 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 64 * g + 32))), ones);
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
static inline __attribute__((always_inline)) void q6_step(const uint8_t *blk, int k, const mi_act *a, __m256 *acc)
{
    const __m256i low = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    const __m256i ones = _mm256_set1_epi16(1);
    uint16_t dh;
    memcpy(&dh, blk + 208, 2);
    __m256 dxd = _mm256_mul_ps(_mm256_loadu_ps(a->d + 8 * k), _mm256_set1_ps(f16(dh)));
    __m128i scb = _mm_loadu_si128((const __m128i *)(blk + 192));
    /* sub-blocks 0-7 (blocks 0-3) and 8-15 (blocks 4-7) */
    __m256 fs[2] = {
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(scb)),
                      _mm256_permutevar8x32_ps(dxd, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))),
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(scb, scb))),
                      _mm256_permutevar8x32_ps(dxd, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7))),
    };
    const int8_t *xq = a->q + (size_t)k * MI_QK_K;
    for (int h = 0; h < 2; h++) {
        __m256i L0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
        __m256i L1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
        __m256i H = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(L0, low), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(L1, low), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), low), _mm256_and_si256(H, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), low),
                            _mm256_and_si256(_mm256_srli_epi16(H, 2), m30)),
        };
        for (int i = 0; i < 4; i++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + 128 * h + 32 * i));
            __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[i], xv), _mm256_maddubs_epi16(k32, xv));
            __m256i idx = _mm256_setr_epi32(2 * i, 2 * i, 2 * i, 2 * i, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1);
            acc[i & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)),
                                         _mm256_permutevar8x32_ps(fs[h], idx), acc[i & 1]);
        }
    }
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
        v[i] = hsum256(_mm256_add_ps(acc[i][0], acc[i][1])) - hsum256(acc[i][2]);
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
};
