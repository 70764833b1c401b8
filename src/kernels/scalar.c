/* The portable scalar kernel family: the reference every SIMD family is
 * tested against, and the fallback on CPUs without one (see family.h).
 * Written for clarity first; the fp32 loop keeps 16 partial sums so that
 * compilers vectorise it. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "family.h"

float mi_act_quantize_block(const float *x, int8_t *q)
{
    float amax = 0.0f;
    int bad = 0;
    for (int i = 0; i < MI_QK; i++) {
        float a = fabsf(x[i]);
        bad |= !(a <= FLT_MAX); /* NaN or infinity */
        amax = a > amax ? a : amax;
    }
    if (bad) {
        memset(q, 0, MI_QK);
        return NAN;
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < MI_QK; i++) {
        float v = nearbyintf(x[i] * id);
        q[i] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
    }
    return d;
}

/* Natural order: q[i] is element i; s[b] = (float)(mult * sum of block b's
 * q) * d[b]: mult -8 gives q4_0's offset terms, 1 the k-quants' block sums
 * (family.h). */
static void prep_natural(const float *x, int n, void *scratch, mi_act *a, int mult)
{
    int nb = n / MI_QK;
    float *d, *s;
    int8_t *q;
    mi_act_layout(scratch, x, n, a, &d, &s, &q);
    for (int b = 0; b < nb; b++) {
        d[b] = mi_act_quantize_block(x + b * MI_QK, q + b * MI_QK);
        int sum = 0;
        for (int i = 0; i < MI_QK; i++)
            sum += q[b * MI_QK + i];
        s[b] = (float)(mult * sum) * d[b];
    }
}

static void prep_q(const float *x, int n, void *scratch, mi_act *a)
{
    prep_natural(x, n, scratch, a, -8);
}

static void prep_qk(const float *x, int n, void *scratch, mi_act *a)
{
    prep_natural(x, n, scratch, a, 1);
}

static float dot_f32(const float *w, const float *x, int n)
{
    float acc[16] = {0};
    int j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++)
            acc[k] += w[j + k] * x[j + k];
    for (int k = 0; j + k < n; k++)
        acc[k] += w[j + k] * x[j + k];
    for (int s = 8; s >= 1; s /= 2)
        for (int k = 0; k < s; k++)
            acc[k] += acc[k + s];
    return acc[0];
}

static void rows_f32(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    for (int r = r0; r < r1; r++) {
        float v = dot_f32((const float *)W->q + (size_t)r * W->cols, a->x, W->cols);
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

static void rows_f16(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    float w[256];
    for (int r = r0; r < r1; r++) {
        const uint16_t *h = (const uint16_t *)W->q + (size_t)r * W->cols;
        float v = 0.0f;
        for (int j = 0; j < W->cols; j += 256) {
            int len = W->cols - j < 256 ? W->cols - j : 256;
            for (int i = 0; i < len; i++)
                w[i] = mi_f32_from_fp16(h[j + i]);
            v += dot_f32(w, a->x + j, len);
        }
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* sum over blocks of dw * dx * (integer dot of the block) */
static void rows_q8_0(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    int nb = W->cols / MI_QK;
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->q + (size_t)r * W->cols;
        const uint16_t *dw = W->d + (size_t)r * nb;
        float v = 0.0f;
        for (int b = 0; b < nb; b++) {
            int sum = 0;
            for (int i = 0; i < MI_QK; i++)
                sum += w[b * MI_QK + i] * a->q[b * MI_QK + i];
            v += (float)sum * (mi_f32_from_fp16(dw[b]) * a->d[b]);
        }
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* sum over blocks of dw * (dx * sum(nibble * q) + s), s = -8 * dx * sum(q) */
static void rows_q4_0(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    int nb = W->cols / MI_QK;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * (W->cols / 2);
        const uint16_t *dw = W->d + (size_t)r * nb;
        float v = 0.0f;
        for (int b = 0; b < nb; b++) {
            const uint8_t *wb = w + b * (MI_QK / 2);
            const int8_t *xb = a->q + b * MI_QK;
            int sum = 0;
            for (int j = 0; j < MI_QK / 2; j++)
                sum += (wb[j] & 0x0f) * xb[j] + (wb[j] >> 4) * xb[j + MI_QK / 2];
            v += mi_f32_from_fp16(dw[b]) * ((float)sum * a->d[b] + a->s[b]);
        }
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* One super-block k of a k-quant row, unpacked (mi_kquant_unpack), against
 * activations a: q4_K and q5_K d * sum_j dx_j * sc_j * (integer dot of
 * sub-block j) - dmin * sum_j m_j * s_j, the sub-blocks of 32 lying on the
 * activation blocks; q6_K d * sum_b dx_b * (sc of its first 16 * their
 * integer dot + sc of its last 16 * theirs), levels already offset by -32.
 * The row and tile kernels both add this, so their bits agree. */
static inline float kq_superblock(mi_dtype dt, const int8_t *q, const int *sc, const int *m, float d, float dmin,
                                  const mi_act *a, int k)
{
    float acc = 0.0f;
    if (dt == MI_Q6_K) {
        for (int j = 0; j < 8; j++) {
            int b = k * 8 + j, lo = 0, hi = 0;
            const int8_t *xq = a->q + b * MI_QK, *wq = q + j * MI_QK;
            for (int i = 0; i < 16; i++) {
                lo += wq[i] * xq[i];
                hi += wq[i + 16] * xq[i + 16];
            }
            acc += (float)(sc[2 * j] * lo + sc[2 * j + 1] * hi) * a->d[b];
        }
        return d * acc;
    }
    float mins = 0.0f;
    for (int j = 0; j < 8; j++) {
        int b = k * 8 + j, sum = 0;
        for (int i = 0; i < MI_QK; i++)
            sum += q[j * MI_QK + i] * a->q[b * MI_QK + i];
        acc += (float)(sc[j] * sum) * a->d[b];
        mins += (float)m[j] * a->s[b];
    }
    return d * acc - dmin * mins;
}

static void rows_kq(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add)
{
    int ns = W->cols / MI_QK_K;
    size_t bb = mi_dtype_q_row_bytes(W->dtype, MI_QK_K);
    int8_t q[MI_QK_K];
    int sc[16], m[16];
    float d, dmin;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;
        float v = 0.0f;
        for (int k = 0; k < ns; k++) {
            mi_kquant_unpack(W->dtype, w + k * bb, q, sc, m, &d, &dmin);
            v += kq_superblock(W->dtype, q, sc, m, d, dmin, a, k);
        }
        y[r - r0] = add ? y[r - r0] + v : v;
    }
}

/* ------------------------------------------------------------- tiles */

/* Each kernel below is its row kernel above with the weight block's values
 * read (and decoded) once and applied to every activation row in turn: per
 * row the same expressions in the same order, so the same bits (family.h).
 * The per-row sums live in arrays of NT; the loops over t are the inner ones. */
#define NT 8

static void tile_f32(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add)
{
    const int n = W->cols;
    for (int t0 = 0; t0 < nt; t0 += NT) {
        int m = nt - t0 < NT ? nt - t0 : NT;
        for (int r = r0; r < r1; r++) {
            const float *w = (const float *)W->q + (size_t)r * n;
            float acc[NT][16] = {{0}};
            int j = 0;
            for (; j + 16 <= n; j += 16)
                for (int t = 0; t < m; t++)
                    for (int k = 0; k < 16; k++)
                        acc[t][k] += w[j + k] * a[t0 + t].x[j + k];
            for (int t = 0; t < m; t++) {
                float *c = acc[t];
                for (int k = 0; j + k < n; k++)
                    c[k] += w[j + k] * a[t0 + t].x[j + k];
                for (int s = 8; s >= 1; s /= 2)
                    for (int k = 0; k < s; k++)
                        c[k] += c[k + s];
                float *o = y + (size_t)(t0 + t) * ldy + (r - r0);
                *o = add ? *o + c[0] : c[0];
            }
        }
    }
}

/* fp16: rows_f16's chunks of 256 converted once; each chunk's dot_f32 then
 * runs for every activation row, so the row's sums are rows_f16's. */
static void tile_f16(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add)
{
    float w[256];
    for (int t0 = 0; t0 < nt; t0 += NT) {
        int m = nt - t0 < NT ? nt - t0 : NT;
        for (int r = r0; r < r1; r++) {
            const uint16_t *h = (const uint16_t *)W->q + (size_t)r * W->cols;
            float v[NT] = {0};
            for (int j = 0; j < W->cols; j += 256) {
                int len = W->cols - j < 256 ? W->cols - j : 256;
                for (int i = 0; i < len; i++)
                    w[i] = mi_f32_from_fp16(h[j + i]);
                for (int t = 0; t < m; t++)
                    v[t] += dot_f32(w, a[t0 + t].x + j, len);
            }
            for (int t = 0; t < m; t++) {
                float *o = y + (size_t)(t0 + t) * ldy + (r - r0);
                *o = add ? *o + v[t] : v[t];
            }
        }
    }
}

static void tile_q8_0(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add)
{
    int nb = W->cols / MI_QK;
    for (int t0 = 0; t0 < nt; t0 += NT) {
        int m = nt - t0 < NT ? nt - t0 : NT;
        for (int r = r0; r < r1; r++) {
            const int8_t *w = (const int8_t *)W->q + (size_t)r * W->cols;
            const uint16_t *dw = W->d + (size_t)r * nb;
            float v[NT] = {0};
            for (int b = 0; b < nb; b++) {
                const int8_t *wb = w + b * MI_QK;
                float dwf = mi_f32_from_fp16(dw[b]);
                for (int t = 0; t < m; t++) {
                    const mi_act *at = &a[t0 + t];
                    int sum = 0;
                    for (int i = 0; i < MI_QK; i++)
                        sum += wb[i] * at->q[b * MI_QK + i];
                    v[t] += (float)sum * (dwf * at->d[b]);
                }
            }
            for (int t = 0; t < m; t++) {
                float *o = y + (size_t)(t0 + t) * ldy + (r - r0);
                *o = add ? *o + v[t] : v[t];
            }
        }
    }
}

static void tile_q4_0(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add)
{
    int nb = W->cols / MI_QK;
    for (int t0 = 0; t0 < nt; t0 += NT) {
        int m = nt - t0 < NT ? nt - t0 : NT;
        for (int r = r0; r < r1; r++) {
            const uint8_t *w = (const uint8_t *)W->q + (size_t)r * (W->cols / 2);
            const uint16_t *dw = W->d + (size_t)r * nb;
            float v[NT] = {0};
            for (int b = 0; b < nb; b++) {
                const uint8_t *wb = w + b * (MI_QK / 2);
                int lo[MI_QK / 2], hi[MI_QK / 2];
                for (int j = 0; j < MI_QK / 2; j++) {
                    lo[j] = wb[j] & 0x0f;
                    hi[j] = wb[j] >> 4;
                }
                float dwf = mi_f32_from_fp16(dw[b]);
                for (int t = 0; t < m; t++) {
                    const mi_act *at = &a[t0 + t];
                    const int8_t *xb = at->q + b * MI_QK;
                    int sum = 0;
                    for (int j = 0; j < MI_QK / 2; j++)
                        sum += lo[j] * xb[j] + hi[j] * xb[j + MI_QK / 2];
                    v[t] += dwf * ((float)sum * at->d[b] + at->s[b]);
                }
            }
            for (int t = 0; t < m; t++) {
                float *o = y + (size_t)(t0 + t) * ldy + (r - r0);
                *o = add ? *o + v[t] : v[t];
            }
        }
    }
}

/* The k-quants: each super-block unpacked once (mi_kquant_unpack). */
static void tile_kq(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add)
{
    int ns = W->cols / MI_QK_K;
    size_t bb = mi_dtype_q_row_bytes(W->dtype, MI_QK_K);
    int8_t q[MI_QK_K];
    int sc[16], m[16];
    float d, dmin;
    for (int t0 = 0; t0 < nt; t0 += NT) {
        int mt = nt - t0 < NT ? nt - t0 : NT;
        for (int r = r0; r < r1; r++) {
            const uint8_t *w = (const uint8_t *)W->q + (size_t)r * ns * bb;
            float v[NT] = {0};
            for (int k = 0; k < ns; k++) {
                mi_kquant_unpack(W->dtype, w + k * bb, q, sc, m, &d, &dmin);
                for (int t = 0; t < mt; t++)
                    v[t] += kq_superblock(W->dtype, q, sc, m, d, dmin, &a[t0 + t], k);
            }
            for (int t = 0; t < mt; t++) {
                float *o = y + (size_t)(t0 + t) * ldy + (r - r0);
                *o = add ? *o + v[t] : v[t];
            }
        }
    }
}

static int always(void)
{
    return 1;
}

const mi_kernel_family mi_kernels_scalar = {
    "scalar",
    always,
    {NULL, NULL, prep_q, prep_q, prep_qk, prep_qk, prep_qk},
    {rows_f32, rows_f16, rows_q8_0, rows_q4_0, rows_kq, rows_kq, rows_kq},
    {tile_f32, tile_f16, tile_q8_0, tile_q4_0, tile_kq, tile_kq, tile_kq},
};
