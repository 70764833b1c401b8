/* Loading a model, or one device's shard of it (see model.h). */
#include "meshinfer/model.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

static int file_fetch(void *ctx, const char *name, size_t row0, size_t nrows, size_t row_len, float *out,
                      char *err)
{
    (void)row_len;
    return mi_model_read_rows((mi_model_file *)ctx, name, row0, nrows, out, err);
}

mi_weight_source mi_weight_source_file(mi_model_file *mf)
{
    mi_weight_source s = {file_fetch, mf, 0};
    return s;
}

mi_layer_spec mi_layer_spec_full(const mi_config *c)
{
    mi_layer_spec s;
    memset(&s, 0, sizeof s);
    s.n_kv = c->n_kv_heads;
    for (int k = 0; k < c->n_kv_heads && k < MI_MAX_KV_HEADS; k++)
        s.kv[k] = (unsigned char)k;
    s.proj = MI_PROJ_FULL;
    s.f0 = 0;
    s.nf = c->hidden_dim;
    return s;
}

mi_shard_spec mi_shard_spec_full(const mi_config *c, mi_layer_spec *layers)
{
    for (int l = 0; l < c->n_layers; l++)
        layers[l] = mi_layer_spec_full(c);
    mi_shard_spec s = {layers, 1, 0, c->vocab_size};
    return s;
}

size_t mi_shard_weight_bytes(const mi_config *c, const mi_shard_spec *spec)
{
    size_t d = (size_t)c->dim, hd = (size_t)c->head_dim, g = (size_t)mi_kv_group(c), n = 0;
    if (spec->embeddings)
        n += (size_t)c->vocab_size * d;
    if (spec->embeddings || spec->cls_nv > 0)
        n += d;
    if (spec->cls_nv > 0 && !(spec->embeddings && c->shared_classifier))
        n += (size_t)spec->cls_nv * d;
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_spec *s = &spec->layers[l];
        if (s->n_kv > 0)
            n += d + (size_t)s->n_kv * (g * hd * d + 2 * hd * d);
        if (s->proj == MI_PROJ_FULL)
            n += d * (size_t)c->n_heads * hd;
        else if (s->proj == MI_PROJ_HEADS)
            n += d * (size_t)s->n_kv * g * hd;
        if (s->nf > 0)
            n += d + 3 * (size_t)s->nf * d;
    }
    return n * sizeof(float);
}

size_t mi_shard_kv_bytes(const mi_config *c, const mi_shard_spec *spec)
{
    size_t n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += (size_t)spec->layers[l].n_kv;
    return 2 * n * (size_t)c->seq_len * (size_t)c->head_dim * sizeof(float);
}

typedef struct {
    mi_model *m;
    const mi_weight_source *src;
    int rc;
    char *err;
} loader;

/* Fetch `n_ranges` row ranges of one stored tensor, stacked in one buffer. */
static float *fetch_ranges(loader *ld, int layer, const char *t, const size_t *row0, size_t rows_each,
                           int n_ranges, size_t row_len)
{
    if (ld->rc || n_ranges == 0 || rows_each == 0)
        return NULL;
    char name[128];
    if (layer >= 0)
        mi_model_layer_name(name, sizeof name, layer, t);
    else
        snprintf(name, sizeof name, "%s", t);
    size_t piece = rows_each * row_len;
    float *p = mi_malloc((size_t)n_ranges * piece * sizeof(float), name);
    for (int i = 0; i < n_ranges && !ld->rc; i++)
        if (ld->src->fetch(ld->src->ctx, name, row0[i], rows_each, row_len, p + (size_t)i * piece, ld->err))
            ld->rc = -1;
    if (ld->rc || ld->src->discard) {
        free(p);
        return NULL;
    }
    ld->m->weight_bytes += (size_t)n_ranges * piece * sizeof(float);
    return p;
}

static float *fetch_rows(loader *ld, int layer, const char *t, size_t row0, size_t nrows, size_t row_len)
{
    return fetch_ranges(ld, layer, t, &row0, nrows, 1, row_len);
}

/* [rows, cols] -> [cols, rows]; frees the input. */
static float *transpose(float *a, size_t rows, size_t cols)
{
    if (!a)
        return NULL;
    float *t = mi_malloc(rows * cols * sizeof(float), "transposed weights");
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            t[j * rows + i] = a[i * cols + j];
    free(a);
    return t;
}

int mi_model_load(mi_model *m, const mi_weight_source *src, const mi_config *c, const mi_shard_spec *spec,
                  char *err)
{
    /* Devices are memory-bound: give every weight block (and transpose
     * staging) its own mapping, returned to the system on free, instead of
     * glibc's adaptive threshold keeping freed blocks in the heap. */
    mallopt(M_MMAP_THRESHOLD, 32 * 1024);
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->layers = mi_calloc((size_t)c->n_layers, sizeof(mi_layer), "layer table");
    size_t d = (size_t)c->dim, hd = (size_t)c->head_dim, g = (size_t)mi_kv_group(c);
    size_t V = (size_t)c->vocab_size;
    loader ld = {m, src, 0, err};
    if (spec->cls_v0 < 0 || spec->cls_nv < 0 || (size_t)(spec->cls_v0 + spec->cls_nv) > V) {
        mi_model_free(m);
        return mi_set_error(err, "classifier rows [%d, %d) are outside the vocabulary of %zu", spec->cls_v0,
                            spec->cls_v0 + spec->cls_nv, V);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_spec *s = &spec->layers[l];
        int bad = s->n_kv < 0 || s->n_kv > c->n_kv_heads || s->f0 < 0 || s->nf < 0 ||
                  s->f0 + s->nf > c->hidden_dim || s->proj < MI_PROJ_NONE || s->proj > MI_PROJ_HEADS ||
                  (s->proj == MI_PROJ_HEADS && s->n_kv == 0);
        for (int i = 0; i < s->n_kv && !bad; i++)
            bad = s->kv[i] >= c->n_kv_heads || (i > 0 && s->kv[i] <= s->kv[i - 1]);
        if (bad) {
            mi_model_free(m);
            return mi_set_error(err, "layer %d: shard ranges are outside the model", l);
        }
    }
    m->has_embeddings = spec->embeddings;
    m->cls_v0 = spec->cls_v0;
    m->cls_nv = spec->cls_nv;
    if (spec->embeddings)
        m->tok_embeddings = fetch_rows(&ld, -1, "tok_embeddings", 0, V, d);
    if (spec->embeddings || spec->cls_nv > 0)
        m->norm = fetch_rows(&ld, -1, "norm", 0, d, 1);
    if (spec->cls_nv > 0) {
        if (spec->embeddings && c->shared_classifier) {
            m->classifier = m->tok_embeddings ? m->tok_embeddings + (size_t)spec->cls_v0 * d : NULL;
            m->cls_alias = 1;
        } else {
            m->classifier = fetch_rows(&ld, -1, c->shared_classifier ? "tok_embeddings" : "classifier",
                                       (size_t)spec->cls_v0, (size_t)spec->cls_nv, d);
        }
    }
    size_t starts[MI_MAX_KV_HEADS];
    for (int l = 0; l < c->n_layers && ld.rc == 0; l++) {
        mi_layer *L = &m->layers[l];
        const mi_layer_spec *s = &spec->layers[l];
        L->spec = *s;
        int nk = s->n_kv;
        if (nk > 0) {
            L->attention_norm = fetch_rows(&ld, l, "attention_norm", 0, d, 1);
            for (int i = 0; i < nk; i++)
                starts[i] = (size_t)s->kv[i] * g * hd;
            L->wq = fetch_ranges(&ld, l, "wq", starts, g * hd, nk, d);
            for (int i = 0; i < nk; i++)
                starts[i] = (size_t)s->kv[i] * hd;
            L->wk = fetch_ranges(&ld, l, "wk", starts, hd, nk, d);
            L->wv = fetch_ranges(&ld, l, "wv", starts, hd, nk, d);
            if (!src->discard) {
                size_t kvn = (size_t)nk * (size_t)c->seq_len * hd;
                L->k_cache = mi_calloc(kvn, sizeof(float), "KV cache");
                L->v_cache = mi_calloc(kvn, sizeof(float), "KV cache");
                m->kv_bytes += 2 * kvn * sizeof(float);
            }
        }
        if (s->proj == MI_PROJ_FULL) {
            L->wo = transpose(fetch_rows(&ld, l, "wo_t", 0, (size_t)c->n_heads * hd, d), (size_t)c->n_heads * hd, d);
        } else if (s->proj == MI_PROJ_HEADS) {
            for (int i = 0; i < nk; i++)
                starts[i] = (size_t)s->kv[i] * g * hd;
            L->wo = transpose(fetch_ranges(&ld, l, "wo_t", starts, g * hd, nk, d), (size_t)nk * g * hd, d);
        }
        if (s->nf > 0) {
            L->ffn_norm = fetch_rows(&ld, l, "ffn_norm", 0, d, 1);
            L->w1 = fetch_rows(&ld, l, "w1", (size_t)s->f0, (size_t)s->nf, d);
            L->w3 = fetch_rows(&ld, l, "w3", (size_t)s->f0, (size_t)s->nf, d);
            L->w2 = transpose(fetch_rows(&ld, l, "w2_t", (size_t)s->f0, (size_t)s->nf, d), (size_t)s->nf, d);
        }
    }
    if (ld.rc == 0)
        mi_rope_init(&m->rope, c->seq_len, c->head_dim, c->rope_theta);
    else
        mi_model_free(m);
    return ld.rc;
}

void mi_model_load_path(mi_model *m, const char *path, mi_tokenizer *tok)
{
    char err[MI_ERRLEN];
    mi_config cfg;
    mi_model_file *mf = mi_model_open(path, &cfg, err);
    if (!mf)
        mi_fatal("%s", err);
    mi_layer_spec *layers = mi_malloc((size_t)cfg.n_layers * sizeof *layers, "layer specs");
    mi_shard_spec spec = mi_shard_spec_full(&cfg, layers);
    mi_weight_source src = mi_weight_source_file(mf);
    int rc = mi_model_load(m, &src, &cfg, &spec, err);
    free(layers);
    if (rc == 0 && tok)
        rc = mi_model_read_tokenizer(mf, tok, err);
    mi_model_close(mf);
    if (rc)
        mi_fatal("%s", err);
}

void mi_model_free(mi_model *m)
{
    if (m->layers) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            mi_layer *L = &m->layers[l];
            free(L->attention_norm);
            free(L->wq);
            free(L->wk);
            free(L->wv);
            free(L->k_cache);
            free(L->v_cache);
            free(L->wo);
            free(L->ffn_norm);
            free(L->w1);
            free(L->w3);
            free(L->w2);
        }
        free(m->layers);
    }
    if (!m->cls_alias)
        free(m->classifier);
    free(m->tok_embeddings);
    free(m->norm);
    mi_rope_free(&m->rope);
    memset(m, 0, sizeof *m);
}

void mi_model_reset(mi_model *m)
{
    const mi_config *c = &m->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer *L = &m->layers[l];
        size_t n = (size_t)L->spec.n_kv * (size_t)c->seq_len * (size_t)c->head_dim;
        if (L->k_cache) {
            memset(L->k_cache, 0, n * sizeof(float));
            memset(L->v_cache, 0, n * sizeof(float));
        }
    }
}
