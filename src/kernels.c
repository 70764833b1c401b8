/* Forward-pass kernels (see kernels.h). */
#include "meshinfer/kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

void mi_rmsnorm(float *out, const float *x, const float *w, int T, int dim, float eps)
{
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * dim;
        float *ot = out + (size_t)t * dim;
        float ss = 0.0f;
        for (int i = 0; i < dim; i++)
            ss += xt[i] * xt[i];
        float s = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = 0; i < dim; i++)
            ot[i] = w[i] * (s * xt[i]);
    }
}

#if defined(__AVX512F__)
/* Four rows at a time share each load of x; each row keeps its own
 * accumulator and the same tail and reduction, so a row's value never depends
 * on which group it falls in. */
static void matvec(float *y, const float *x, const float *W, int n, int d, int add)
{
    const int nv = n & ~15;
    const __mmask16 tail = (__mmask16)((1u << (n - nv)) - 1u);
    int i = 0;
    for (; i + 4 <= d; i += 4) {
        const float *w0 = W + (size_t)i * n, *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < nv; j += 16) {
            __m512 xv = _mm512_loadu_ps(x + j);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + j), xv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + j), xv, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + j), xv, a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + j), xv, a3);
        }
        if (tail) {
            __m512 xv = _mm512_maskz_loadu_ps(tail, x + nv);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + nv), xv, a0);
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w1 + nv), xv, a1);
            a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w2 + nv), xv, a2);
            a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w3 + nv), xv, a3);
        }
        float r0 = _mm512_reduce_add_ps(a0), r1 = _mm512_reduce_add_ps(a1);
        float r2 = _mm512_reduce_add_ps(a2), r3 = _mm512_reduce_add_ps(a3);
        if (add) {
            y[i] += r0; y[i + 1] += r1; y[i + 2] += r2; y[i + 3] += r3;
        } else {
            y[i] = r0; y[i + 1] = r1; y[i + 2] = r2; y[i + 3] = r3;
        }
    }
    for (; i < d; i++) {
        const float *w0 = W + (size_t)i * n;
        __m512 a0 = _mm512_setzero_ps();
        for (int j = 0; j < nv; j += 16)
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + j), _mm512_loadu_ps(x + j), a0);
        if (tail)
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + nv), _mm512_maskz_loadu_ps(tail, x + nv), a0);
        float r0 = _mm512_reduce_add_ps(a0);
        y[i] = add ? y[i] + r0 : r0;
    }
}
#else
/* Portable version: 16 partial sums per row, combined in a fixed order, which
 * compilers vectorise on NEON/AVX2 and which is again independent of grouping. */
static void matvec(float *y, const float *x, const float *W, int n, int d, int add)
{
    for (int i = 0; i < d; i++) {
        const float *w = W + (size_t)i * n;
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
        y[i] = add ? y[i] + acc[0] : acc[0];
    }
}
#endif

static int g_blas_matvec = 0;

void mi_use_blas_matvec(int on)
{
    g_blas_matvec = on;
}

void mi_matmul(float *y, const float *x, const float *W, int T, int n_in, int n_out)
{
    if (T == 1 && g_blas_matvec)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n_out, n_in, 1.0f, W, n_in, x, 1, 0.0f, y, 1);
    else if (T == 1)
        matvec(y, x, W, n_in, n_out, 0);
    else if (T > 1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n_out, n_in, 1.0f, x, n_in, W, n_in, 0.0f, y,
                    n_out);
}

void mi_matmul_add(float *y, const float *x, const float *W, int T, int n_in, int n_out)
{
    if (T == 1 && g_blas_matvec)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n_out, n_in, 1.0f, W, n_in, x, 1, 1.0f, y, 1);
    else if (T == 1)
        matvec(y, x, W, n_in, n_out, 1);
    else if (T > 1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n_out, n_in, 1.0f, x, n_in, W, n_in, 1.0f, y,
                    n_out);
}

void mi_rope_init(mi_rope_table *r, int seq_len, int head_dim, float theta)
{
    int half = head_dim / 2;
    r->seq_len = seq_len;
    r->head_dim = head_dim;
    r->cos = mi_malloc((size_t)seq_len * half * sizeof(float), "RoPE table");
    r->sin = mi_malloc((size_t)seq_len * half * sizeof(float), "RoPE table");
    for (int p = 0; p < seq_len; p++)
        for (int i = 0; i < half; i++) {
            float freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
            float a = (float)p * freq;
            r->cos[(size_t)p * half + i] = cosf(a);
            r->sin[(size_t)p * half + i] = sinf(a);
        }
}

void mi_rope_free(mi_rope_table *r)
{
    free(r->cos);
    free(r->sin);
    r->cos = r->sin = NULL;
}

void mi_rope_apply(const mi_rope_table *r, float *v, int T, int pos0, int n_heads)
{
    int hd = r->head_dim, half = hd / 2;
    for (int t = 0; t < T; t++) {
        const float *c = r->cos + (size_t)(pos0 + t) * half;
        const float *s = r->sin + (size_t)(pos0 + t) * half;
        float *vt = v + (size_t)t * n_heads * hd;
        for (int h = 0; h < n_heads; h++) {
            float *vh = vt + (size_t)h * hd;
            for (int i = 0; i < half; i++) {
                float a = vh[2 * i], b = vh[2 * i + 1];
                vh[2 * i] = a * c[i] - b * s[i];
                vh[2 * i + 1] = a * s[i] + b * c[i];
            }
        }
    }
}

void mi_softmax(float *x, int n)
{
    float mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx)
            mx = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void mi_attention(float *out, const float *q, const float *kc, const float *vc, int T, int pos0, int n_q,
                  int group, int head_dim, int seq_len, float *att)
{
    const float scale = 1.0f / sqrtf((float)head_dim);
    for (int t = 0; t < T; t++) {
        int pos = pos0 + t;
        for (int h = 0; h < n_q; h++) {
            const float *qh = q + ((size_t)t * n_q + h) * head_dim;
            const float *kh = kc + (size_t)(h / group) * seq_len * head_dim;
            const float *vh = vc + (size_t)(h / group) * seq_len * head_dim;
            for (int p = 0; p <= pos; p++) {
                const float *k = kh + (size_t)p * head_dim;
                float s = 0.0f;
                for (int i = 0; i < head_dim; i++)
                    s += qh[i] * k[i];
                att[p] = s * scale;
            }
            mi_softmax(att, pos + 1);
            float *oh = out + ((size_t)t * n_q + h) * head_dim;
            memset(oh, 0, (size_t)head_dim * sizeof(float));
            for (int p = 0; p <= pos; p++) {
                const float *v = vh + (size_t)p * head_dim;
                float a = att[p];
                for (int i = 0; i < head_dim; i++)
                    oh[i] += a * v[i];
            }
        }
    }
}

void mi_swiglu(float *h1, const float *h3, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = h1[i];
        h1[i] = v / (1.0f + expf(-v)) * h3[i];
    }
}

/* OpenBLAS-specific; declared here to avoid depending on its private header. */
extern void openblas_set_num_threads(int);

void mi_set_blas_threads(int n)
{
    if (n > 0)
        openblas_set_num_threads(n);
}
