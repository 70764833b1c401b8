/* Element types, tensors, block quantization and wire encoding (see tensor.h). */
#include "meshinfer/tensor.h"

#include "kquants.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *dtype_names[MI_N_DTYPES] = {"fp32", "fp16", "q8_0", "q4_0", "q4_K", "q5_K", "q6_K"};

const char *mi_dtype_name(int t)
{
    return t >= 0 && t < MI_N_DTYPES ? dtype_names[t] : "?";
}

int mi_dtype_parse(const char *name, mi_dtype *t)
{
    for (int i = 0; i < MI_N_DTYPES; i++)
        if (!strcmp(name, dtype_names[i])) {
            *t = (mi_dtype)i;
            return 0;
        }
    return -1;
}

int mi_dtype_blocked(int t)
{
    return mi_dtype_block(t) > 1;
}

int mi_dtype_block(int t)
{
    switch (t) {
    case MI_F32:
    case MI_F16: return 1;
    case MI_Q8_0:
    case MI_Q4_0: return MI_QK;
    case MI_Q4_K:
    case MI_Q5_K:
    case MI_Q6_K: return MI_QK_K;
    default: return 0;
    }
}

int mi_dtype_split_scales(int t)
{
    return t == MI_Q8_0 || t == MI_Q4_0;
}

int mi_dtype_kquant(int t)
{
    return t == MI_Q4_K || t == MI_Q5_K || t == MI_Q6_K;
}

size_t mi_dtype_q_row_bytes(int t, size_t n)
{
    switch (t) {
    case MI_F32: return 4 * n;
    case MI_F16: return 2 * n;
    case MI_Q8_0: return n;
    case MI_Q4_0: return n / 2;
    case MI_Q4_K: return 144 * (n / MI_QK_K);
    case MI_Q5_K: return 176 * (n / MI_QK_K);
    case MI_Q6_K: return 210 * (n / MI_QK_K);
    default: return 0;
    }
}

size_t mi_dtype_row_bytes(int t, size_t n)
{
    return mi_dtype_q_row_bytes(t, n) + (mi_dtype_split_scales(t) ? 2 * (n / MI_QK) : 0);
}

size_t mi_tensor_bytes(int t, size_t rows, size_t cols)
{
    return rows * mi_dtype_row_bytes(t, cols);
}

/* ---------------------------------------------------------------- tensor */

mi_tensor mi_tensor_shape(mi_dtype t, int rows, int cols)
{
    mi_tensor s = {t, rows, cols, NULL, NULL};
    return s;
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

size_t mi_tensor_place_bytes(int dtype, size_t rows, size_t cols)
{
    size_t qb = rows * mi_dtype_q_row_bytes(dtype, cols);
    return mi_dtype_split_scales(dtype) ? round64(qb) + round64(rows * (cols / MI_QK) * 2) : round64(qb);
}

size_t mi_tensor_place(mi_tensor *t, void *mem)
{
    size_t qb = (size_t)t->rows * mi_dtype_q_row_bytes(t->dtype, (size_t)t->cols);
    t->q = mem;
    t->d = mi_dtype_split_scales(t->dtype) ? (uint16_t *)((char *)mem + round64(qb)) : NULL;
    return mi_tensor_place_bytes(t->dtype, (size_t)t->rows, (size_t)t->cols);
}

mi_tensor mi_tensor_rows(const mi_tensor *t, int r0, int n)
{
    mi_tensor v = *t;
    v.rows = n;
    v.q = (char *)t->q + (size_t)r0 * mi_dtype_q_row_bytes(t->dtype, (size_t)t->cols);
    if (t->d)
        v.d = t->d + (size_t)r0 * (size_t)(t->cols / MI_QK);
    return v;
}

void mi_tensor_keep_rows(mi_tensor *t, int n_runs, const int *r0, const int *rn)
{
    size_t qb = mi_dtype_q_row_bytes(t->dtype, (size_t)t->cols), db = t->d ? (size_t)(t->cols / MI_QK) : 0;
    int to = 0;
    for (int i = 0; i < n_runs; to += rn[i++]) { /* runs ascend: every row moves down or stays */
        memmove((char *)t->q + (size_t)to * qb, (char *)t->q + (size_t)r0[i] * qb, (size_t)rn[i] * qb);
        if (db)
            memmove(t->d + (size_t)to * db, t->d + (size_t)r0[i] * db, (size_t)rn[i] * db * sizeof *t->d);
    }
    t->rows = to;
}

int mi_tensor_keep_cols(mi_tensor *t, int n_runs, const int *c0, const int *cn)
{
    int block = mi_dtype_block(t->dtype), nk = 0;
    for (int i = 0; i < n_runs; i++) {
        if (c0[i] % block || cn[i] % block)
            return -1;
        nk += cn[i];
    }
    /* bytes per column of the values (q4_0: half a byte, so runs of whole blocks are whole bytes) */
    size_t qb = mi_dtype_q_row_bytes(t->dtype, (size_t)t->cols), nqb = mi_dtype_q_row_bytes(t->dtype, (size_t)nk);
    size_t db = t->d ? (size_t)(t->cols / MI_QK) : 0, ndb = t->d ? (size_t)(nk / MI_QK) : 0;
    for (int r = 0; r < t->rows; r++) { /* each row packs down to its new stride: never past a later read */
        char *src = (char *)t->q + (size_t)r * qb, *dst = (char *)t->q + (size_t)r * nqb;
        uint16_t *ds = db ? t->d + (size_t)r * db : NULL, *dd = db ? t->d + (size_t)r * ndb : NULL;
        size_t o = 0, od = 0;
        for (int i = 0; i < n_runs; i++) {
            size_t a = mi_dtype_q_row_bytes(t->dtype, (size_t)c0[i]), n = mi_dtype_q_row_bytes(t->dtype, (size_t)cn[i]);
            memmove(dst + o, src + a, n);
            o += n;
            if (db) {
                memmove(dd + od, ds + c0[i] / MI_QK, (size_t)(cn[i] / MI_QK) * sizeof *dd);
                od += (size_t)(cn[i] / MI_QK);
            }
        }
    }
    t->cols = nk;
    return 0;
}

void mi_tensor_row_f32(const mi_tensor *t, int r, float *out)
{
    const char *q = (const char *)t->q + (size_t)r * mi_dtype_q_row_bytes(t->dtype, (size_t)t->cols);
    const uint16_t *d = t->d ? t->d + (size_t)r * (size_t)(t->cols / MI_QK) : NULL;
    mi_dequantize_row(t->dtype, q, d, t->cols, out);
}

int mi_tensor_convert(const mi_tensor *w, int t, void *mem, mi_tensor *out)
{
    if (mi_dtype_block(t) < 1 || w->cols % mi_dtype_block(t))
        return -1;
    mi_tensor q = mi_tensor_shape((mi_dtype)t, w->rows, w->cols);
    if (w->rows == 0 || w->cols == 0 || !w->q) {
        *out = q;
        return 0;
    }
    float *row = malloc((size_t)w->cols * sizeof(float));
    if (!row)
        return -1;
    mi_tensor_place(&q, mem);
    size_t qb = mi_dtype_q_row_bytes(t, (size_t)w->cols);
    for (int r = 0; r < w->rows; r++) {
        mi_tensor_row_f32(w, r, row);
        mi_quantize_row(t, row, w->cols, (unsigned char *)q.q + (size_t)r * qb,
                        q.d ? q.d + (size_t)r * (size_t)(w->cols / MI_QK) : NULL);
    }
    free(row);
    *out = q;
    return 0;
}

/* ---------------------------------------------------------- quantization */

/* One q8_0 block of len <= 32 values; the scale is returned in fp16. */
static uint16_t quantize_q8_block(const float *x, int len, int8_t *q)
{
    float amax = 0.0f;
    int nan = 0;
    for (int i = 0; i < len; i++) {
        float a = fabsf(x[i]);
        nan |= a != a;
        if (a > amax)
            amax = a;
    }
    if (nan || isinf(amax)) {
        memset(q, 0, (size_t)len);
        return 0x7e00u; /* NaN scale: the block decodes to NaN, which later checks report */
    }
    /* llama.cpp's convention (quantize_row_q8_0_ref), so that files are
     * interchangeable: the values divide by the scale before it is rounded
     * to fp16, and round half away from zero */
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < len; i++) {
        float v = roundf(x[i] * id);
        q[i] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
    }
    return mi_fp16_from_f32(d);
}

static uint16_t quantize_q4_block(const float *x, uint8_t *q)
{
    float m = 0.0f, amax = 0.0f;
    int nan = 0;
    for (int i = 0; i < MI_QK; i++) {
        float a = fabsf(x[i]);
        nan |= a != a;
        if (a > amax) {
            amax = a;
            m = x[i];
        }
    }
    if (nan || isinf(amax)) {
        memset(q, 0x88, MI_QK / 2);
        return 0x7e00u;
    }
    /* the extreme value maps to -8 exactly, so all 16 levels are used */
    /* as llama.cpp's quantize_row_q4_0_ref: the unrounded scale divides */
    float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f; /* an all-zero block's scale is -0, as there */
    uint16_t d16 = mi_fp16_from_f32(d);
    uint8_t v[MI_QK];
    for (int i = 0; i < MI_QK; i++) {
        float f = floorf(x[i] * id + 8.5f);
        v[i] = (uint8_t)(f < 0.0f ? 0 : f > 15.0f ? 15 : (int)f);
    }
    for (int j = 0; j < MI_QK / 2; j++)
        q[j] = (uint8_t)(v[j] | (v[j + MI_QK / 2] << 4));
    return d16;
}

void mi_quantize_row(int t, const float *x, int n, void *q, uint16_t *d)
{
    switch (t) {
    case MI_F32: memcpy(q, x, (size_t)n * sizeof(float)); break;
    case MI_F16:
        for (int i = 0; i < n; i++)
            ((uint16_t *)q)[i] = mi_fp16_from_f32(x[i]);
        break;
    case MI_Q8_0:
        for (int b = 0; b < n / MI_QK; b++)
            d[b] = quantize_q8_block(x + b * MI_QK, MI_QK, (int8_t *)q + b * MI_QK);
        break;
    case MI_Q4_0:
        for (int b = 0; b < n / MI_QK; b++)
            d[b] = quantize_q4_block(x + b * MI_QK, (uint8_t *)q + b * (MI_QK / 2));
        break;
    case MI_Q4_K:
    case MI_Q5_K:
    case MI_Q6_K: mi_kquant_quantize_row(t, x, n, q); break;
    }
}

void mi_dequantize_row(int t, const void *q, const uint16_t *d, int n, float *out)
{
    switch (t) {
    case MI_F32: memcpy(out, q, (size_t)n * sizeof(float)); break;
    case MI_F16:
        for (int i = 0; i < n; i++)
            out[i] = mi_f32_from_fp16(((const uint16_t *)q)[i]);
        break;
    case MI_Q8_0:
        for (int b = 0; b < n / MI_QK; b++) {
            float s = mi_f32_from_fp16(d[b]);
            const int8_t *qb = (const int8_t *)q + b * MI_QK;
            for (int i = 0; i < MI_QK; i++)
                out[b * MI_QK + i] = s * (float)qb[i];
        }
        break;
    case MI_Q4_0:
        for (int b = 0; b < n / MI_QK; b++) {
            float s = mi_f32_from_fp16(d[b]);
            const uint8_t *qb = (const uint8_t *)q + b * (MI_QK / 2);
            for (int j = 0; j < MI_QK / 2; j++) {
                out[b * MI_QK + j] = s * (float)((qb[j] & 0x0f) - 8);
                out[b * MI_QK + j + MI_QK / 2] = s * (float)((qb[j] >> 4) - 8);
            }
        }
        break;
    case MI_Q4_K:
    case MI_Q5_K:
    case MI_Q6_K: mi_kquant_dequantize_row(t, q, n, out); break;
    }
}

/* ---------------------------------------------------------- wire format */

/* Place on the ladder: fp32 0, fp16 1, q8_0 2. */
static int wire_step(int t)
{
    return t == MI_Q8_0 ? 2 : t == MI_F16 ? 1 : 0;
}

int mi_wire_lower(int t)
{
    return t == MI_F32 ? MI_F16 : t == MI_F16 ? MI_Q8_0 : -1;
}

int mi_wire_narrower(int a, int b)
{
    return wire_step(a) > wire_step(b) ? a : b;
}

size_t mi_wire_row_bytes(int t, size_t n)
{
    switch (t) {
    case MI_F32: return 4 * n;
    case MI_F16: return 2 * n;
    case MI_Q8_0: return n + 2 * ((n + MI_QK - 1) / MI_QK);
    default: return 0;
    }
}

void mi_wire_pack(int t, const float *x, size_t rows, size_t n, size_t ld, void *buf)
{
    unsigned char *p = buf;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * ld;
        if (t == MI_F32) {
            memcpy(p, xr, 4 * n);
        } else if (t == MI_F16) {
            for (size_t i = 0; i < n; i++) {
                float v = xr[i] > 65504.0f ? 65504.0f : xr[i] < -65504.0f ? -65504.0f : xr[i];
                uint16_t h = mi_fp16_from_f32(v);
                memcpy(p + 2 * i, &h, 2);
            }
        } else {
            size_t nb = (n + MI_QK - 1) / MI_QK;
            int8_t *q = (int8_t *)(p + 2 * nb);
            for (size_t b = 0; b < nb; b++) {
                int len = (int)(n - b * MI_QK < MI_QK ? n - b * MI_QK : MI_QK);
                uint16_t d = quantize_q8_block(xr + b * MI_QK, len, q + b * MI_QK);
                memcpy(p + 2 * b, &d, 2);
            }
        }
        p += mi_wire_row_bytes(t, n);
    }
}

void mi_wire_unpack(int t, const void *buf, size_t rows, size_t n, size_t ld, float *x)
{
    const unsigned char *p = buf;
    for (size_t r = 0; r < rows; r++) {
        float *xr = x + r * ld;
        if (t == MI_F32) {
            memcpy(xr, p, 4 * n);
        } else if (t == MI_F16) {
            for (size_t i = 0; i < n; i++) {
                uint16_t h;
                memcpy(&h, p + 2 * i, 2);
                xr[i] = mi_f32_from_fp16(h);
            }
        } else {
            size_t nb = (n + MI_QK - 1) / MI_QK;
            const int8_t *q = (const int8_t *)(p + 2 * nb);
            for (size_t b = 0; b < nb; b++) {
                uint16_t h;
                memcpy(&h, p + 2 * b, 2);
                float s = mi_f32_from_fp16(h);
                size_t end = (b + 1) * MI_QK < n ? (b + 1) * MI_QK : n;
                for (size_t i = b * MI_QK; i < end; i++)
                    xr[i] = s * (float)q[i];
            }
        }
        p += mi_wire_row_bytes(t, n);
    }
}
