/* Every weight a model holds checked finite (see model.h
 * mi_model_check_finite): `meshinfer check` reads a file whole with it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/model.h"

/* --------------------------------------------------------- validation */

/* First non-finite value of t: 1 with its row, column and value, else 0. */
static int tensor_nonfinite(const mi_tensor *t, int *r, int *col, float *v)
{
    float *row = mi_malloc((size_t)t->cols * sizeof(float), "check row");
    int bad = 0;
    for (int i = 0; i < t->rows && !bad; i++) {
        mi_tensor_row_f32(t, i, row);
        for (int j = 0; j < t->cols && !bad; j++)
            if (!isfinite(row[j])) {
                *r = i, *col = j, *v = row[j];
                bad = 1;
            }
    }
    free(row);
    return bad;
}

static int check_tensor(const char *path, const char *name, const mi_tensor *t, size_t *n, char *err)
{
    int r, col;
    float v;
    if (tensor_nonfinite(t, &r, &col, &v))
        return mi_set_error(err, "%s: tensor '%s' holds a non-finite value (%g at row %d, column %d of the loaded "
                                 "[%d, %d] matrix)", path, name, (double)v, r, col, t->rows, t->cols);
    *n += (size_t)t->rows * (size_t)t->cols;
    return 0;
}

static int check_vector(const char *path, const char *name, const float *x, int len, size_t *n, char *err)
{
    for (int i = 0; i < len; i++)
        if (!isfinite(x[i]))
            return mi_set_error(err, "%s: tensor '%s' holds a non-finite value (%g at element %d)", path, name,
                                (double)x[i], i);
    *n += (size_t)len;
    return 0;
}

/* The time-series family's tensors (docs/patchtst.md), as held. */
static int check_series(const mi_model *m, const char *path, size_t *n_weights, char *err)
{
    const mi_config *c = &m->cfg;
    size_t n = 0, d = (size_t)c->dim;
    char name[128];
    if ((m->patch_embed.q && check_tensor(path, "patch_embed", &m->patch_embed, &n, err)) ||
        (m->patch_embed_b && check_vector(path, "patch_embed_b", m->patch_embed_b, c->dim, &n, err)) ||
        (m->pos_embed && check_vector(path, "pos_embed", m->pos_embed, c->seq_len * c->dim, &n, err)) ||
        (m->cls_nv > 0 && check_tensor(path, "head", &m->classifier, &n, err)) ||
        (m->cls_b && check_vector(path, "head_b", m->cls_b, m->cls_nv, &n, err)))
        return -1;
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer *L = &m->layers[l];
        const mi_tensor *mats[5] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1};
        const char *mat_names[6] = {"wq", "wk", "wv", "wo_t", "w1", "w2_t"};
        for (int k = 0; k < 6; k++) {
            const mi_tensor *t = k < 5 ? mats[k] : &L->w2;
            mi_model_layer_name(name, sizeof name, l, mat_names[k]);
            if (t->q && check_tensor(path, name, t, &n, err))
                return -1;
        }
        const struct { const char *name; const float *v; size_t len; } vec[] = {
            {"attention_norm", L->attention_norm, d}, {"attention_norm_b", L->attention_norm_b, d},
            {"ffn_norm", L->ffn_norm, d}, {"ffn_norm_b", L->ffn_norm_b, d},
            {"wq_b", L->bq, (size_t)L->wq.rows}, {"wk_b", L->bk, (size_t)L->wk.rows},
            {"wv_b", L->bv, (size_t)L->wv.rows}, {"wo_b", L->bo, (size_t)L->wo.rows},
            {"w1_b", L->b1, (size_t)L->w1.rows}, {"w2_b", L->b2, (size_t)L->w2.rows},
        };
        for (size_t k = 0; k < sizeof vec / sizeof vec[0]; k++) {
            mi_model_layer_name(name, sizeof name, l, vec[k].name);
            if (vec[k].v && check_vector(path, name, vec[k].v, (int)vec[k].len, &n, err))
                return -1;
        }
    }
    if (n_weights)
        *n_weights = n;
    return 0;
}

int mi_model_check_finite(const mi_model *m, const char *path, size_t *n_weights, char *err)
{
    const mi_config *c = &m->cfg;
    size_t n = 0;
    char name[128];
    if (c->family == MI_FAMILY_PATCHTST)
        return check_series(m, path, n_weights, err);
    if ((m->has_embeddings && check_tensor(path, "tok_embeddings", &m->tok_embeddings, &n, err)) ||
        (m->norm && check_vector(path, "norm", m->norm, c->dim, &n, err)) ||
        (m->cls_nv > 0 && !m->cls_alias && check_tensor(path, "classifier", &m->classifier, &n, err)))
        return -1;
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer *L = &m->layers[l];
        const mi_tensor *mats[MI_N_LAYER_MATS] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3}; /* mi_layer_mat_names order */
        mi_model_layer_name(name, sizeof name, l, "attention_norm");
        if (L->attention_norm && check_vector(path, name, L->attention_norm, c->dim, &n, err))
            return -1;
        mi_model_layer_name(name, sizeof name, l, "ffn_norm");
        if (L->ffn_norm && check_vector(path, name, L->ffn_norm, c->dim, &n, err))
            return -1;
        for (int k = 0; k < MI_N_LAYER_MATS; k++) {
            mi_model_layer_name(name, sizeof name, l, mi_layer_mat_names[k]);
            if (mats[k]->q && check_tensor(path, name, mats[k], &n, err))
                return -1;
        }
        /* a mixture of experts' (the stacked experts under their own names) */
        const mi_tensor *moe[7] = {&L->router, &L->ew1, &L->ew2, &L->ew3, &L->sw1, &L->sw2, &L->sw3};
        const char *moe_names[7] = {"router", "experts_w1", "experts_w2", "experts_w3", "shared_w1", "shared_w2_t",
                                    "shared_w3"};
        for (int k = 0; k < 7; k++) {
            mi_model_layer_name(name, sizeof name, l, moe_names[k]);
            if (moe[k]->q && check_tensor(path, name, moe[k], &n, err))
                return -1;
        }
        /* the family's vectors (a whole model: every one the traits add) */
        int hd = c->head_dim, d = c->dim, q = mi_q_dim(c), kv = mi_kv_dim(c);
        const struct { const char *t; const float *v; int len; } vs[] = {
            {"attention_norm_b", L->attention_norm_b, d}, {"ffn_norm_b", L->ffn_norm_b, d}, {"wq_b", L->bq, q},
            {"wk_b", L->bk, kv}, {"wv_b", L->bv, kv}, {"wo_b", L->bo, d}, {"w1_b", L->b1, c->hidden_dim},
            {"w2_b", L->b2, d}, {"q_norm", L->q_norm, hd}, {"k_norm", L->k_norm, hd},
            {"post_attention_norm", L->post_attn_norm, d}, {"post_ffn_norm", L->post_ffn_norm, d},
            {"shared_gate", L->shared_gate, d},
        };
        for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
            mi_model_layer_name(name, sizeof name, l, vs[k].t);
            if (vs[k].v && check_vector(path, name, vs[k].v, vs[k].len, &n, err))
                return -1;
        }
    }
    if ((m->norm_b && check_vector(path, "norm_b", m->norm_b, c->dim, &n, err)) ||
        (m->pos_embed && check_vector(path, "pos_embed", m->pos_embed, c->seq_len * c->dim, &n, err)))
        return -1;
    if (n_weights)
        *n_weights = n;
    return 0;
}
