/* CUnit tests of the forward-pass kernels and the single-device forward:
 * decode kernel against a double-precision reference, bit-identity of row
 * subsets (what head-level partitioning relies on), sampler behaviour, a
 * naive independent forward pass (GQA) against mi_forward, and prefill
 * (sgemm) against token-by-token decoding within 1e-4; the GQA model in
 * q8_0 and q4_0 against the naive pass on its dequantized weights (within
 * the activations' int8 rounding) and with prefill equal to decode bit for bit.
 *
 * usage: test_forward [REAL_MODEL.h5]   (the stories15M model; optional) */
#define _POSIX_C_SOURCE 200809L
#include <CUnit/Basic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "meshinfer/common.h"
#include "meshinfer/forward.h"
#include "meshinfer/kernels.h"
#include "meshinfer/quantize.h"
#include "meshinfer/sampler.h"
#include "meshinfer/synth.h"

static const char *g_real_model = NULL;
static char g_tmpdir[4096];
static char g_gqa_path[4200], g_gqa_q8[4200], g_gqa_q4[4200];

static void fill_rand(float *p, size_t n, uint64_t seed)
{
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++)
        p[i] = 2.0f * mi_rand_f32(&st) - 1.0f;
}

static mi_tensor f32_tensor(float *W, int rows, int cols)
{
    mi_tensor t = {MI_F32, rows, cols, W, NULL};
    return t;
}

static void test_matvec_reference(void)
{
    /* odd sizes exercise the 4-row groups, the single-row tail and the masked column tail */
    const int sizes[][2] = {{1, 1}, {7, 13}, {64, 288}, {131, 77}, {288, 768}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int d = sizes[s][0], n = sizes[s][1];
        float *W = malloc((size_t)d * n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
        float *y = malloc((size_t)d * sizeof(float));
        fill_rand(W, (size_t)d * n, 11 + s);
        fill_rand(x, (size_t)n, 97 + s);
        mi_tensor t = f32_tensor(W, d, n);
        mi_matmul(y, x, &t, 1);
        for (int i = 0; i < d; i++) {
            double ref = 0.0;
            for (int j = 0; j < n; j++)
                ref += (double)W[(size_t)i * n + j] * x[j];
            CU_ASSERT(fabs(y[i] - ref) <= 1e-5 * (1.0 + sqrt((double)n)));
        }
        free(W);
        free(x);
        free(y);
    }
}

static void test_matvec_row_subsets_bit_identical(void)
{
    int d = 96, n = 288;
    float *W = malloc((size_t)d * n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
    float *full = malloc((size_t)d * sizeof(float)), *part = malloc((size_t)d * sizeof(float));
    fill_rand(W, (size_t)d * n, 5);
    fill_rand(x, (size_t)n, 6);
    mi_tensor t = f32_tensor(W, d, n);
    mi_matmul(full, x, &t, 1);
    /* every split of the rows into [a, b) must reproduce the same bits */
    int cuts[][2] = {{0, 1}, {1, 4}, {3, 50}, {17, 96}, {95, 96}, {48, 53}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        int a = cuts[c][0], b = cuts[c][1];
        mi_tensor v = mi_tensor_rows(&t, a, b - a);
        mi_matmul(part, x, &v, 1);
        CU_ASSERT_EQUAL(memcmp(part, full + a, (size_t)(b - a) * sizeof(float)), 0);
    }
    free(W);
    free(x);
    free(full);
    free(part);
}

static void test_sgemm_matches_matvec(void)
{
    int T = 9, n = 200, d = 70;
    float *W = malloc((size_t)d * n * sizeof(float)), *x = malloc((size_t)T * n * sizeof(float));
    float *Y = malloc((size_t)T * d * sizeof(float)), *y = malloc((size_t)d * sizeof(float));
    fill_rand(W, (size_t)d * n, 1);
    fill_rand(x, (size_t)T * n, 2);
    mi_tensor w = f32_tensor(W, d, n);
    mi_matmul(Y, x, &w, T);
    for (int t = 0; t < T; t++) {
        mi_matmul(y, x + (size_t)t * n, &w, 1);
        for (int i = 0; i < d; i++)
            CU_ASSERT(fabsf(Y[(size_t)t * d + i] - y[i]) < 1e-4f);
    }
    free(W);
    free(x);
    free(Y);
    free(y);
}

static void test_rmsnorm_softmax_rope(void)
{
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f}, o[4];
    mi_rmsnorm(o, x, w, 1, 4, 0.0f + 1e-12f);
    float rms = sqrtf((1 + 4 + 9 + 16) / 4.0f);
    CU_ASSERT_DOUBLE_EQUAL(o[0], 1 / rms, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(o[2], 2 * 3 / rms, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(o[3], 0.5 * 4 / rms, 1e-6);

    float s[3] = {0.0f, logf(2.0f), logf(5.0f)};
    mi_softmax(s, 3);
    CU_ASSERT_DOUBLE_EQUAL(s[0], 1.0 / 8, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(s[1], 2.0 / 8, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(s[2], 5.0 / 8, 1e-6);
    /* the maximum is subtracted before exp: a large last value (a max that skipped it would
     * take exp(199) to infinity and every value to NaN) */
    float big[3] = {0.0f, 1.0f, 200.0f};
    mi_softmax(big, 3);
    CU_ASSERT(isfinite(big[0]) && isfinite(big[1]));
    CU_ASSERT_DOUBLE_EQUAL(big[2], 1.0, 1e-6);
    float first[3] = {200.0f, 1.0f, 0.0f};
    mi_softmax(first, 3);
    CU_ASSERT_DOUBLE_EQUAL(first[0], 1.0, 1e-6);

    /* HeadSplit's speculation test: the ratio of norms, not its square, strictly under the
     * tolerance; the worst position decides */
    float z[2 * 4] = {1, 1, 1, 1, 2, 0, 0, 0}, fz[2 * 4] = {0.5f, 0.5f, 0.5f, 0.5f, 0.6f, 0, 0, 0};
    double worst;
    CU_ASSERT_EQUAL(mi_spec_accept(fz, z, 1, 4, 0.5, &worst), 0); /* exactly 0.5: recomputed */
    CU_ASSERT_DOUBLE_EQUAL(worst, 0.5, 1e-12);
    CU_ASSERT_EQUAL(mi_spec_accept(fz, z, 1, 4, 0.51, &worst), 1);
    CU_ASSERT_EQUAL(mi_spec_accept(fz, z, 2, 4, 0.4, &worst), 0); /* 0.5 and 0.3: 0.5 decides */
    CU_ASSERT_DOUBLE_EQUAL(worst, 0.5, 1e-12);
    float f6[4] = {0.6f, 0.6f, 0.6f, 0.6f}; /* ratio 0.6, its square 0.36 */
    CU_ASSERT_EQUAL(mi_spec_accept(f6, z, 1, 4, 0.5, &worst), 0);
    CU_ASSERT_DOUBLE_EQUAL(worst, 0.6, 1e-6);
    float zero[4] = {0, 0, 0, 0};
    CU_ASSERT_EQUAL(mi_spec_accept(f6, zero, 1, 4, 1e9, &worst), 0);
    CU_ASSERT(isinf(worst));

    /* RoPE: pair 0 rotates by pos radians, pair 1 by pos * theta^(-2/4) */
    mi_rope_table r;
    mi_rope_init(&r, 8, 4, 100.0f);
    float v[4] = {1, 0, 1, 0};
    mi_rope_apply(&r, v, 1, 3, 1);
    CU_ASSERT_DOUBLE_EQUAL(v[0], cos(3.0), 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(v[1], sin(3.0), 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(v[2], cos(0.3), 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(v[3], sin(0.3), 1e-5);
    mi_rope_free(&r);
}

static void test_sampler(void)
{
    float l[5] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
    CU_ASSERT_EQUAL(mi_argmax(l, 5), 1); /* lowest index wins ties */
    mi_sampler g;
    mi_sampler_init(&g, 5, 0.0f, 0.9f, 1);
    float l2[5];
    memcpy(l2, l, sizeof l);
    CU_ASSERT_EQUAL(mi_sample(&g, l2), 1);
    mi_sampler_free(&g);

    /* same seed => same sequence; top-p 0.5 over {0.6, 0.3, 0.1} can only give id 0 */
    int seq_a[50], seq_b[50];
    for (int rep = 0; rep < 2; rep++) {
        mi_sampler s;
        mi_sampler_init(&s, 3, 1.0f, 0.5f, 1234);
        for (int i = 0; i < 50; i++) {
            float p[3] = {logf(0.6f), logf(0.3f), logf(0.1f)};
            (rep ? seq_b : seq_a)[i] = mi_sample(&s, p);
        }
        mi_sampler_free(&s);
    }
    CU_ASSERT_EQUAL(memcmp(seq_a, seq_b, sizeof seq_a), 0);
    for (int i = 0; i < 50; i++)
        CU_ASSERT_EQUAL(seq_a[i], 0);

    /* plain temperature sampling visits all tokens with about the right frequencies */
    mi_sampler s;
    mi_sampler_init(&s, 3, 1.0f, 1.0f, 99);
    int counts[3] = {0};
    for (int i = 0; i < 20000; i++) {
        float p[3] = {logf(0.6f), logf(0.3f), logf(0.1f)};
        counts[mi_sample(&s, p)]++;
    }
    mi_sampler_free(&s);
    CU_ASSERT(abs(counts[0] - 12000) < 500);
    CU_ASSERT(abs(counts[1] - 6000) < 400);
    CU_ASSERT(abs(counts[2] - 2000) < 300);

    /* top-p 0.7 over {0.5, 0.3, 0.2}: the smallest set whose mass passes 0.7 is {0.5, 0.3},
     * renormalised (0.625, 0.375); 0.2 never (a cut at a smaller mass would drop 0.3 too) */
    mi_sampler_init(&s, 3, 1.0f, 0.7f, 5);
    int nuc[3] = {0};
    for (int i = 0; i < 20000; i++) {
        float p[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
        nuc[mi_sample(&s, p)]++;
    }
    mi_sampler_free(&s);
    CU_ASSERT(abs(nuc[0] - 12500) < 500);
    CU_ASSERT(abs(nuc[1] - 7500) < 500);
    CU_ASSERT_EQUAL(nuc[2], 0);
}

/* ---- naive double-precision forward pass, written independently of forward.c ---- */
/* Element (r, c) of a weight tensor of any dtype, decoded here from the
 * formats' definitions (tensor.h), independently of mi_dequantize_row. */
static double wel(const mi_tensor *t, size_t r, size_t c)
{
    size_t n = (size_t)t->cols;
    switch (t->dtype) {
    case MI_F32: return ((const float *)t->q)[r * n + c];
    case MI_F16: return mi_f32_from_fp16(((const uint16_t *)t->q)[r * n + c]);
    case MI_Q8_0: return mi_f32_from_fp16(t->d[r * (n / 32) + c / 32]) * ((const int8_t *)t->q)[r * n + c];
    default: {
        unsigned char byte = ((const unsigned char *)t->q)[r * (n / 2) + (c / 32) * 16 + (c % 16)];
        int nib = (c % 32) < 16 ? (byte & 15) : (byte >> 4);
        return mi_f32_from_fp16(t->d[r * (n / 32) + c / 32]) * (nib - 8);
    }
    }
}

static void naive_forward(const mi_model *m, const int *tokens, int n, double *logits /* [n][V] */)
{
    const mi_config *c = &m->cfg;
    int d = c->dim, hd = c->head_dim, H = c->n_heads, KV = c->n_kv_heads, g = H / KV, F = c->hidden_dim;
    int kvd = KV * hd, V = c->vocab_size;
    double *kc = calloc((size_t)c->n_layers * n * kvd, sizeof(double));
    double *vc = calloc((size_t)c->n_layers * n * kvd, sizeof(double));
    double *x = malloc(d * sizeof(double)), *xn = malloc(d * sizeof(double)), *q = malloc(d * sizeof(double));
    double *att = malloc(d * sizeof(double)), *h1 = malloc(F * sizeof(double)), *sc = malloc(n * sizeof(double));
    for (int pos = 0; pos < n; pos++) {
        for (int i = 0; i < d; i++)
            x[i] = wel(&m->tok_embeddings, (size_t)tokens[pos], (size_t)i);
        for (int l = 0; l < c->n_layers; l++) {
            const mi_layer *L = &m->layers[l];
            double ss = 0;
            for (int i = 0; i < d; i++)
                ss += x[i] * x[i];
            double r = 1.0 / sqrt(ss / d + c->norm_eps);
            for (int i = 0; i < d; i++)
                xn[i] = x[i] * r * L->attention_norm[i];
            double *kl = kc + ((size_t)l * n + pos) * kvd, *vl = vc + ((size_t)l * n + pos) * kvd;
            for (int o = 0; o < d; o++) {
                q[o] = 0;
                for (int i = 0; i < d; i++)
                    q[o] += wel(&L->wq, (size_t)o, (size_t)i) * xn[i];
            }
            for (int o = 0; o < kvd; o++) {
                kl[o] = vl[o] = 0;
                for (int i = 0; i < d; i++) {
                    kl[o] += wel(&L->wk, (size_t)o, (size_t)i) * xn[i];
                    vl[o] += wel(&L->wv, (size_t)o, (size_t)i) * xn[i];
                }
            }
            for (int o = 0; o < d; o += 2) {
                int i = (o % hd) / 2;
                double ang = pos * pow(c->rope_theta, -2.0 * i / hd);
                double a = q[o], b = q[o + 1];
                q[o] = a * cos(ang) - b * sin(ang);
                q[o + 1] = a * sin(ang) + b * cos(ang);
                if (o < kvd) {
                    a = kl[o];
                    b = kl[o + 1];
                    kl[o] = a * cos(ang) - b * sin(ang);
                    kl[o + 1] = a * sin(ang) + b * cos(ang);
                }
            }
            for (int h = 0; h < H; h++) {
                int kvh = h / g;
                double mx = -1e300, sum = 0;
                for (int p = 0; p <= pos; p++) {
                    const double *k = kc + ((size_t)l * n + p) * kvd + kvh * hd;
                    double s = 0;
                    for (int i = 0; i < hd; i++)
                        s += q[h * hd + i] * k[i];
                    sc[p] = s / sqrt((double)hd);
                    if (sc[p] > mx)
                        mx = sc[p];
                }
                for (int p = 0; p <= pos; p++)
                    sum += (sc[p] = exp(sc[p] - mx));
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int p = 0; p <= pos; p++)
                        a += sc[p] / sum * vc[((size_t)l * n + p) * kvd + kvh * hd + i];
                    att[h * hd + i] = a;
                }
            }
            for (int o = 0; o < d; o++) {
                double a = 0;
                for (int i = 0; i < d; i++)
                    a += wel(&L->wo, (size_t)o, (size_t)i) * att[i];
                x[o] += a;
            }
            ss = 0;
            for (int i = 0; i < d; i++)
                ss += x[i] * x[i];
            r = 1.0 / sqrt(ss / d + c->norm_eps);
            for (int i = 0; i < d; i++)
                xn[i] = x[i] * r * L->ffn_norm[i];
            for (int f = 0; f < F; f++) {
                double a = 0, b = 0;
                for (int i = 0; i < d; i++) {
                    a += wel(&L->w1, (size_t)f, (size_t)i) * xn[i];
                    b += wel(&L->w3, (size_t)f, (size_t)i) * xn[i];
                }
                h1[f] = a / (1 + exp(-a)) * b;
            }
            for (int o = 0; o < d; o++) {
                double a = 0;
                for (int f = 0; f < F; f++)
                    a += wel(&L->w2, (size_t)o, (size_t)f) * h1[f];
                x[o] += a;
            }
        }
        double ss = 0;
        for (int i = 0; i < d; i++)
            ss += x[i] * x[i];
        double r = 1.0 / sqrt(ss / d + c->norm_eps);
        for (int v = 0; v < V; v++) {
            double a = 0;
            for (int i = 0; i < d; i++)
                a += wel(&m->classifier, (size_t)v, (size_t)i) * x[i] * r * m->norm[i];
            logits[(size_t)pos * V + v] = a;
        }
    }
    free(kc); free(vc); free(x); free(xn); free(q); free(att); free(h1); free(sc);
}

/* tol: relative to the largest logit. fp32 weights: 1e-4. Block dtypes:
 * the kernels round each activation to int8 per block of 32 (the naive
 * reference keeps them exact), an error of up to half a step of 1/127 of the
 * block's largest value per activation, which the layers carry on. */
static void check_against_naive(const char *path, int n, double tol)
{
    mi_model m;
    mi_model_load_path(&m, path, NULL);
    const mi_config *c = &m.cfg;
    int *tok = malloc(n * sizeof(int));
    uint64_t st = 77;
    for (int i = 0; i < n; i++)
        tok[i] = i == 0 ? MI_TOK_BOS : (int)(mi_rand_f32(&st) * (c->vocab_size - 3)) + 3;
    double *ref = malloc((size_t)n * c->vocab_size * sizeof(double));
    naive_forward(&m, tok, n, ref);
    mi_scratch s;
    mi_scratch_init(&s, c, 1);
    double worst = 0, scale = 0;
    for (int pos = 0; pos < n; pos++) {
        float *lg = mi_forward(&m, &s, &tok[pos], 1, pos, 0);
        for (int v = 0; v < c->vocab_size; v++) {
            double r = ref[(size_t)pos * c->vocab_size + v], e = fabs(lg[v] - r);
            if (e > worst)
                worst = e;
            if (fabs(r) > scale)
                scale = fabs(r);
        }
    }
    printf("\n    %s: max |logit - naive double reference| over %d positions = %.2e (max |logit| %.2e) ", path,
           n, worst, scale);
    /* relative: synthetic weights give small logits, where an absolute bound would be loose */
    CU_ASSERT(scale > 0 && worst <= tol * scale);
    mi_scratch_free(&s);
    mi_model_free(&m);
    free(ref);
    free(tok);
}

static void test_gqa_forward_matches_naive(void) { check_against_naive(g_gqa_path, 12, 1e-4); }
static void test_gqa_q8_forward_matches_naive(void) { check_against_naive(g_gqa_q8, 12, 0.02); }
static void test_gqa_q4_forward_matches_naive(void) { check_against_naive(g_gqa_q4, 12, 0.02); }

static void test_real_forward_matches_naive(void)
{
    if (!g_real_model) {
        CU_FAIL("no real model path given");
        return;
    }
    check_against_naive(g_real_model, 6, 1e-4);
}

/* Prefill (sgemm, chunked) and decode (matvec, one token at a time) of the same
 * tokens give the same logits within 1e-4 at every position. */
static void check_prefill_vs_decode(const char *path, int n, int chunk, double tol)
{
    mi_model m;
    mi_model_load_path(&m, path, NULL);
    const mi_config *c = &m.cfg;
    int *tok = malloc(n * sizeof(int));
    uint64_t st = 5;
    for (int i = 0; i < n; i++)
        tok[i] = i == 0 ? MI_TOK_BOS : (int)(mi_rand_f32(&st) * (c->vocab_size - 3)) + 3;
    mi_scratch big, one;
    mi_scratch_init(&big, c, chunk);
    mi_scratch_init(&one, c, 1);
    float *pre = malloc((size_t)n * c->vocab_size * sizeof(float));
    for (int i = 0; i < n; i += chunk) {
        int T = n - i < chunk ? n - i : chunk;
        float *lg = mi_forward(&m, &big, tok + i, T, i, 1);
        memcpy(pre + (size_t)i * c->vocab_size, lg, (size_t)T * c->vocab_size * sizeof(float));
    }
    mi_model_reset(&m);
    double worst = 0;
    for (int pos = 0; pos < n; pos++) {
        float *lg = mi_forward(&m, &one, &tok[pos], 1, pos, 0);
        for (int v = 0; v < c->vocab_size; v++) {
            double e = fabs(lg[v] - pre[(size_t)pos * c->vocab_size + v]);
            if (e > worst)
                worst = e;
        }
    }
    printf("\n    %s: max |prefill - decode| logit over %d positions (chunk %d) = %.2e ", path, n, chunk, worst);
    CU_ASSERT(worst <= tol);
    free(pre);
    free(tok);
    mi_scratch_free(&big);
    mi_scratch_free(&one);
    mi_model_free(&m);
}

static void test_gqa_prefill_vs_decode(void) { check_prefill_vs_decode(g_gqa_path, 40, 16, 1e-4); }
/* block dtypes run the same row kernel for every prefill position: exact */
static void test_gqa_q8_prefill_vs_decode(void) { check_prefill_vs_decode(g_gqa_q8, 40, 16, 0.0); }
static void test_gqa_q4_prefill_vs_decode(void) { check_prefill_vs_decode(g_gqa_q4, 40, 16, 0.0); }

static void test_real_prefill_vs_decode(void)
{
    if (!g_real_model) {
        CU_FAIL("no real model path given");
        return;
    }
    check_prefill_vs_decode(g_real_model, 64, 24, 1e-4);
}

/* Threads split a product's rows and every row is computed the same way, so
 * decode logits with 2 threads equal those with 1 bit for bit. */
static void test_real_threads_bit_identical(void)
{
    if (!g_real_model) {
        CU_FAIL("no real model path given");
        return;
    }
    mi_model m;
    mi_model_load_path(&m, g_real_model, NULL);
    const mi_config *c = &m.cfg;
    mi_scratch s;
    mi_scratch_init(&s, c, 1);
    int tok[8] = {1, 9038, 2501, 263, 931, 29892, 727, 471};
    size_t V = (size_t)c->vocab_size;
    float *one = malloc(8 * V * sizeof(float));
    int same = 1;
    for (int pass = 0; pass < 2; pass++) {
        mi_set_threads(pass ? 2 : 1);
        mi_model_reset(&m);
        for (int p = 0; p < 8; p++) {
            float *lg = mi_forward(&m, &s, &tok[p], 1, p, 0);
            if (pass == 0)
                memcpy(one + p * V, lg, V * sizeof(float));
            else
                same &= memcmp(one + p * V, lg, V * sizeof(float)) == 0;
        }
    }
    mi_set_threads(1);
    CU_ASSERT(same);
    free(one);
    mi_scratch_free(&s);
    mi_model_free(&m);
}

int main(int argc, char **argv)
{
    g_real_model = argc > 1 ? argv[1] : NULL;
    mi_set_threads(1);
    if (tu_make_scratch(g_tmpdir, sizeof g_tmpdir, "test_forward"))
        return 1;
    snprintf(g_gqa_path, sizeof g_gqa_path, "%s/tiny-gqa.h5", g_tmpdir);
    mi_config c;
    mi_config_from_shape("tiny-gqa", &c);
    char err[MI_ERRLEN];
    snprintf(g_gqa_q8, sizeof g_gqa_q8, "%s/tiny-gqa-q8_0.h5", g_tmpdir);
    snprintf(g_gqa_q4, sizeof g_gqa_q4, "%s/tiny-gqa-q4_0.h5", g_tmpdir);
    mi_config c8 = c, c4 = c;
    if (mi_synth_write(&c, 3, g_gqa_path, 0, err) || mi_dtypes_apply(&c8, "q8_0", NULL, NULL, err) ||
        mi_synth_write(&c8, 3, g_gqa_q8, 0, err) || mi_dtypes_apply(&c4, "q4_0", NULL, NULL, err) ||
        mi_synth_write(&c4, 3, g_gqa_q4, 0, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite k = CU_add_suite("kernels", NULL, NULL);
    CU_add_test(k, "matvec vs double reference", test_matvec_reference);
    CU_add_test(k, "matvec row subsets bit-identical", test_matvec_row_subsets_bit_identical);
    CU_add_test(k, "sgemm prefill path vs matvec", test_sgemm_matches_matvec);
    CU_add_test(k, "rmsnorm, softmax, rope values", test_rmsnorm_softmax_rope);
    CU_add_test(k, "sampler", test_sampler);
    CU_pSuite f = CU_add_suite("forward", NULL, NULL);
    CU_add_test(f, "GQA synthetic model vs naive reference", test_gqa_forward_matches_naive);
    CU_add_test(f, "GQA prefill vs decode logits", test_gqa_prefill_vs_decode);
    CU_add_test(f, "GQA q8_0 vs naive reference on its dequantized weights", test_gqa_q8_forward_matches_naive);
    CU_add_test(f, "GQA q4_0 vs naive reference on its dequantized weights", test_gqa_q4_forward_matches_naive);
    CU_add_test(f, "GQA q8_0 prefill equals decode bit for bit", test_gqa_q8_prefill_vs_decode);
    CU_add_test(f, "GQA q4_0 prefill equals decode bit for bit", test_gqa_q4_prefill_vs_decode);
    if (g_real_model) {
        CU_add_test(f, "stories15M vs naive reference", test_real_forward_matches_naive);
        CU_add_test(f, "stories15M prefill vs decode logits", test_real_prefill_vs_decode);
        CU_add_test(f, "stories15M decode with 2 threads equals 1 thread bit for bit", test_real_threads_bit_identical);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    unlink(g_gqa_path);
    unlink(g_gqa_q8);
    unlink(g_gqa_q4);
    rmdir(g_tmpdir);
    return fails != 0;
}
