/* AMX (Advanced Matrix Extensions: Intel Sapphire Rapids and later) inside
 * the AVX-512 family's q4_0 tile kernel. A q4_0 row's float operations
 * (x86_avx512.h) start from each block's exact int32 sum, so any way of
 * making the sums gives the row kernel's bits: here one TDPBSUD multiplies
 * a block of up to 16 activation rows (A: 16 x 32 signed bytes, in natural
 * order) by the same block of 16 weight rows (B: the nibbles, 8 x 64
 * unsigned bytes in AMX's layout of 32-bit groups) into 16 x 16 sums, 8192
 * products per instruction against vpdpbusd's 64.
 *
 * Per group of 16 weight rows, every block's B tile is made once (the
 * 16-byte rows of nibbles transposed by 32-bit words, as q4_16_decode does)
 * together with the rows' scales transposed (one vector of 16 rows' dw per
 * block); then per group of up to 16 activation rows, per block: A and B
 * loaded, the sums computed and stored, and for each activation row t the
 * float step of q4_16_step on the 16 weight rows at once (lanes = weight
 * rows): acc[t][l] = fma(fma(S, dx, s), dw, acc[t][l]), l the block's lane
 * in its group (pi). The accumulators live in L1 (16 rows x 16 lanes x 16
 * weight rows), and are summed at the end across l in red16's order, lane by
 * lane. Blocks after the last whole group, and weight rows after the last
 * group of 16, go the row kernel's way (q4_0_block; the caller's VNNI tile).
 *
 * The kernel asks Linux for the tile state once (arch_prctl; Linux 5.16 and
 * later); each call loads its tile configuration and releases the tiles
 * when done, as every thread must.
 *
 * Where it stands: about 1.1x the VNNI tile kernel at 64 activation rows,
 * slower below 48 (x86_avx512_tile.c's AMX_MIN_ROWS), far from what TDPBSUD
 * could give. What costs: per block the 1 KB of sums stored and read back,
 * and the activations streamed from L2 again for every group of 16 weight
 * rows (each call has one); making several weight groups share an L1-resident
 * group of activation blocks, as the VNNI kernel's chunks do, is the next
 * step. */
#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "x86_avx512.h"

static int g_probe; /* 0 not yet asked, 1 usable, -1 not */
static int g_on = 1;

/* AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), and the
 * kernel's permission to use the tile data state. */
static int probe(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        return -1;
#if defined(__linux__) && defined(SYS_arch_prctl)
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0)
        return -1;
    const char *env = getenv("MESHINFER_AMX");
    if (env && !strcmp(env, "0"))
        g_on = 0;
    return 1;
#else
    return -1;
#endif
}

int mi_avx512_amx(int set)
{
    if (!g_probe)
        g_probe = probe();
    int was = g_probe > 0 && g_on;
    if (set >= 0)
        g_on = set;
    return was;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* tiles 0-2: A, B, C of even blocks; 3-5 of odd ones; M activation rows */
static void configure(int M)
{
    tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int k = 0; k < 2; k++) {
        c.rows[3 * k] = (uint8_t)M, c.colsb[3 * k] = 32;     /* A: M rows of one block's 32 bytes */
        c.rows[3 * k + 1] = 8, c.colsb[3 * k + 1] = 64;     /* B: 8 x (16 weight rows x 4 bytes) */
        c.rows[3 * k + 2] = (uint8_t)M, c.colsb[3 * k + 2] = 64; /* C: M x 16 int32 */
    }
    _tile_loadconfig(&c);
}

/* Block b of the 16 weight rows from w (rb bytes a row) as a B tile at out:
 * row j, bytes 4m..4m+3: row m's elements 4j..4j+3. Z[q] lane r holds row
 * q + 4r, so the transpose leaves the rows in natural order. */
static inline void make_b(const uint8_t *w, size_t rb, int b, uint8_t *out)
{
    const __m512i low = _mm512_set1_epi8(0x0f);
    __m512i z[4];
    for (int q = 0; q < 4; q++) {
        const uint8_t *p = w + (size_t)q * rb + (size_t)b * (MI_QK / 2);
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 4 * rb)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 8 * rb)), 2);
        z[q] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 12 * rb)), 3);
    }
    __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                    _mm512_unpackhi_epi64(t1, t3)};
    for (int j = 0; j < 4; j++) {
        _mm512_store_si512(out + 64 * j, _mm512_and_si512(u[j], low));
        _mm512_store_si512(out + 64 * (j + 4), _mm512_and_si512(_mm512_srli_epi16(u[j], 4), low));
    }
}

/* red16 of lane m across the sixteen vectors L[0..15], for every m at once */
static inline __m512 red16_across(const __m512 *L)
{
    __m512 t3[8], t6[4];
    for (int i = 0; i < 8; i++)
        t3[i] = _mm512_add_ps(L[8 + i], L[i]);
    for (int i = 0; i < 4; i++)
        t6[i] = _mm512_add_ps(t3[4 + i], t3[i]);
    return _mm512_add_ps(_mm512_add_ps(t6[0], t6[2]), _mm512_add_ps(t6[1], t6[3]));
}

/* Group g's sixteen blocks of sums (C[j]: M rows of 16 int32, block 16g + j)
 * into activation row t's accumulators acc[l] (lanes = weight rows), block
 * j to lane pi(j): the step of q4_16_step. */
static inline __attribute__((always_inline)) void group_step(const int32_t *C, int t, const float *d, const float *s,
                                                             const float *dwt, __m512 *acc)
{
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(C + 256 * j + 16 * t));
        __m512 in = _mm512_fmadd_ps(c, _mm512_set1_ps(d[j]), _mm512_set1_ps(s[j]));
        acc[mi_q4_pi(j)] = _mm512_fmadd_ps(in, _mm512_load_ps(dwt + 16 * j), acc[mi_q4_pi(j)]);
    }
}

int mi_amx_tile_q4_0(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add)
{
    const int cols = W->cols, nb = cols / MI_QK, nbf = nb & ~15;
    const int rows = (r1 - r0) & ~15;
    if (!mi_avx512_amx(-1) || nbf == 0 || rows == 0 || !a[0].qn)
        return 0;
    /* the activation rows' natural copies equally spaced: one tile load each */
    const ptrdiff_t st = nt > 1 ? a[1].qn - a[0].qn : 64;
    for (int t = 0; t < nt; t++)
        if (!a[t].qn || a[t].qn != a[0].qn + st * t)
            return 0;
    if (st <= 0 || st % 4 != 0)
        return 0;
    const size_t rb = (size_t)cols / 2;
    uint8_t *bt = NULL;
    float *dwt = NULL;
    __m512 *acc = NULL;
    int32_t *cb = NULL;
    if (posix_memalign((void **)&bt, 64, (size_t)nbf * 512) || posix_memalign((void **)&dwt, 64, (size_t)nbf * 64) ||
        posix_memalign((void **)&acc, 64, 256 * sizeof(__m512)) || posix_memalign((void **)&cb, 64, 16 * 1024)) {
        free(bt);
        free(dwt);
        free(acc);
        free(cb);
        return 0;
    }
    int Mcfg = 0;
    for (int m0 = r0; m0 < r0 + rows; m0 += 16) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)m0 * rb;
        const uint16_t *dw = W->d + (size_t)m0 * nb;
        for (int b = 0; b < nbf; b++)
            make_b(w, rb, b, bt + (size_t)b * 512);
        for (int m = 0; m < 16; m++)
            for (int b = 0; b < nbf; b += 16) {
                float f[16];
                _mm512_storeu_ps(f, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dw + (size_t)m * nb + b))));
                for (int j = 0; j < 16; j++)
                    dwt[(size_t)(b + j) * 16 + m] = f[j];
            }
        for (int t0 = 0; t0 < nt; t0 += 16) {
            const int M = nt - t0 < 16 ? nt - t0 : 16;
            if (M != Mcfg) {
                configure(M);
                Mcfg = M;
            }
            const int8_t *x = a[t0].qn;
            for (int g = 0; g < nbf; g += 16) {
                /* the group's sixteen blocks of sums, two tiles in flight */
                for (int j = 0; j < 16; j += 2) {
                    const int b = g + j;
                    _tile_loadd(0, x + (size_t)b * MI_QK, st);
                    _tile_loadd(1, bt + (size_t)b * 512, 64);
                    _tile_zero(2);
                    _tile_dpbsud(2, 0, 1);
                    _tile_loadd(3, x + (size_t)(b + 1) * MI_QK, st);
                    _tile_loadd(4, bt + (size_t)(b + 1) * 512, 64);
                    _tile_zero(5);
                    _tile_dpbsud(5, 3, 4);
                    _tile_stored(2, cb + 256 * j, 64);
                    _tile_stored(5, cb + 256 * (j + 1), 64);
                }
                /* each activation row's accumulators in registers for the group */
                for (int t = 0; t < M; t++) {
                    const mi_act *at = &a[t0 + t];
                    __m512 acc16[16];
                    for (int l = 0; l < 16; l++)
                        acc16[l] = g ? acc[16 * t + l] : _mm512_setzero_ps();
                    group_step(cb, t, at->d + g, at->s + g, dwt + (size_t)g * 16, acc16);
                    if (g + 16 < nbf) {
                        for (int l = 0; l < 16; l++)
                            acc[16 * t + l] = acc16[l];
                        continue;
                    }
                    float v[16];
                    _mm512_storeu_ps(v, red16_across(acc16));
                    float *yt = y + (size_t)(t0 + t) * ldy + (m0 - r0);
                    for (int m = 0; m < 16; m++) {
                        float vm = v[m];
                        for (int b = nbf; b < nb; b++) /* the blocks after the last whole group */
                            vm = q4_0_block(w + (size_t)m * rb + (size_t)b * (MI_QK / 2), dw[(size_t)m * nb + b],
                                            at->q + b * MI_QK, at->d[b], at->s[b], vm);
                        yt[m] = add ? yt[m] + vm : vm;
                    }
                }
            }
        }
    }
    _tile_release();
    free(bt);
    free(dwt);
    free(acc);
    free(cb);
    return rows;
}
