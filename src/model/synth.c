/* Synthetic model generation (see synth.h). */
#include "meshinfer/synth.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/model_file.h"
#include "meshinfer/sampler.h"

int mi_tokenizer_synthetic(mi_tokenizer *t, int vocab_size, char *err)
{
    char **pieces = mi_calloc((size_t)vocab_size, sizeof(char *), "synthetic vocabulary");
    int *lens = mi_calloc((size_t)vocab_size, sizeof(int), "synthetic vocabulary");
    float *scores = mi_calloc((size_t)vocab_size, sizeof(float), "synthetic vocabulary");
    static const char *special[3] = {"<unk>", "\n<s>\n", "\n</s>\n"};
    for (int i = 0; i < vocab_size; i++) {
        char buf[32];
        int n;
        if (i < 3) {
            n = snprintf(buf, sizeof buf, "%s", special[i]);
        } else if (i < MI_TOK_FIRST_PIECE) {
            buf[0] = (char)(i - MI_TOK_BYTE0);
            n = 1;
        } else {
            /* distinct lowercase pieces; odd ones start with a space */
            int k = i - MI_TOK_FIRST_PIECE, v = k / 2;
            n = 0;
            if (k % 2)
                buf[n++] = ' ';
            do {
                buf[n++] = (char)('a' + v % 26);
                v /= 26;
            } while (v > 0);
            buf[n] = '\0';
            scores[i] = -(float)k;
        }
        pieces[i] = mi_malloc((size_t)n + 1, "synthetic piece");
        memcpy(pieces[i], buf, (size_t)n);
        pieces[i][n] = '\0';
        lens[i] = n;
    }
    int rc = mi_tokenizer_init(t, vocab_size, (const char *const *)pieces, lens, scores, err);
    for (int i = 0; i < vocab_size; i++)
        free(pieces[i]);
    free(pieces);
    free(lens);
    free(scores);
    return rc;
}

static uint64_t name_seed(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h ? h : 1;
}

static void fill(float *p, size_t n, uint64_t seed, const char *name, int is_norm)
{
    if (is_norm) {
        for (size_t i = 0; i < n; i++)
            p[i] = 1.0f;
        return;
    }
    uint64_t st = name_seed(seed, name);
    const float a = 0.02f * 1.7320508f; /* uniform(-a, a) has std 0.02 */
    for (size_t i = 0; i < n; i++)
        p[i] = (2.0f * mi_rand_f32(&st) - 1.0f) * a;
}

/* uniform(center - a, center + a), seeded by the tensor name */
static void fill_uniform(float *p, size_t n, uint64_t seed, const char *name, float center, float a)
{
    uint64_t st = name_seed(seed, name);
    for (size_t i = 0; i < n; i++)
        p[i] = center + (2.0f * mi_rand_f32(&st) - 1.0f) * a;
}

/* The time-series family (docs/patchtst.md): PyTorch's default Linear
 * scale (bound 1/sqrt(fan_in)) for matrices and biases, gains near 1, so
 * that every block changes the forecast and a test comparing two
 * implementations sees every term. */
static int synth_series(mi_model_writer *w, const mi_config *c, uint64_t seed, char *err)
{
    size_t d = (size_t)c->dim, hid = (size_t)c->hidden_dim, N = (size_t)c->seq_len, P = (size_t)c->patch_len;
    size_t H = (size_t)c->horizon;
    float *buf = mi_malloc(H * N * d * sizeof(float) + hid * d * sizeof(float), "synthetic tensor");
    int rc = 0;
    struct { int layer; const char *t; size_t rows, cols, fan_in; float center; int tr; } ts[] = {
        {-1, "patch_embed", d, P, P, 0, 0},     {-1, "patch_embed_b", d, 1, P, 0, 0},
        {-1, "pos_embed", N, d, 4, 0, 0},       {-1, "head", H, N * d, N * d, 0, 0},
        {-1, "head_b", H, 1, N * d, 0, 0},      {0, "attention_norm", d, 1, 100, 1, 0},
        {0, "attention_norm_b", d, 1, 100, 0, 0}, {0, "wq", d, d, d, 0, 0},
        {0, "wk", d, d, d, 0, 0},               {0, "wv", d, d, d, 0, 0},
        {0, "wq_b", d, 1, d, 0, 0},             {0, "wk_b", d, 1, d, 0, 0},
        {0, "wv_b", d, 1, d, 0, 0},             {0, "wo_t", d, d, d, 0, 1},
        {0, "wo_b", d, 1, d, 0, 0},             {0, "ffn_norm", d, 1, 100, 1, 0},
        {0, "ffn_norm_b", d, 1, 100, 0, 0},     {0, "w1", hid, d, d, 0, 0},
        {0, "w1_b", hid, 1, d, 0, 0},           {0, "w2_t", d, hid, hid, 0, 1},
        {0, "w2_b", d, 1, hid, 0, 0},
    };
    for (int l = -1; l < c->n_layers && !rc; l++)
        for (size_t i = 0; i < sizeof ts / sizeof ts[0] && !rc; i++) {
            if ((ts[i].layer < 0) != (l < 0))
                continue;
            char nm[128];
            if (l < 0)
                snprintf(nm, sizeof nm, "%s", ts[i].t);
            else
                mi_model_layer_name(nm, sizeof nm, l, ts[i].t);
            fill_uniform(buf, ts[i].rows * ts[i].cols, seed, nm, ts[i].center, 1.0f / sqrtf((float)ts[i].fan_in));
            rc = mi_model_writer_put_tensor(w, nm, MI_F32, buf, ts[i].rows, ts[i].cols, ts[i].tr, err);
        }
    free(buf);
    return rc;
}

/* The vectors a family's traits add (model_file.h, version 4) of layer l
 * (-1: the model's own; mi_config_trait_tensors lists them): norms near 1
 * and biases near 0, varied so that a test comparing implementations sees
 * each; Llama 3's RoPE factors. buf holds seq_len * dim floats. */
static int synth_traits(mi_model_writer *w, const mi_config *c, int l, uint64_t seed, float *buf, char *err)
{
    const char *names[MI_MAX_TRAIT_TENSORS];
    size_t rows[MI_MAX_TRAIT_TENSORS], cols[MI_MAX_TRAIT_TENSORS];
    int n = mi_config_trait_tensors(c, l, names, rows, cols);
    char nm[128];
    for (int i = 0; i < n; i++) {
        const char *t = names[i];
        if (l < 0)
            snprintf(nm, sizeof nm, "%s", t);
        else
            mi_model_layer_name(nm, sizeof nm, l, t);
        if (!strcmp(t, "rope_freqs")) /* Llama 3.x's published scaling */
            mi_rope_llama3_factors(c->head_dim, c->rope_theta, 32.0f, 1.0f, 4.0f, 8192, buf);
        else if (strstr(t, "norm") && !strstr(t, "_b")) /* a norm's weights */
            fill_uniform(buf, rows[i] * cols[i], seed, nm, 1.0f, 0.2f);
        else if (!strcmp(t, "pos_embed"))
            fill_uniform(buf, rows[i] * cols[i], seed, nm, 0.0f, 0.03f);
        else /* biases, the output projections' smaller */
            fill_uniform(buf, rows[i] * cols[i], seed, nm, 0.0f,
                         !strcmp(t, "wo_b") || !strcmp(t, "w1_b") || !strcmp(t, "w2_b") ? 0.02f : 0.05f);
        if (mi_model_writer_put_tensor(w, nm, MI_F32, buf, rows[i], cols[i], 0, err))
            return -1;
    }
    return 0;
}

/* A mixture of experts' FFN of layer l (model_file.h): the router (float32, as llama.cpp keeps it), the
 * stacked experts in the layer's w1, w3, w2 dtypes, the shared expert in them too; each
 * stack filled and written in one piece (buf is freed and taken anew at the stacks' size). */
static int synth_moe(mi_model_writer *w, const mi_config *c, int l, uint64_t seed, char *err)
{
    size_t d = (size_t)c->dim, h = (size_t)c->hidden_dim, E = (size_t)c->n_experts, sh = (size_t)c->shared_hidden_dim;
    const unsigned char *dt = c->dtype[l], *mt = c->moe_dtype[l];
    /* as the dense w2_t: the shared expert's w2 [dim, sh] in the product's orientation, written transposed */
    struct { const char *t; int dtype; size_t rows, cols; int norm, tr; } ts[] = {
        {"ffn_norm", MI_F32, d, 1, 1, 0},           {"router", mt[MI_MOE_ROUTER], E, d, 0, 0},
        {"experts_w1", dt[MI_W1], E * h, d, 0, 0},  {"experts_w3", dt[MI_W3], E * h, d, 0, 0},
        {"experts_w2", dt[MI_W2], E * d, h, 0, 0},  {"shared_w1", mt[MI_MOE_SW1], sh, d, 0, 0},
        {"shared_w3", mt[MI_MOE_SW3], sh, d, 0, 0}, {"shared_w2_t", mt[MI_MOE_SW2], d, sh, 0, 1},
    }; /* the shared expert's gate is a trait vector (synth_traits) */
    int rc = 0;
    for (size_t i = 0; i < sizeof ts / sizeof ts[0] && !rc; i++) {
        if (sh == 0 && i >= 5)
            break;
        char nm[128];
        mi_model_layer_name(nm, sizeof nm, l, ts[i].t);
        float *buf = mi_malloc(ts[i].rows * ts[i].cols * sizeof(float), "synthetic experts");
        fill(buf, ts[i].rows * ts[i].cols, seed, nm, ts[i].norm);
        rc = mi_model_writer_put_tensor(w, nm, ts[i].dtype, buf, ts[i].rows, ts[i].cols, ts[i].tr, err);
        free(buf);
    }
    return rc;
}

int mi_synth_write(const mi_config *cfg, uint64_t seed, const char *path, int progress, char *err)
{
    mi_config moe = *cfg; /* a mixture of experts: the router float32, the shared expert in w1/w2/w3's dtypes */
    for (int l = 0; l < moe.n_layers && mi_config_is_moe(&moe); l++) {
        moe.moe_dtype[l][MI_MOE_ROUTER] = MI_F32;
        moe.moe_dtype[l][MI_MOE_SW1] = moe.dtype[l][MI_W1];
        moe.moe_dtype[l][MI_MOE_SW2] = moe.dtype[l][MI_W2];
        moe.moe_dtype[l][MI_MOE_SW3] = moe.dtype[l][MI_W3];
    }
    const mi_config *c = &moe;
    mi_model_writer *w = mi_model_writer_create(path, c, err);
    if (!w)
        return -1;
    if (c->family == MI_FAMILY_PATCHTST) {
        if (synth_series(w, c, seed, err)) {
            mi_model_writer_abort(w);
            return -1;
        }
        return mi_model_writer_commit(w, err);
    }
    size_t d = (size_t)c->dim, V = (size_t)c->vocab_size, kv = (size_t)mi_kv_dim(c), hid = (size_t)c->hidden_dim;
    size_t q = (size_t)c->n_heads * (size_t)c->head_dim;
    size_t biggest = V * d > hid * d ? V * d : hid * d;
    if (biggest < (size_t)c->seq_len * d) /* learned positions */
        biggest = (size_t)c->seq_len * d;
    if (biggest < q * d)
        biggest = q * d;
    float *buf = mi_malloc(biggest * sizeof(float), "synthetic tensor");
    int rc = 0;
    /* each tensor in the product's orientation; wo and w2 are written
     * transposed (transposing seeded noise is still seeded noise, and the
     * block dtypes then lie along the right axis) */
#define PUT(nm, dt, rows, cols, norm, tr)                                        \
    if (!rc) {                                                                   \
        fill(buf, (size_t)(rows) * (cols), seed, nm, norm);                      \
        rc = mi_model_writer_put_tensor(w, nm, (dt), buf, rows, cols, tr, err);  \
    }
    PUT("tok_embeddings", c->emb_dtype, V, d, 0, 0);
    PUT("norm", MI_F32, d, 1, 1, 0);
    if (!rc)
        rc = synth_traits(w, c, -1, seed, buf, err);
    if (!c->shared_classifier)
        PUT("classifier", c->cls_dtype, V, d, 0, 0);
    for (int l = 0; l < c->n_layers && !rc; l++) {
        char nm[128];
        const unsigned char *dt = c->dtype[l];
        struct { const char *t; int dtype; size_t rows, cols; int norm, tr; } ts[] = {
            {"attention_norm", MI_F32, d, 1, 1, 0}, {"wq", dt[MI_WQ], q, d, 0, 0},
            {"wk", dt[MI_WK], kv, d, 0, 0},         {"wv", dt[MI_WV], kv, d, 0, 0},
            {"wo_t", dt[MI_WO], d, q, 0, 1},        {"ffn_norm", MI_F32, d, 1, 1, 0},
            {"w1", dt[MI_W1], hid, d, 0, 0},        {"w3", dt[MI_W3], hid, d, 0, 0},
            {"w2_t", dt[MI_W2], d, hid, 0, 1},
        };
        int gated = c->ffn_type == MI_FFNK_SWIGLU || c->ffn_type == MI_FFNK_GEGLU;
        size_t n_ts = mi_config_is_moe(c) ? 5 : sizeof ts / sizeof ts[0]; /* the experts: synth_moe */
        for (size_t i = 0; i < n_ts; i++) {
            if (!gated && strcmp(ts[i].t, "w3") == 0)
                continue;
            mi_model_layer_name(nm, sizeof nm, l, ts[i].t);
            PUT(nm, ts[i].dtype, ts[i].rows, ts[i].cols, ts[i].norm, ts[i].tr);
        }
        if (!rc && mi_config_is_moe(c))
            rc = synth_moe(w, c, l, seed, err);
        if (!rc)
            rc = synth_traits(w, c, l, seed, buf, err);
        if (progress == 2)
            fprintf(stderr, "\rsynth: layer %d/%d written", l + 1, c->n_layers);
        else if (progress && ((l + 1) % ((c->n_layers + 3) / 4) == 0 || l + 1 == c->n_layers))
            fprintf(stderr, "synth: layer %d/%d written\n", l + 1, c->n_layers);
    }
#undef PUT
    if (progress == 2)
        fputc('\n', stderr);
    free(buf);
    mi_tokenizer tok;
    if (!rc) {
        rc = mi_tokenizer_synthetic(&tok, c->vocab_size, err);
        if (!rc) {
            rc = mi_model_writer_put_tokenizer(w, &tok, err);
            mi_tokenizer_free(&tok);
        }
    }
    if (rc) {
        mi_model_writer_abort(w);
        return -1;
    }
    return mi_model_writer_commit(w, err);
}
