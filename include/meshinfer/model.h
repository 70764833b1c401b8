/* Weights and KV cache held by one device: the whole model, or the shard that
 * a placement plan gives this rank (seed 000 "Splitting by heads": attention
 * heads, the output projection and the FFN are separate units of placement).
 *
 * Query heads that share one KV head (grouped-query attention) always stay
 * together, so attention shards are ranges of KV heads. */
#ifndef MESHINFER_MODEL_H
#define MESHINFER_MODEL_H

#include <stddef.h>

#include "meshinfer/config.h"
#include "meshinfer/kernels.h"
#include "meshinfer/model_file.h"

/* What one device holds of one layer. Empty ranges (n == 0) mean "none". */
typedef struct {
    int kv0, n_kv;   /* attention: KV heads [kv0, kv0+n_kv) and their query heads */
    int q0, n_q;     /* output projection: wo columns of query heads [q0, q0+n_q) */
    int f0, nf;      /* FFN: units [f0, f0+nf) of hidden_dim */
} mi_layer_spec;

typedef struct {
    mi_layer_spec spec;
    float *attention_norm;  /* [dim], held with attention */
    float *wq;              /* [n_kv*group*head_dim, dim] */
    float *wk, *wv;         /* [n_kv*head_dim, dim] */
    float *k_cache, *v_cache; /* [n_kv][seq_len][head_dim] */
    float *wo;              /* [dim, n_q*head_dim]: a column block of wo */
    float *ffn_norm;        /* [dim], held with the FFN */
    float *w1, *w3;         /* [nf, dim] */
    float *w2;              /* [dim, nf]: a column block of w2 */
} mi_layer;

typedef struct {
    mi_config cfg;
    int has_embeddings;     /* token embeddings, final norm and classifier (the controller) */
    float *tok_embeddings;  /* [vocab_size, dim] */
    float *norm;            /* [dim] */
    float *classifier;      /* [vocab_size, dim]; aliases tok_embeddings when shared */
    mi_layer *layers;       /* [n_layers] */
    mi_rope_table rope;
    size_t weight_bytes;    /* bytes of weights held (what this device must store) */
    size_t kv_bytes;        /* bytes of KV cache allocated */
} mi_model;

/* Spec for holding everything (single device). */
mi_layer_spec mi_layer_spec_full(const mi_config *c);

/* Load the parts listed in specs[n_layers] (and the embeddings/classifier when
 * with_embeddings) from an open model file, reading only those hyperslabs, and
 * allocate the KV cache of the held KV heads for seq_len positions.
 * Returns 0, or -1 with err set (read failure, invalid ranges). */
int mi_model_load(mi_model *m, mi_model_file *mf, const mi_config *cfg, const mi_layer_spec *specs,
                  int with_embeddings, char *err);

/* Convenience: open path and load everything. mi_fatal on error. Also loads
 * the tokenizer into tok when tok != NULL. */
void mi_model_load_path(mi_model *m, const char *path, mi_tokenizer *tok);

void mi_model_free(mi_model *m);

/* Clear the KV cache (start a new sequence). */
void mi_model_reset(mi_model *m);

#endif
