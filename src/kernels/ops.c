/* Element-wise and attention kernels of the forward pass (see kernels.h);
 * the matrix products are in matmul.c. */
#include "meshinfer/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"


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

void mi_rmsnorm_held(float *out, const float *x, const float *w, int T, int dim, float eps,
                     const unsigned char *held)
{
    if (!held) {
        mi_rmsnorm(out, x, w, T, dim, eps);
        return;
    }
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * dim;
        const unsigned char *ht = held + (size_t)t * dim;
        float *ot = out + (size_t)t * dim;
        /* the same order of additions as mi_rmsnorm: absent columns add
         * nothing, so with every column held the result is identical */
        float ss = 0.0f;
        int n = 0;
        for (int i = 0; i < dim; i++)
            if (ht[i]) {
                ss += xt[i] * xt[i];
                n++;
            }
        float s = n > 0 ? 1.0f / sqrtf(ss / (float)n + eps) : 0.0f;
        for (int i = 0; i < dim; i++)
            ot[i] = ht[i] ? w[i] * (s * xt[i]) : 0.0f;
    }
}

void mi_rope_init(mi_rope_table *r, int seq_len, int head_dim, float theta)
{
    mi_rope_init_scaled(r, seq_len, head_dim, theta, NULL, 0);
}

void mi_rope_init_scaled(mi_rope_table *r, int seq_len, int head_dim, float theta, const float *factors,
                         int halves)
{
    int half = head_dim / 2;
    r->seq_len = seq_len;
    r->head_dim = head_dim;
    r->halves = halves;
    r->cos = mi_malloc((size_t)seq_len * half * sizeof(float), "RoPE table");
    r->sin = mi_malloc((size_t)seq_len * half * sizeof(float), "RoPE table");
    for (int p = 0; p < seq_len; p++)
        for (int i = 0; i < half; i++) {
            /* float powf as llama2.c computes it: stories15M's text depends on its rounding */
            float freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
            if (factors)
                freq /= factors[i];
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
        if (r->halves) {
            for (int h = 0; h < n_heads; h++) {
                float *vh = vt + (size_t)h * hd;
                for (int i = 0; i < half; i++) {
                    float a = vh[i], b = vh[i + half];
                    vh[i] = a * c[i] - b * s[i];
                    vh[i + half] = a * s[i] + b * c[i];
                }
            }
            continue;
        }
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

int mi_spec_accept(const float *f, const float *z, int T, int d, double tol, double *worst)
{
    double w = 0;
    for (int t = 0; t < T; t++) {
        double ff = 0, zz = 0;
        for (int k = 0; k < d; k++) {
            double a = f[(size_t)t * d + k], b = z[(size_t)t * d + k];
            ff += a * a;
            zz += b * b;
        }
        double r = zz > 0 ? sqrt(ff / zz) : INFINITY;
        if (r > w)
            w = r;
    }
    *worst = w;
    return w < tol;
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
    mi_attention_ex(out, q, kc, vc, T, pos0, n_q, group, head_dim, seq_len, att, 1.0f / sqrtf((float)head_dim), 0);
}

void mi_attention_ex(float *out, const float *q, const float *kc, const float *vc, int T, int pos0, int n_q,
                     int group, int head_dim, int seq_len, float *att, float scale, int window)
{
    for (int t = 0; t < T; t++) {
        int pos = pos0 + t;
        for (int h = 0; h < n_q; h++) {
            const float *qh = q + ((size_t)t * n_q + h) * head_dim;
            const float *kh = kc + (size_t)(h / group) * seq_len * head_dim;
            const float *vh = vc + (size_t)(h / group) * seq_len * head_dim;
            /* scores = K[0..pos] q: the cache rows as an fp32 tensor, so the
             * SIMD family's row kernel computes them (a scalar loop here
             * took a sixth of stories15M's decode time) */
            /* a sliding window starts at p0: the keys before it are masked */
            int p0 = window > 0 && pos + 1 > window ? pos + 1 - window : 0, n = pos + 1 - p0;
            mi_tensor K = {MI_F32, n, head_dim, (void *)(kh + (size_t)p0 * head_dim), NULL};
            mi_matmul(att, qh, &K, 1);
            for (int p = 0; p < n; p++)
                att[p] *= scale;
            mi_softmax(att, n);
            float *oh = out + ((size_t)t * n_q + h) * head_dim;
            memset(oh, 0, (size_t)head_dim * sizeof(float));
            for (int p = 0; p < n; p++) {
                const float *v = vh + (size_t)(p0 + p) * head_dim;
                float a = att[p];
                for (int i = 0; i < head_dim; i++)
                    oh[i] += a * v[i];
            }
        }
    }
}

/* Mean and variance in double over the held columns: a device-local norm
 * sees few columns when much is pruned or lost, and the variance of
 * near-equal values cancels badly in float. With held NULL every column. */
void mi_layernorm_held(float *out, const float *x, const float *g, const float *b, int T, int dim, float eps,
                       const unsigned char *held)
{
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * dim;
        const unsigned char *ht = held ? held + (size_t)t * dim : NULL;
        float *ot = out + (size_t)t * dim;
        double sum = 0.0, ss = 0.0;
        int n = 0;
        for (int i = 0; i < dim; i++)
            if (!ht || ht[i]) {
                sum += xt[i];
                n++;
            }
        double mu = n > 0 ? sum / n : 0.0;
        for (int i = 0; i < dim; i++)
            if (!ht || ht[i])
                ss += ((double)xt[i] - mu) * ((double)xt[i] - mu);
        double s = n > 0 ? 1.0 / sqrt(ss / n + (double)eps) : 0.0;
        for (int i = 0; i < dim; i++)
            ot[i] = !ht || ht[i] ? (float)(((double)xt[i] - mu) * s) * g[i] + b[i] : 0.0f;
    }
}

void mi_gelu(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(0.5 * x[i] * (1.0 + erf(x[i] * 0.70710678118654752440)));
}

void mi_gelu_tanh(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        x[i] = (float)(0.5 * v * (1.0 + tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v))));
    }
}

void mi_geglu(float *h1, const float *h3, size_t n)
{
    mi_gelu_tanh(h1, n);
    for (size_t i = 0; i < n; i++)
        h1[i] *= h3[i];
}

void mi_add_bias(float *y, int ldy, const float *b, int T, int n)
{
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++)
            y[(size_t)t * ldy + i] += b[i];
}

void mi_swiglu(float *h1, const float *h3, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = h1[i];
        h1[i] = v / (1.0f + expf(-v)) * h3[i];
    }
}
