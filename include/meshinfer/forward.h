/* The Llama forward pass, split into the blocks that HeadSplit places on
 * devices: attention (per KV-head group), output projection, FFN. A single
 * device runs them in order (mi_forward); the distributed runtime runs the same
 * block functions on the ranks a plan names, so both compute the same numbers. */
#ifndef MESHINFER_FORWARD_H
#define MESHINFER_FORWARD_H

#include "meshinfer/model.h"

/* Activation buffers for up to max_T positions at once. */
typedef struct {
    int max_T;
    float *x;      /* [max_T, dim] residual stream */
    float *xn;     /* [max_T, dim] normalised input of a block */
    float *tmp;    /* [max_T, dim] a block's output before its post-norm (post_norms families) */
    float *q;      /* [max_T, n_heads*head_dim] */
    float *k, *v;  /* [max_T, kv_dim] */
    float *heads;  /* [max_T, n_heads*head_dim] attention output before wo */
    float *h1, *h3;/* [max_T, max(hidden_dim, shared_hidden_dim)] */
    float *att;    /* [seq_len] attention scores */
    float *logits; /* [max_T, vocab_size] */
    float *moe;    /* a mixture of experts' (config.h): [3*dim + n_experts] one position's sum, one expert's
                      output, the routing weights, one weighted output; NULL for a dense FFN */
    double moe_routed; /* (position, expert) selections that this device's held experts ran, counted by
                          mi_moe_rows since init: its expert load (the runtime reports it per layer) */
} mi_scratch;

void mi_scratch_init(mi_scratch *s, const mi_config *c, int max_T);
void mi_scratch_free(mi_scratch *s);

/* The family's norm (RMSNorm, or LayerNorm with bias b) of T rows of dim:
 * out = norm(x) * w (+ b). out may be x. */
void mi_norm_rows(const mi_config *c, float *out, const float *x, const float *w, const float *b, int T);

/* A block's output joining the residual through a post-norm (Gemma): for
 * each of T rows, x[:dim] += RMSNorm(y[:dim]) * w; rows ldy and ldx apart. */
void mi_post_norm_add(const mi_model *m, const float *w, const float *y, int ldy, int T, float *x, int ldx);

/* Attention of layer l on this device's KV heads [kv0, kv0+n_kv): project xn
 * ([T, dim], already normalised) to Q/K/V, add their biases, norm each head,
 * rotate (the layer's RoPE table: a local layer's own base), append K/V to
 * the cache at positions pos0 .. pos0+T-1, attend (causal; a local layer
 * only within its sliding window). heads_out: [T, n_kv*group*head_dim]. */
void mi_attn_block(mi_model *m, int l, mi_scratch *s, const float *xn, int T, int pos0, float *heads_out);
/* The same with row t at position pos[t] of KV cache slot slot[t] (config.h
 * kv_slots; slot NULL: slot 0), each row attending only within its slot: the
 * rows of several sequences in one pass (batch.h). pos NULL: mi_attn_block
 * (positions pos0.., slot 0). Row t's result is what a one-row call at
 * pos[t] gives, bit for bit. */
void mi_attn_block_at(mi_model *m, int l, mi_scratch *s, const float *xn, int T, int pos0, const int *pos,
                      const int *slot, float *heads_out);

/* ---- the blocks' one implementation, on row-strided buffers ----
 * The single-device pass (mi_forward, the dense wrappers below) and the
 * distributed executor's ops (runtime exec.c, on its buffers' columns) call
 * these same functions, so both compute the same numbers in the same order. */

/* A matrix product as the blocks run it: y[T rows, ldy apart][W->rows] (+)=
 * x[T rows, ldx apart][W->cols] @ W^T (add: accumulate). A NULL mi_product
 * is mi_matmul_ld; the runtime passes one that keeps pending messages moving
 * between row chunks (the same sums: a row does not depend on its chunk). */
typedef struct {
    void (*fn)(void *ctx, const mi_tensor *W, float *y, int ldy, const float *x, int ldx, int T, int add);
    void *ctx;
} mi_product;

/* The FFN's activation (config.h mi_ffn_type): SwiGLU (Llama: silu(w1 x) *
 * w3 x), GELU with bias (the time-series family: gelu(w1 x + b1), no gate),
 * GeGLU (Gemma: gelu_tanh(w1 x) * w3 x), GELU-tanh with bias (GPT-2). */
typedef enum {
    MI_ACT_SWIGLU = MI_FFNK_SWIGLU,
    MI_ACT_GELU = MI_FFNK_GELU_ERF,
    MI_ACT_GEGLU = MI_FFNK_GEGLU,
    MI_ACT_GELU_TANH = MI_FFNK_GELU_TANH,
} mi_ffn_act;
/* The activation of model c's family. */
mi_ffn_act mi_config_ffn_act(const mi_config *c);

/* Output projection of layer l with this device's wo [n_out, n_in]: y (+)=
 * heads @ wo^T; heads: T rows of n_in, ldh apart; y: T rows of n_out, ldy
 * apart. The bias bo (when the layer has one) joins bias_to (T rows of n_out,
 * ldb apart) before the product's sum is added; bias_to NULL means y, and
 * then with add = 0 the bias follows the product instead (y is overwritten). */
void mi_proj_rows(const mi_model *m, int l, const float *heads, int ldh, int T, float *y, int ldy, int add,
                  float *bias_to, int ldb, const mi_product *prod);

/* The FFN's first half over this device's nf = w1 rows units: h = act(w1 xn)
 * (SwiGLU: * (w3 xn); GELU: w1 xn + b1 first). xn: T rows of dim, ldx apart;
 * h: T rows of nf, ldh apart; h3: scratch of T * nf floats, rows nf apart. */
void mi_ffn_up_rows(const mi_model *m, int l, mi_ffn_act act, const float *xn, int ldx, int T, float *h, int ldh,
                    float *h3, const mi_product *prod);

/* The FFN's second half: y (+)= h @ w2^T, with w2's bias b2 as bo in
 * mi_proj_rows. h: T rows of w2 cols, ldh apart; y: T rows of w2 rows. */
void mi_ffn_down_rows(const mi_model *m, int l, const float *h, int ldh, int T, float *y, int ldy, int add,
                      float *bias_to, int ldb, const mi_product *prod);

/* A mixture-of-experts FFN (config.h) of layer l on T rows of xn (ldx
 * apart): y (+)= for each position, the sum over its top n_experts_used
 * experts (router softmax in fp32, top-k with ties to the lower expert
 * index, renormalised when norm_topk_prob) of weight * SwiGLU expert, plus
 * sigmoid(shared_gate . x) * the shared expert; y: T rows of dim, ldy apart.
 * Only the experts this device holds (spec.experts) contribute, so a device
 * holding some gives its part of the sum; the shared expert where it is
 * held. Positions run one at a time; uses s->h1, s->h3 and s->moe. */
void mi_moe_rows(const mi_model *m, int l, mi_scratch *s, const float *xn, int ldx, int T, float *y, int ldy, int add,
                 const mi_product *prod);

/* The steps of mi_moe_rows for one position, for expert parallelism's
 * dispatch (a rank routes, others run the selected experts, the router's
 * rank adds their rows): the same functions run on one device, so the sums
 * are bit-identical. A position's output is acc = 0, then for j = 0..k-1
 * acc += expert_row(ids[j], w[j]), then acc += shared_row, each with
 * mi_moe_add_row; y += acc.
 * mi_moe_route: x [dim] (normalised) -> its k = n_experts_used experts ids[k]
 *   and weights w[k] (selection order: largest first; uses s->moe).
 * mi_moe_held_index: where expert e is among the experts layer l's shard
 *   holds (spec.experts), -1 if not held.
 * mi_moe_expert_row: out[dim] = w * the held expert at index i of x (counts
 *   one selection in s->moe_routed; out must not overlap s->moe's first
 *   2*dim + n_experts floats).
 * mi_moe_shared_row: out[dim] = sigmoid(shared_gate . x) * the shared expert
 *   of x (the layer must have one). */
void mi_moe_route(const mi_model *m, int l, mi_scratch *s, const float *x, int *ids, float *w, const mi_product *prod);
int mi_moe_held_index(const mi_model *m, int l, int e);
void mi_moe_expert_row(const mi_model *m, int l, mi_scratch *s, const float *x, int i, float w, float *out,
                       const mi_product *prod);
void mi_moe_shared_row(const mi_model *m, int l, mi_scratch *s, const float *x, float *out, const mi_product *prod);
void mi_moe_add_row(float *acc, const float *row, int d);

/* ---- dense wrappers (rows packed) ---- */

/* Output projection with this device's wo: y[T, dim] (+)= heads @ wo^T, where
 * heads is [T, n_heads*head_dim] (MI_PROJ_FULL, all heads gathered) or
 * [T, n_kv*group*head_dim] (MI_PROJ_HEADS, this device's own heads, giving a
 * partial sum to be reduced). add: accumulate into y. */
void mi_proj_block(const mi_model *m, int l, const float *heads, int T, float *y, int add);

/* FFN (SwiGLU) over this device's units [f0, f0+nf): y[T, dim] (+)= w2 (silu(w1 xn) * w3 xn),
 * or a mixture of experts' (mi_moe_rows). xn: [T, dim] already normalised with ffn_norm. */
void mi_ffn_block(const mi_model *m, int l, mi_scratch *s, const float *xn, int T, float *y, int add);

/* Final RMSNorm and this device's classifier rows for T positions of x:
 * logits [T, cls_nv] (the whole vocabulary on a single device). */
void mi_logits(const mi_model *m, mi_scratch *s, const float *x, int T, float *logits);

/* Whole forward pass on one device holding every block: tokens[T] at
 * positions pos0 .. pos0+T-1 (T <= s->max_T, pos0+T <= seq_len).
 * Returns logits of the last position, or of all T positions ([T, vocab]) when
 * all_logits. The pointer is into s->logits. */
float *mi_forward(mi_model *m, mi_scratch *s, const int *tokens, int T, int pos0, int all_logits);

#endif
