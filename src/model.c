/* Loading a model, or one device's shard of it, from the HDF5 model file. */
#include "meshinfer/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

mi_layer_spec mi_layer_spec_full(const mi_config *c)
{
    mi_layer_spec s = {0, c->n_kv_heads, 0, c->n_heads, 0, c->hidden_dim};
    return s;
}

static float *load_rows(mi_model *m, mi_model_file *mf, int layer, const char *t, size_t row0, size_t nrows,
                        size_t row_len, int transposed, int *rc, char *err)
{
    if (*rc || nrows == 0)
        return NULL;
    char name[128];
    if (layer >= 0)
        mi_model_layer_name(name, sizeof name, layer, t);
    else
        snprintf(name, sizeof name, "%s", t);
    size_t bytes = nrows * row_len * sizeof(float);
    float *p = mi_malloc(bytes, name);
    int r = transposed ? mi_model_read_t(mf, name, row0, nrows, p, err)
                       : mi_model_read_rows(mf, name, row0, nrows, p, err);
    if (r) {
        free(p);
        *rc = -1;
        return NULL;
    }
    m->weight_bytes += bytes;
    return p;
}

int mi_model_load(mi_model *m, mi_model_file *mf, const mi_config *c, const mi_layer_spec *specs,
                  int with_embeddings, char *err)
{
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->layers = mi_calloc((size_t)c->n_layers, sizeof(mi_layer), "layer table");
    size_t d = (size_t)c->dim, hd = (size_t)c->head_dim, g = (size_t)mi_kv_group(c);
    int rc = 0;
    m->has_embeddings = with_embeddings;
    if (with_embeddings) {
        m->tok_embeddings = load_rows(m, mf, -1, "tok_embeddings", 0, (size_t)c->vocab_size, d, 0, &rc, err);
        m->norm = load_rows(m, mf, -1, "norm", 0, d, 1, 0, &rc, err);
        m->classifier = c->shared_classifier
                            ? m->tok_embeddings
                            : load_rows(m, mf, -1, "classifier", 0, (size_t)c->vocab_size, d, 0, &rc, err);
    }
    for (int l = 0; l < c->n_layers && rc == 0; l++) {
        mi_layer *L = &m->layers[l];
        const mi_layer_spec *s = &specs[l];
        if (s->kv0 < 0 || s->n_kv < 0 || s->kv0 + s->n_kv > c->n_kv_heads || s->q0 < 0 || s->n_q < 0 ||
            s->q0 + s->n_q > c->n_heads || s->f0 < 0 || s->nf < 0 || s->f0 + s->nf > c->hidden_dim) {
            mi_model_free(m);
            return mi_set_error(err, "layer %d: shard ranges are outside the model", l);
        }
        L->spec = *s;
        if (s->n_kv > 0) {
            L->attention_norm = load_rows(m, mf, l, "attention_norm", 0, d, 1, 0, &rc, err);
            L->wq = load_rows(m, mf, l, "wq", (size_t)s->kv0 * g * hd, (size_t)s->n_kv * g * hd, d, 0, &rc, err);
            L->wk = load_rows(m, mf, l, "wk", (size_t)s->kv0 * hd, (size_t)s->n_kv * hd, d, 0, &rc, err);
            L->wv = load_rows(m, mf, l, "wv", (size_t)s->kv0 * hd, (size_t)s->n_kv * hd, d, 0, &rc, err);
            size_t kvn = (size_t)s->n_kv * (size_t)c->seq_len * hd;
            L->k_cache = mi_calloc(kvn, sizeof(float), "KV cache");
            L->v_cache = mi_calloc(kvn, sizeof(float), "KV cache");
            m->kv_bytes += 2 * kvn * sizeof(float);
        }
        if (s->n_q > 0)
            L->wo = load_rows(m, mf, l, "wo_t", (size_t)s->q0 * hd, (size_t)s->n_q * hd, d, 1, &rc, err);
        if (s->nf > 0) {
            L->ffn_norm = load_rows(m, mf, l, "ffn_norm", 0, d, 1, 0, &rc, err);
            L->w1 = load_rows(m, mf, l, "w1", (size_t)s->f0, (size_t)s->nf, d, 0, &rc, err);
            L->w3 = load_rows(m, mf, l, "w3", (size_t)s->f0, (size_t)s->nf, d, 0, &rc, err);
            L->w2 = load_rows(m, mf, l, "w2_t", (size_t)s->f0, (size_t)s->nf, d, 1, &rc, err);
        }
    }
    if (rc == 0)
        mi_rope_init(&m->rope, c->seq_len, c->head_dim, c->rope_theta);
    else
        mi_model_free(m);
    return rc;
}

void mi_model_load_path(mi_model *m, const char *path, mi_tokenizer *tok)
{
    char err[MI_ERRLEN];
    mi_config cfg;
    mi_model_file *mf = mi_model_open(path, &cfg, err);
    if (!mf)
        mi_fatal("%s", err);
    mi_layer_spec *specs = mi_malloc((size_t)cfg.n_layers * sizeof *specs, "layer specs");
    for (int l = 0; l < cfg.n_layers; l++)
        specs[l] = mi_layer_spec_full(&cfg);
    int rc = mi_model_load(m, mf, &cfg, specs, 1, err);
    free(specs);
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
    if (m->classifier != m->tok_embeddings)
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
