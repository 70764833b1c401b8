/* Forward-pass blocks and the single-device forward (see forward.h). */
#include "meshinfer/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/kernels.h"

void mi_scratch_init(mi_scratch *s, const mi_config *c, int max_T)
{
    size_t T = (size_t)max_T, d = (size_t)c->dim, kv = (size_t)mi_kv_dim(c), h = (size_t)c->hidden_dim;
    size_t q = (size_t)mi_q_dim(c);
    if ((size_t)c->shared_hidden_dim > h) /* the shared expert's hidden units use h1 and h3 too */
        h = (size_t)c->shared_hidden_dim;
    memset(s, 0, sizeof *s);
    s->max_T = max_T;
    s->x = mi_calloc(T * d, sizeof(float), "activations");
    s->xn = mi_calloc(T * d, sizeof(float), "activations");
    s->tmp = mi_calloc(T * d, sizeof(float), "activations");
    s->q = mi_calloc(T * q, sizeof(float), "activations");
    s->k = mi_calloc(T * kv, sizeof(float), "activations");
    s->v = mi_calloc(T * kv, sizeof(float), "activations");
    s->heads = mi_calloc(T * q, sizeof(float), "activations");
    s->h1 = mi_calloc(T * h, sizeof(float), "activations");
    s->h3 = mi_calloc(T * h, sizeof(float), "activations");
    s->att = mi_calloc((size_t)c->seq_len, sizeof(float), "attention scores");
    s->logits = mi_calloc(T * (size_t)c->vocab_size, sizeof(float), "logits");
    if (mi_config_is_moe(c))
        s->moe = mi_calloc(3 * d + (size_t)c->n_experts, sizeof(float), "expert outputs");
}

void mi_scratch_free(mi_scratch *s)
{
    free(s->x);
    free(s->xn);
    free(s->tmp);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->heads);
    free(s->h1);
    free(s->h3);
    free(s->att);
    free(s->logits);
    free(s->moe);
    memset(s, 0, sizeof *s);
}

void mi_norm_rows(const mi_config *c, float *out, const float *x, const float *w, const float *b, int T)
{
    if (c->norm_type == MI_NORMK_LAYER)
        mi_layernorm_held(out, x, w, b, T, c->dim, c->norm_eps, NULL);
    else
        mi_rmsnorm(out, x, w, T, c->dim, c->norm_eps);
}

void mi_post_norm_add(const mi_model *m, const float *w, const float *y, int ldy, int T, float *x, int ldx)
{
    const mi_config *c = &m->cfg;
    float row[c->dim];
    for (int t = 0; t < T; t++) {
        mi_rmsnorm(row, y + (size_t)t * ldy, w, 1, c->dim, c->norm_eps);
        float *xt = x + (size_t)t * ldx;
        for (int i = 0; i < c->dim; i++)
            xt[i] += row[i];
    }
}

/* q, k and v of this device's heads from xn: the products, their biases,
 * the per-head norms and the rotation, in the families' order. Row t sits at
 * position pos[t] (pos NULL: pos0 + t). */
static void qkv(mi_model *m, int l, mi_scratch *s, const float *xn, int T, int pos0, const int *pos)
{
    const mi_config *c = &m->cfg;
    mi_layer *L = &m->layers[l];
    int n_kv = L->spec.n_kv, hd = c->head_dim, n_q = n_kv * mi_kv_group(c);
    mi_matmul(s->q, xn, &L->wq, T);
    mi_matmul(s->k, xn, &L->wk, T);
    mi_matmul(s->v, xn, &L->wv, T);
    if (c->qkv_bias) {
        mi_add_bias(s->q, n_q * hd, L->bq, T, n_q * hd);
        mi_add_bias(s->k, n_kv * hd, L->bk, T, n_kv * hd);
        mi_add_bias(s->v, n_kv * hd, L->bv, T, n_kv * hd);
    }
    if (c->qk_norm) { /* each head's vector is a row of head_dim */
        mi_rmsnorm(s->q, s->q, L->q_norm, T * n_q, hd, c->norm_eps);
        mi_rmsnorm(s->k, s->k, L->k_norm, T * n_kv, hd, c->norm_eps);
    }
    if (c->rope_type != MI_ROPE_NONE) {
        const mi_rope_table *r = mi_config_layer_local(c, l) && m->rope_local.cos ? &m->rope_local : &m->rope;
        if (!pos) {
            mi_rope_apply(r, s->q, T, pos0, n_q);
            mi_rope_apply(r, s->k, T, pos0, n_kv);
        } else { /* a row's rotation is its own: row by row is the same arithmetic */
            for (int t = 0; t < T; t++) {
                mi_rope_apply(r, s->q + (size_t)t * n_q * hd, 1, pos[t], n_q);
                mi_rope_apply(r, s->k + (size_t)t * n_kv * hd, 1, pos[t], n_kv);
            }
        }
    }
}

void mi_attn_block(mi_model *m, int l, mi_scratch *s, const float *xn, int T, int pos0, float *heads_out)
{
    mi_attn_block_at(m, l, s, xn, T, pos0, NULL, NULL, heads_out);
}

void mi_attn_block_at(mi_model *m, int l, mi_scratch *s, const float *xn, int T, int pos0, const int *pos,
                      const int *slot, float *heads_out)
{
    const mi_config *c = &m->cfg;
    mi_layer *L = &m->layers[l];
    int n_kv = L->spec.n_kv, g = mi_kv_group(c), hd = c->head_dim, n_q = n_kv * g;
    if (n_kv == 0)
        return;
    qkv(m, l, s, xn, T, pos0, pos);
    /* Cache layout [kv head][slot][position][head_dim] keeps each head's
     * history contiguous, so a shard's cache is one block and attention
     * streams it. */
    size_t S = (size_t)c->seq_len, stride = mi_config_kv_stride(c);
    for (int t = 0; t < T; t++) {
        size_t at = pos ? (size_t)(slot ? slot[t] : 0) * S + (size_t)pos[t] : (size_t)(pos0 + t);
        for (int h = 0; h < n_kv; h++) {
            size_t dst = ((size_t)h * stride + at) * hd;
            size_t src = ((size_t)t * n_kv + h) * hd;
            memcpy(L->k_cache + dst, s->k + src, (size_t)hd * sizeof(float));
            memcpy(L->v_cache + dst, s->v + src, (size_t)hd * sizeof(float));
        }
    }
    float scale = c->attn_scale > 0.0f ? c->attn_scale : 1.0f / sqrtf((float)hd);
    if (c->family != MI_FAMILY_PATCHTST) {
        int window = mi_config_layer_local(c, l) ? c->sliding_window : 0;
        if (!pos) {
            mi_attention_ex(heads_out, s->q, L->k_cache, L->v_cache, T, pos0, n_q, g, hd, (int)stride, s->att,
                            scale, window);
            return;
        }
        /* each row attends within its own slot (a row of a T-row pass is
         * computed as it is alone: the same sums) */
        size_t w = (size_t)n_q * hd;
        for (int t = 0; t < T; t++) {
            size_t off = (size_t)(slot ? slot[t] : 0) * S * hd;
            mi_attention_ex(heads_out + t * w, s->q + t * w, L->k_cache + off, L->v_cache + off, 1, pos[t], n_q, g,
                            hd, (int)stride, s->att, scale, window);
        }
        return;
    }
    /* not causal: every patch attends to all pos0+T of them, as the last
     * position of a causal pass would */
    size_t w = (size_t)n_q * hd;
    for (int t = 0; t < T; t++)
        mi_attention(heads_out + t * w, s->q + t * w, L->k_cache, L->v_cache, 1, pos0 + T - 1, n_q, g, hd,
                     (int)stride, s->att);
}

mi_ffn_act mi_config_ffn_act(const mi_config *c)
{
    return (mi_ffn_act)c->ffn_type;
}

static void product(const mi_product *prod, const mi_tensor *W, float *y, int ldy, const float *x, int ldx, int T,
                    int add)
{
    if (prod)
        prod->fn(prod->ctx, W, y, ldy, x, ldx, T, add);
    else
        mi_matmul_ld(y, ldy, x, ldx, W, T, add);
}

/* y (+)= x @ W^T with bias b: a bias joins its target before the product's
 * sum does, as every path adds it, so that all of them round alike; only when
 * the product overwrites the target does the bias come after. */
static void biased_product(const mi_tensor *W, const float *b, const float *x, int ldx, int T, float *y, int ldy,
                           int add, float *bias_to, int ldb, const mi_product *prod)
{
    int after = b && !bias_to && !add;
    if (b && !after)
        mi_add_bias(bias_to ? bias_to : y, bias_to ? ldb : ldy, b, T, W->rows);
    product(prod, W, y, ldy, x, ldx, T, add);
    if (after)
        mi_add_bias(y, ldy, b, T, W->rows);
}

void mi_proj_rows(const mi_model *m, int l, const float *heads, int ldh, int T, float *y, int ldy, int add,
                  float *bias_to, int ldb, const mi_product *prod)
{
    const mi_layer *L = &m->layers[l];
    biased_product(&L->wo, L->bo, heads, ldh, T, y, ldy, add, bias_to, ldb, prod);
}

void mi_ffn_up_rows(const mi_model *m, int l, mi_ffn_act act, const float *xn, int ldx, int T, float *h, int ldh,
                    float *h3, const mi_product *prod)
{
    const mi_layer *L = &m->layers[l];
    int nf = L->w1.rows;
    if (nf == 0)
        return;
    product(prod, &L->w1, h, ldh, xn, ldx, T, 0);
    if (act == MI_ACT_GELU || act == MI_ACT_GELU_TANH) { /* no gate: w1 x + b1 */
        mi_add_bias(h, ldh, L->b1, T, nf);
        for (int t = 0; t < T; t++)
            (act == MI_ACT_GELU ? mi_gelu : mi_gelu_tanh)(h + (size_t)t * ldh, (size_t)nf);
        return;
    }
    product(prod, &L->w3, h3, nf, xn, ldx, T, 0);
    for (int t = 0; t < T; t++)
        (act == MI_ACT_GEGLU ? mi_geglu : mi_swiglu)(h + (size_t)t * ldh, h3 + (size_t)t * nf, (size_t)nf);
}

void mi_ffn_down_rows(const mi_model *m, int l, const float *h, int ldh, int T, float *y, int ldy, int add,
                      float *bias_to, int ldb, const mi_product *prod)
{
    const mi_layer *L = &m->layers[l];
    biased_product(&L->w2, L->b2, h, ldh, T, y, ldy, add, bias_to, ldb, prod);
}

/* ---- mixture of experts ---- */

/* The top k of the E routing weights p (softmax of the router's logits)
 * into ids[k] and w[k], largest first; of equal weights the lower expert
 * index first (torch.topk's order on CPU). Renormalised to sum 1 when the
 * config says so, after the choice, as Hugging Face's Qwen MoE blocks do. */
static void route(const mi_config *c, float *p, int *ids, float *w)
{
    int E = c->n_experts, k = c->n_experts_used;
    mi_softmax(p, E);
    float sum = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++)
                taken |= ids[i] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        ids[j] = best;
        w[j] = p[best];
        sum += w[j];
    }
    if (c->norm_topk_prob)
        for (int j = 0; j < k; j++)
            w[j] /= sum;
}

/* Where expert e is among the ones L holds (spec.experts, ascending), or -1. */
static int held_index(const mi_layer *L, int e)
{
    int a = 0, b = L->spec.n_experts - 1;
    while (a <= b) {
        int mid = (a + b) / 2;
        if (L->spec.experts[mid] == e)
            return mid;
        if (L->spec.experts[mid] < e)
            a = mid + 1;
        else
            b = mid - 1;
    }
    return -1;
}

/* One SwiGLU FFN (w1, w3 [n, dim], w2 [dim, n]) of one position: out[dim]
 * = w2 (silu(w1 x) * w3 x); h1, h3 hold n floats each. */
static void swiglu_ffn(const mi_tensor *w1, const mi_tensor *w3, const mi_tensor *w2, const float *x, float *h1,
                       float *h3, float *out, const mi_product *prod)
{
    product(prod, w1, h1, w1->rows, x, w1->cols, 1, 0);
    product(prod, w3, h3, w3->rows, x, w3->cols, 1, 0);
    mi_swiglu(h1, h3, (size_t)w1->rows);
    product(prod, w2, out, w2->rows, h1, w2->cols, 1, 0);
}

void mi_moe_route(const mi_model *m, int l, mi_scratch *s, const float *x, int *ids, float *w, const mi_product *prod)
{
    const mi_config *c = &m->cfg;
    float *p = s->moe + 2 * c->dim;
    product(prod, &m->layers[l].router, p, c->n_experts, x, c->dim, 1, 0);
    route(c, p, ids, w);
}

int mi_moe_held_index(const mi_model *m, int l, int e)
{
    return held_index(&m->layers[l], e);
}

void mi_moe_expert_row(const mi_model *m, int l, mi_scratch *s, const float *x, int i, float w, float *out,
                       const mi_product *prod)
{
    const mi_layer *L = &m->layers[l];
    int d = m->cfg.dim, h = m->cfg.hidden_dim;
    float *y = s->moe + d;
    mi_tensor w1 = mi_tensor_rows(&L->ew1, i * h, h), w3 = mi_tensor_rows(&L->ew3, i * h, h);
    mi_tensor w2 = mi_tensor_rows(&L->ew2, i * d, d);
    swiglu_ffn(&w1, &w3, &w2, x, s->h1, s->h3, y, prod);
    s->moe_routed += 1;
    for (int o = 0; o < d; o++)
        out[o] = w * y[o];
}

void mi_moe_shared_row(const mi_model *m, int l, mi_scratch *s, const float *x, float *out, const mi_product *prod)
{
    const mi_layer *L = &m->layers[l];
    int d = m->cfg.dim;
    float *y = s->moe + d;
    float g = 0.0f;
    for (int o = 0; o < d; o++)
        g += L->shared_gate[o] * x[o];
    g = 1.0f / (1.0f + expf(-g));
    swiglu_ffn(&L->sw1, &L->sw3, &L->sw2, x, s->h1, s->h3, y, prod);
    for (int o = 0; o < d; o++)
        out[o] = g * y[o];
}

/* The MoE block of one position x into acc[dim] (zeroed first): the routed
 * experts this device holds, each weighted into out[dim] then added in the
 * order of the selection, then the shared expert gated; the same steps as
 * the distributed dispatch's, so that its sums are this one's bit for bit. */
static void moe_position(const mi_model *m, int l, mi_scratch *s, const float *x, float *acc, float *out,
                         const mi_product *prod)
{
    const mi_config *c = &m->cfg;
    const mi_layer *L = &m->layers[l];
    int d = c->dim, k = c->n_experts_used, ids[MI_MAX_EXPERTS];
    float w[MI_MAX_EXPERTS];
    mi_moe_route(m, l, s, x, ids, w, prod);
    memset(acc, 0, (size_t)d * sizeof(float));
    for (int j = 0; j < k; j++) {
        int i = held_index(L, ids[j]);
        if (i < 0)
            continue; /* another device's expert */
        mi_moe_expert_row(m, l, s, x, i, w[j], out, prod);
        mi_moe_add_row(acc, out, d);
    }
    if (!L->shared_gate)
        return;
    mi_moe_shared_row(m, l, s, x, out, prod);
    mi_moe_add_row(acc, out, d);
}

void mi_moe_add_row(float *acc, const float *row, int d)
{
    for (int o = 0; o < d; o++)
        acc[o] += row[o];
}

void mi_moe_rows(const mi_model *m, int l, mi_scratch *s, const float *xn, int ldx, int T, float *y, int ldy, int add,
                 const mi_product *prod)
{
    int d = m->cfg.dim;
    float *acc = s->moe, *out = s->moe + 2 * d + m->cfg.n_experts;
    for (int t = 0; t < T; t++) {
        moe_position(m, l, s, xn + (size_t)t * ldx, acc, out, prod);
        float *yt = y + (size_t)t * ldy;
        for (int o = 0; o < d; o++)
            yt[o] = add ? yt[o] + acc[o] : acc[o];
    }
}

void mi_proj_block(const mi_model *m, int l, const float *heads, int T, float *y, int add)
{
    const mi_layer *L = &m->layers[l];
    mi_proj_rows(m, l, heads, L->wo.cols, T, y, L->wo.rows, add, NULL, 0, NULL);
}

void mi_ffn_block(const mi_model *m, int l, mi_scratch *s, const float *xn, int T, float *y, int add)
{
    const mi_layer *L = &m->layers[l];
    if (mi_config_is_moe(&m->cfg)) {
        mi_moe_rows(m, l, s, xn, m->cfg.dim, T, y, m->cfg.dim, add, NULL);
        return;
    }
    mi_ffn_up_rows(m, l, mi_config_ffn_act(&m->cfg), xn, L->w1.cols, T, s->h1, L->w1.rows, s->h3, NULL);
    mi_ffn_down_rows(m, l, s->h1, L->w2.cols, T, y, L->w2.rows, add, NULL, 0, NULL);
}

void mi_logits(const mi_model *m, mi_scratch *s, const float *x, int T, float *logits)
{
    mi_norm_rows(&m->cfg, s->xn, x, m->norm, m->norm_b, T);
    mi_matmul(logits, s->xn, &m->classifier, T);
}

/* A block's output y joins the residual x: directly, or normed first where
 * the family norms block outputs (Gemma's post-norms). */
static void join(const mi_model *m, const float *post, mi_scratch *s, int T)
{
    if (!post)
        return;
    mi_post_norm_add(m, post, s->tmp, m->cfg.dim, T, s->x, m->cfg.dim);
}

float *mi_forward(mi_model *m, mi_scratch *s, const int *tokens, int T, int pos0, int all_logits)
{
    const mi_config *c = &m->cfg;
    size_t d = (size_t)c->dim;
    for (int t = 0; t < T; t++)
        mi_model_embed(m, tokens[t], pos0 + t, s->x + t * d);
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer *L = &m->layers[l];
        int post = c->post_norms;
        mi_norm_rows(c, s->xn, s->x, L->attention_norm, L->attention_norm_b, T);
        mi_attn_block(m, l, s, s->xn, T, pos0, s->heads);
        mi_proj_block(m, l, s->heads, T, post ? s->tmp : s->x, !post);
        join(m, post ? L->post_attn_norm : NULL, s, T);
        mi_norm_rows(c, s->xn, s->x, L->ffn_norm, L->ffn_norm_b, T);
        mi_ffn_block(m, l, s, s->xn, T, post ? s->tmp : s->x, !post);
        join(m, post ? L->post_ffn_norm : NULL, s, T);
    }
    if (all_logits) {
        mi_logits(m, s, s->x, T, s->logits);
    } else {
        mi_logits(m, s, s->x + (size_t)(T - 1) * d, 1, s->logits);
    }
    return s->logits;
}
