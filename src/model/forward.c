/* Forward-pass blocks and the single-device forward (see forward.h). */
#include "meshinfer/forward.h"

#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

void mi_scratch_init(mi_scratch *s, const mi_config *c, int max_T)
{
    size_t T = (size_t)max_T, d = (size_t)c->dim, kv = (size_t)mi_kv_dim(c), h = (size_t)c->hidden_dim;
    s->max_T = max_T;
    s->x = mi_calloc(T * d, sizeof(float), "activations");
    s->xn = mi_calloc(T * d, sizeof(float), "activations");
    s->q = mi_calloc(T * d, sizeof(float), "activations");
    s->k = mi_calloc(T * kv, sizeof(float), "activations");
    s->v = mi_calloc(T * kv, sizeof(float), "activations");
    s->heads = mi_calloc(T * d, sizeof(float), "activations");
    s->h1 = mi_calloc(T * h, sizeof(float), "activations");
    s->h3 = mi_calloc(T * h, sizeof(float), "activations");
    s->att = mi_calloc((size_t)c->seq_len, sizeof(float), "attention scores");
    s->logits = mi_calloc(T * (size_t)c->vocab_size, sizeof(float), "logits");
}

void mi_scratch_free(mi_scratch *s)
{
    free(s->x);
    free(s->xn);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->heads);
    free(s->h1);
    free(s->h3);
    free(s->att);
    free(s->logits);
    memset(s, 0, sizeof *s);
}

void mi_attn_block(mi_model *m, int l, mi_scratch *s, const float *xn, int T, int pos0, float *heads_out)
{
    const mi_config *c = &m->cfg;
    mi_layer *L = &m->layers[l];
    int n_kv = L->spec.n_kv, g = mi_kv_group(c), hd = c->head_dim, n_q = n_kv * g;
    if (n_kv == 0)
        return;
    mi_matmul(s->q, xn, &L->wq, T);
    mi_matmul(s->k, xn, &L->wk, T);
    mi_matmul(s->v, xn, &L->wv, T);
    int series = c->family == MI_FAMILY_PATCHTST;
    if (series) { /* biases, and patches carry their position in pos_embed instead of RoPE */
        mi_add_bias(s->q, n_q * hd, L->bq, T, n_q * hd);
        mi_add_bias(s->k, n_kv * hd, L->bk, T, n_kv * hd);
        mi_add_bias(s->v, n_kv * hd, L->bv, T, n_kv * hd);
    } else {
        mi_rope_apply(&m->rope, s->q, T, pos0, n_q);
        mi_rope_apply(&m->rope, s->k, T, pos0, n_kv);
    }
    /* Cache layout [kv head][position][head_dim] keeps each head's history
     * contiguous, so a shard's cache is one block and attention streams it. */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_kv; h++) {
            size_t dst = ((size_t)h * c->seq_len + (size_t)(pos0 + t)) * hd;
            size_t src = ((size_t)t * n_kv + h) * hd;
            memcpy(L->k_cache + dst, s->k + src, (size_t)hd * sizeof(float));
            memcpy(L->v_cache + dst, s->v + src, (size_t)hd * sizeof(float));
        }
    if (!series) {
        mi_attention(heads_out, s->q, L->k_cache, L->v_cache, T, pos0, n_q, g, hd, c->seq_len, s->att);
        return;
    }
    /* not causal: every patch attends to all pos0+T of them, as the last
     * position of a causal pass would */
    size_t w = (size_t)n_q * hd;
    for (int t = 0; t < T; t++)
        mi_attention(heads_out + t * w, s->q + t * w, L->k_cache, L->v_cache, 1, pos0 + T - 1, n_q, g, hd,
                     c->seq_len, s->att);
}

void mi_proj_block(const mi_model *m, int l, const float *heads, int T, float *y, int add)
{
    const mi_layer *L = &m->layers[l];
    /* a bias joins the residual before the product is added, as every
     * distributed path adds it (exec.c), so all of them round alike */
    if (add && L->bo)
        mi_add_bias(y, L->wo.rows, L->bo, T, L->wo.rows);
    if (add)
        mi_matmul_add(y, heads, &L->wo, T);
    else
        mi_matmul(y, heads, &L->wo, T);
    if (!add && L->bo)
        mi_add_bias(y, L->wo.rows, L->bo, T, L->wo.rows);
}

void mi_ffn_block(const mi_model *m, int l, mi_scratch *s, const float *xn, int T, float *y, int add)
{
    const mi_layer *L = &m->layers[l];
    int nf = L->spec.nf;
    mi_matmul(s->h1, xn, &L->w1, T);
    if (m->cfg.family == MI_FAMILY_PATCHTST) {
        mi_add_bias(s->h1, nf, L->b1, T, nf);
        mi_gelu(s->h1, (size_t)T * nf);
    } else {
        mi_matmul(s->h3, xn, &L->w3, T);
        mi_swiglu(s->h1, s->h3, (size_t)T * nf);
    }
    if (add && L->b2)
        mi_add_bias(y, L->w2.rows, L->b2, T, L->w2.rows);
    if (add)
        mi_matmul_add(y, s->h1, &L->w2, T);
    else
        mi_matmul(y, s->h1, &L->w2, T);
    if (!add && L->b2)
        mi_add_bias(y, L->w2.rows, L->b2, T, L->w2.rows);
}

void mi_logits(const mi_model *m, mi_scratch *s, const float *x, int T, float *logits)
{
    const mi_config *c = &m->cfg;
    mi_rmsnorm(s->xn, x, m->norm, T, c->dim, c->norm_eps);
    mi_matmul(logits, s->xn, &m->classifier, T);
}

float *mi_forward(mi_model *m, mi_scratch *s, const int *tokens, int T, int pos0, int all_logits)
{
    const mi_config *c = &m->cfg;
    size_t d = (size_t)c->dim;
    for (int t = 0; t < T; t++)
        mi_tensor_row_f32(&m->tok_embeddings, tokens[t], s->x + t * d);
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer *L = &m->layers[l];
        mi_rmsnorm(s->xn, s->x, L->attention_norm, T, c->dim, c->norm_eps);
        mi_attn_block(m, l, s, s->xn, T, pos0, s->heads);
        mi_proj_block(m, l, s->heads, T, s->x, 1);
        mi_rmsnorm(s->xn, s->x, L->ffn_norm, T, c->dim, c->norm_eps);
        mi_ffn_block(m, l, s, s->xn, T, s->x, 1);
    }
    if (all_logits) {
        mi_logits(m, s, s->x, T, s->logits);
    } else {
        mi_logits(m, s, s->x + (size_t)(T - 1) * d, 1, s->logits);
    }
    return s->logits;
}
