/* Model hyper-parameters of a Llama-architecture decoder (llama2.c naming).
 * Every size is in elements, not bytes. */
#ifndef MESHINFER_CONFIG_H
#define MESHINFER_CONFIG_H

#include <stddef.h>

typedef struct {
    int dim;            /* d_model */
    int hidden_dim;     /* FFN inner width */
    int n_layers;
    int n_heads;        /* query heads */
    int n_kv_heads;     /* key/value heads (grouped-query attention when < n_heads) */
    int head_dim;       /* dim / n_heads */
    int vocab_size;
    int seq_len;        /* context length: positions 0 .. seq_len-1 */
    float rope_theta;
    float norm_eps;     /* RMSNorm epsilon */
    int shared_classifier; /* 1: logits use tok_embeddings (tied), 0: separate classifier */
    int synthetic;      /* 1: seeded random weights, not a trained model */
    char name[64];      /* shape name or source, e.g. "stories15M" */
} mi_config;

/* Check that the values fit together (positive sizes, n_heads divisible by
 * n_kv_heads, dim == n_heads * head_dim, even head_dim for RoPE, sane limits).
 * Returns 0, or -1 with one line naming the offending field in err (MI_ERRLEN). */
int mi_config_validate(const mi_config *c, char *err);

/* Query heads that share one KV head (n_heads / n_kv_heads). */
static inline int mi_kv_group(const mi_config *c) { return c->n_heads / c->n_kv_heads; }
/* Width of the K (or V) projection output: n_kv_heads * head_dim. */
static inline int mi_kv_dim(const mi_config *c) { return c->n_kv_heads * c->head_dim; }

/* Parameter counts (elements) of one layer and the whole model, including the
 * separate classifier when not shared. Used for memory predictions and for
 * effective-bandwidth figures in benchmarks. */
size_t mi_layer_params(const mi_config *c);
size_t mi_model_params(const mi_config *c);

/* Weight elements read from memory per decoded token: every layer matrix plus
 * the classifier (the embedding row read is negligible). */
size_t mi_decode_weight_elems(const mi_config *c);

/* KV-cache bytes (fp32) for n_pos positions of all layers and heads. */
size_t mi_kv_cache_bytes(const mi_config *c, int n_pos);

/* Known real-model shapes for `synth`: "stories15M", "stories42M",
 * "stories110M", "tinyllama-1.1b", and "tiny-gqa" (a small GQA model for tests).
 * Fills *c (synthetic=1). Returns 0, or -1 if the name is unknown. */
int mi_config_from_shape(const char *shape, mi_config *c);

/* Comma-separated list of shape names, for --help text. */
const char *mi_config_shape_names(void);

#endif
