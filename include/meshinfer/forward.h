/* The Llama forward pass, split into the blocks that seed 000 places on
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
    float *q;      /* [max_T, n_heads*head_dim] */
    float *k, *v;  /* [max_T, kv_dim] */
    float *heads;  /* [max_T, n_heads*head_dim] attention output before wo */
    float *h1, *h3;/* [max_T, hidden_dim] */
    float *att;    /* [seq_len] attention scores */
    float *logits; /* [max_T, vocab_size] */
} mi_scratch;

void mi_scratch_init(mi_scratch *s, const mi_config *c, int max_T);
void mi_scratch_free(mi_scratch *s);

/* Attention of layer l on this device's KV heads [kv0, kv0+n_kv): project xn
 * ([T, dim], already RMS-normalised) to Q/K/V, rotate, append K/V to the cache at
 * positions pos0 .. pos0+T-1, attend. heads_out: [T, n_kv*group*head_dim]. */
void mi_attn_block(mi_model *m, int l, mi_scratch *s, const float *xn, int T, int pos0, float *heads_out);

/* Output projection with this device's wo: y[T, dim] (+)= heads @ wo^T, where
 * heads is [T, n_heads*head_dim] (MI_PROJ_FULL, all heads gathered) or
 * [T, n_kv*group*head_dim] (MI_PROJ_HEADS, this device's own heads, giving a
 * partial sum to be reduced). add: accumulate into y. */
void mi_proj_block(const mi_model *m, int l, const float *heads, int T, float *y, int add);

/* FFN (SwiGLU) over this device's units [f0, f0+nf): y[T, dim] (+)= w2 (silu(w1 xn) * w3 xn).
 * xn: [T, dim] already normalised with ffn_norm. */
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
