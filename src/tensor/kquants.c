/* The k-quants' super-blocks (see tensor.h): unpacking, decoding and
 * encoding. The byte layouts are ggml's, so GGUF files' blocks are used as
 * they are. */
#include "kquants.h"

#include <math.h>
#include <string.h>

/* bytes of one super-block (as mi_dtype_q_row_bytes(t, 256), kept here so
 * the encoders stand alone below tensor.c) */
static size_t block_bytes(int t)
{
    return t == MI_Q4_K ? 144 : t == MI_Q5_K ? 176 : 210;
}

static float half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return mi_f32_from_fp16(h);
}

static void put_half(uint8_t *p, uint16_t h)
{
    memcpy(p, &h, 2);
}

/* q4_K/q5_K's 12 bytes of eight 6-bit scales and mins: the first four of
 * each in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); the last four
 * in the nibbles of bytes 8-11 with their top 2 bits in the spare high bits
 * of bytes 0-3 (scales) and 4-7 (mins). */
static void unpack_scales(const uint8_t *s, int *sc, int *m)
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void pack_scales(const int *sc, const int *m, uint8_t *s)
{
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
    }
}

int mi_kquant_unpack(int t, const void *block, int8_t q[MI_QK_K], int sc[16], int m[16], float *d, float *dmin)
{
    const uint8_t *b = block;
    if (t == MI_Q6_K) {
        /* two halves of 128: byte l of a half's 64 low-nibble bytes holds
         * elements l (low) and l+64 (high), byte l+32 elements l+32 and l+96;
         * a high-bits byte holds the top 2 bits of l, l+32, l+64, l+96 */
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        for (int n = 0; n < 2; n++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lo0 = ql[n * 64 + l], lo1 = ql[n * 64 + l + 32], hi = qh[n * 32 + l];
                int8_t *e = q + n * 128 + l;
                e[0] = (int8_t)(((lo0 & 0x0f) | ((hi & 3) << 4)) - 32);
                e[32] = (int8_t)(((lo1 & 0x0f) | (((hi >> 2) & 3) << 4)) - 32);
                e[64] = (int8_t)(((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32);
                e[96] = (int8_t)(((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32);
            }
        for (int j = 0; j < 16; j++) {
            sc[j] = scales[j];
            m[j] = 0;
        }
        *d = half(b + 208);
        *dmin = 0.0f;
        return 16;
    }
    /* q4_K, q5_K: four groups of 64; byte l of a group's 32 holds element l
     * in its low nibble and l+32 in its high one; q5_K's bit 2g of qh[l] is
     * the fifth bit of group g's element l, bit 2g+1 that of element l+32 */
    const uint8_t *qs = b + (t == MI_Q5_K ? 48 : 16), *qh = t == MI_Q5_K ? b + 16 : NULL;
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            int lo = qs[g * 32 + l] & 0x0f, hi = qs[g * 32 + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * g)) & 1) << 4;
                hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
            }
            q[g * 64 + l] = (int8_t)lo;
            q[g * 64 + 32 + l] = (int8_t)hi;
        }
    unpack_scales(b + 4, sc, m);
    *d = half(b);
    *dmin = half(b + 2);
    return 8;
}

void mi_kquant_dequantize_row(int t, const void *q, int n, float *out)
{
    size_t bb = block_bytes(t);
    int8_t lv[MI_QK_K];
    int sc[16], m[16];
    float d, dmin;
    for (int b = 0; b < n / MI_QK_K; b++) {
        int ns = mi_kquant_unpack(t, (const uint8_t *)q + (size_t)b * bb, lv, sc, m, &d, &dmin);
        int len = MI_QK_K / ns;
        for (int i = 0; i < MI_QK_K; i++) {
            int s = i / len;
            out[b * MI_QK_K + i] = d * (float)sc[s] * (float)lv[i] - dmin * (float)m[s];
        }
    }
}

/* ------------------------------------------------------------- encoding */

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* q4_K / q5_K (nmax 15 / 31): each sub-block of 32 fitted as scale * q - min
 * over [min(x, 0), max(x)], then the scales and mins to 6 bits against the
 * super-block's d and dmin, then the values against the rounded scales. */
static void encode_q45(int t, const float *x, uint8_t *b)
{
    const int nmax = t == MI_Q5_K ? 31 : 15;
    float scale[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
    int bad = 0;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = 0.0f; /* x = scale*q - min with min >= 0: zero always representable */
        for (int i = 0; i < 32; i++) {
            float v = x[j * 32 + i];
            bad |= !isfinite(v);
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        scale[j] = (hi - lo) / (float)nmax;
        mins[j] = -lo;
        max_scale = scale[j] > max_scale ? scale[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    memset(b, 0, block_bytes(t));
    if (bad) {
        put_half(b, 0x7e00u);
        put_half(b + 2, 0x7e00u);
        return;
    }
    uint16_t d16 = mi_fp16_from_f32(max_scale / 63.0f), m16 = mi_fp16_from_f32(max_min / 63.0f);
    float d = mi_f32_from_fp16(d16), dmin = mi_f32_from_fp16(m16);
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = d > 0.0f ? clampi((int)lrintf(scale[j] / d), 0, 63) : 0;
        m[j] = dmin > 0.0f ? clampi((int)lrintf(mins[j] / dmin), 0, 63) : 0;
    }
    put_half(b, d16);
    put_half(b + 2, m16);
    pack_scales(sc, m, b + 4);
    uint8_t *qs = b + (t == MI_Q5_K ? 48 : 16), *qh = t == MI_Q5_K ? b + 16 : NULL;
    for (int i = 0; i < MI_QK_K; i++) {
        int j = i / 32;
        float ds = d * (float)sc[j], dm = dmin * (float)m[j];
        int l = ds > 0.0f ? clampi((int)lrintf((x[i] + dm) / ds), 0, nmax) : 0;
        int g = i / 64, k = i % 64, hi = k >= 32, pos = g * 32 + (k % 32);
        qs[pos] |= (uint8_t)((l & 0x0f) << (hi ? 4 : 0));
        if (qh && (l & 16))
            qh[k % 32] |= (uint8_t)(1u << (2 * g + hi));
    }
}

/* q6_K: each sub-block of 16 fitted as scale * q, q in -32..31, its value of
 * largest magnitude at -32; the scales to int8 against d (the largest
 * magnitude at -128), then the values against the rounded scales. */
static void encode_q6(const float *x, uint8_t *b)
{
    float scale[16], big = 0.0f;
    int bad = 0;
    for (int j = 0; j < 16; j++) {
        float mx = 0.0f, amax = 0.0f;
        for (int i = 0; i < 16; i++) {
            float v = x[j * 16 + i];
            bad |= !isfinite(v);
            if (fabsf(v) > amax) {
                amax = fabsf(v);
                mx = v;
            }
        }
        scale[j] = mx / -32.0f;
        if (fabsf(scale[j]) > fabsf(big))
            big = scale[j];
    }
    memset(b, 0, 210);
    if (bad) {
        put_half(b + 208, 0x7e00u);
        return;
    }
    uint16_t d16 = mi_fp16_from_f32(big / -128.0f);
    float d = mi_f32_from_fp16(d16);
    int8_t *scales = (int8_t *)(b + 192);
    uint8_t lv[MI_QK_K];
    for (int j = 0; j < 16; j++) {
        scales[j] = (int8_t)(d != 0.0f ? clampi((int)lrintf(scale[j] / d), -128, 127) : 0);
        float ds = d * (float)scales[j];
        for (int i = 0; i < 16; i++)
            lv[j * 16 + i] = (uint8_t)(ds != 0.0f ? clampi((int)lrintf(x[j * 16 + i] / ds), -32, 31) + 32 : 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *e = lv + n * 128 + l;
            ql[n * 64 + l] = (uint8_t)((e[0] & 0x0f) | ((e[64] & 0x0f) << 4));
            ql[n * 64 + l + 32] = (uint8_t)((e[32] & 0x0f) | ((e[96] & 0x0f) << 4));
            qh[n * 32 + l] = (uint8_t)((e[0] >> 4) | ((e[32] >> 4) << 2) | ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
        }
    put_half(b + 208, d16);
}

void mi_kquant_quantize_row(int t, const float *x, int n, void *q)
{
    size_t bb = block_bytes(t);
    for (int b = 0; b < n / MI_QK_K; b++) {
        uint8_t *out = (uint8_t *)q + (size_t)b * bb;
        if (t == MI_Q6_K)
            encode_q6(x + b * MI_QK_K, out);
        else
            encode_q45(t, x + b * MI_QK_K, out);
    }
}
