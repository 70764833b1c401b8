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

/* Weighted least squares of x ~ a * l + b over n values for fixed levels l:
 * the (a, b) minimising sum w (a l + b - x)^2, with b <= 0 (x = scale * q -
 * min with min >= 0) and, when the free optimum has b > 0, b = 0 and the
 * best a alone. Returns the weighted squared error; 0 fit when degenerate. */
static float affine_fit(int n, const float *x, const float *w, const uint8_t *l, float *a, float *b)
{
    float sw = 0, sl = 0, sll = 0, sx = 0, slx = 0;
    for (int i = 0; i < n; i++) {
        sw += w[i];
        sl += w[i] * l[i];
        sll += w[i] * l[i] * l[i];
        sx += w[i] * x[i];
        slx += w[i] * l[i] * x[i];
    }
    float det = sw * sll - sl * sl;
    *a = 0.0f;
    *b = 0.0f;
    if (det > 0) {
        *a = (sw * slx - sx * sl) / det;
        *b = (sll * sx - sl * slx) / det;
        if (*b > 0) {
            *b = 0.0f;
            *a = sll > 0 ? slx / sll : 0.0f;
        }
    }
    float e = 0;
    for (int i = 0; i < n; i++) {
        float r = *a * l[i] + *b - x[i];
        e += w[i] * r * r;
    }
    return e;
}

/* One sub-block of q4_K/q5_K (n values, levels 0..nmax): x ~ scale * l -
 * min. The range [min(x, 0), max(x)] split into nmax steps is the first
 * guess; then grids of nmax + rmin + k * rdelta steps (k = 0..nstep) over
 * the same range each give levels, refitted by least squares, and the
 * fit of least weighted squared error is kept (the weights favour the
 * larger values, whose errors cost more in a product). */
static void fit_sub_block(int n, int nmax, const float *x, const float *w, float rmin, float rdelta, int nstep,
                          float *scale, float *min)
{
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *min = -lo;
    *scale = 0.0f;
    if (!(hi > lo))
        return;
    uint8_t l[32];
    float best = 0, step = (hi - lo) / (float)nmax;
    for (int i = 0; i < n; i++) {
        l[i] = (uint8_t)clampi((int)lrintf((x[i] - lo) / step), 0, nmax);
        float r = step * l[i] + lo - x[i];
        best += w[i] * r * r;
    }
    *scale = step;
    for (int k = 0; k <= nstep; k++) {
        float inv = ((float)nmax + rmin + rdelta * (float)k) / (hi - lo), a, b;
        for (int i = 0; i < n; i++)
            l[i] = (uint8_t)clampi((int)lrintf(inv * (x[i] - lo)), 0, nmax);
        float e = affine_fit(n, x, w, l, &a, &b);
        if (a > 0 && e < best) {
            best = e;
            *scale = a;
            *min = -b;
        }
    }
}

/* Squared error of sub-block x (32 values) coded with scale ds and min dm
 * (levels 0..nmax, nearest); the levels into l when l != NULL. */
static float sub_block_error(const float *x, float ds, float dm, int nmax, uint8_t *l)
{
    float e = 0;
    for (int i = 0; i < 32; i++) {
        int q = ds > 0.0f ? clampi((int)lrintf((x[i] + dm) / ds), 0, nmax) : 0;
        float r = ds * (float)q - dm - x[i];
        e += r * r;
        if (l)
            l[i] = (uint8_t)q;
    }
    return e;
}

/* q4_K / q5_K (nmax 15 / 31): each sub-block of 32 fitted by fit_sub_block
 * (llama.cpp's search: its weights rms(x) + |x|, grids from nmax - 1 (q4_K,
 * 21 of them) or nmax - 0.5 (q5_K, 16) in steps of 0.1); then the
 * super-block's d and dmin (fp16) are the largest scale and min over 63,
 * and each sub-block's 6-bit scale and min are rounded to them and then
 * nudged by one up or down where that lowers the sub-block's squared
 * error with its levels chosen again (the rounding alone can cost more
 * than a step elsewhere). */
static void encode_q45(int t, const float *x, uint8_t *b)
{
    const int nmax = t == MI_Q5_K ? 31 : 15;
    float scale[8], mins[8], max_scale = 0.0f, max_min = 0.0f, w[32];
    int bad = 0;
    for (int i = 0; i < MI_QK_K; i++)
        bad |= !isfinite(x[i]);
    memset(b, 0, block_bytes(t));
    if (bad) {
        put_half(b, 0x7e00u);
        put_half(b + 2, 0x7e00u);
        return;
    }
    for (int j = 0; j < 8; j++) {
        const float *xs = x + j * 32;
        float s2 = 0;
        for (int i = 0; i < 32; i++)
            s2 += xs[i] * xs[i];
        float rms = sqrtf(s2 / 32.0f);
        for (int i = 0; i < 32; i++)
            w[i] = rms + fabsf(xs[i]);
        if (t == MI_Q5_K)
            fit_sub_block(32, nmax, xs, w, -0.5f, 0.1f, 15, &scale[j], &mins[j]);
        else
            fit_sub_block(32, nmax, xs, w, -1.0f, 0.1f, 20, &scale[j], &mins[j]);
        max_scale = scale[j] > max_scale ? scale[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    uint16_t d16 = mi_fp16_from_f32(max_scale / 63.0f), m16 = mi_fp16_from_f32(max_min / 63.0f);
    float d = mi_f32_from_fp16(d16), dmin = mi_f32_from_fp16(m16);
    int sc[8], m[8];
    uint8_t lv[MI_QK_K];
    for (int j = 0; j < 8; j++) {
        const float *xs = x + j * 32;
        int s0 = d > 0.0f ? clampi((int)lrintf(scale[j] / d), 0, 63) : 0;
        int m0 = dmin > 0.0f ? clampi((int)lrintf(mins[j] / dmin), 0, 63) : 0;
        float best = sub_block_error(xs, d * (float)s0, dmin * (float)m0, nmax, NULL);
        sc[j] = s0, m[j] = m0;
        for (int ds = -1; ds <= 1; ds++)
            for (int dm = -1; dm <= 1; dm++) {
                int s1 = clampi(s0 + ds, 0, 63), m1 = clampi(m0 + dm, 0, 63);
                float e = sub_block_error(xs, d * (float)s1, dmin * (float)m1, nmax, NULL);
                if (e < best) {
                    best = e;
                    sc[j] = s1, m[j] = m1;
                }
            }
        sub_block_error(xs, d * (float)sc[j], dmin * (float)m[j], nmax, lv + j * 32);
    }
    put_half(b, d16);
    put_half(b + 2, m16);
    pack_scales(sc, m, b + 4);
    uint8_t *qs = b + (t == MI_Q5_K ? 48 : 16), *qh = t == MI_Q5_K ? b + 16 : NULL;
    for (int i = 0; i < MI_QK_K; i++) {
        int l = lv[i];
        int g = i / 64, k = i % 64, hi = k >= 32, pos = g * 32 + (k % 32);
        qs[pos] |= (uint8_t)((l & 0x0f) << (hi ? 4 : 0));
        if (qh && (l & 16))
            qh[k % 32] |= (uint8_t)(1u << (2 * g + hi));
    }
}

/* One sub-block of q6_K (n values, levels -nmax..nmax-1): x ~ scale * l.
 * The value of largest magnitude at level -nmax is the first guess; then
 * grids of nmax + 0.1 k steps (k = -9..9) to it each give levels, refitted
 * by least squares weighted by x^2, and the best is kept (llama.cpp's
 * make_qx_quants search). Returns the scale (0: an all-zero sub-block). */
static float fit_symmetric(int n, int nmax, const float *x)
{
    float mx = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            mx = x[i];
        }
    if (amax < 1e-15f)
        return 0.0f;
    float best_scale = 0.0f, best = -1.0f; /* best: (sum w x l)^2 / sum w l^2, the error it removes */
    for (int k = -9; k <= 9; k++) {
        float inv = -((float)nmax + 0.1f * (float)k) / mx, sxl = 0, sll = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi((int)lrintf(inv * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sxl += w * x[i] * (float)l;
            sll += w * (float)l * (float)l;
        }
        if (sll > 0 && (best < 0 || sxl * sxl > best * sll)) {
            best = sxl * sxl / sll;
            best_scale = sxl / sll;
        }
    }
    return best_scale;
}

/* Squared error of q6_K sub-block x (16 values) coded with scale ds; the
 * levels (offset by 32) into l when l != NULL. */
static float q6_error(const float *x, float ds, uint8_t *l)
{
    float e = 0;
    for (int i = 0; i < 16; i++) {
        int q = ds != 0.0f ? clampi((int)lrintf(x[i] / ds), -32, 31) : 0;
        float r = ds * (float)q - x[i];
        e += r * r;
        if (l)
            l[i] = (uint8_t)(q + 32);
    }
    return e;
}

/* q6_K: each sub-block of 16 fitted by fit_symmetric; d (fp16) is the
 * scale of largest magnitude over -128, each int8 scale rounded to it and
 * nudged by one where that lowers the sub-block's squared error; then the
 * values against the rounded scales. */
static void encode_q6(const float *x, uint8_t *b)
{
    float scale[16], big = 0.0f;
    int bad = 0;
    for (int i = 0; i < MI_QK_K; i++)
        bad |= !isfinite(x[i]);
    memset(b, 0, 210);
    if (bad) {
        put_half(b + 208, 0x7e00u);
        return;
    }
    for (int j = 0; j < 16; j++) {
        scale[j] = fit_symmetric(16, 32, x + j * 16);
        if (fabsf(scale[j]) > fabsf(big))
            big = scale[j];
    }
    uint16_t d16 = mi_fp16_from_f32(big / -128.0f);
    float d = mi_f32_from_fp16(d16);
    int8_t *scales = (int8_t *)(b + 192);
    uint8_t lv[MI_QK_K];
    for (int j = 0; j < 16; j++) {
        const float *xs = x + j * 16;
        int s0 = d != 0.0f ? clampi((int)lrintf(scale[j] / d), -128, 127) : 0, s = s0;
        float best = q6_error(xs, d * (float)s0, NULL);
        for (int k = -1; k <= 1; k += 2) {
            int s1 = clampi(s0 + k, -128, 127);
            float e = q6_error(xs, d * (float)s1, NULL);
            if (e < best) {
                best = e;
                s = s1;
            }
        }
        scales[j] = (int8_t)s;
        q6_error(xs, d * (float)s, lv + j * 16);
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
