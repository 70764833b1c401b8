/* Model hyper-parameters (llama2.c naming) of the two model families: a
 * Llama-architecture decoder (the language models), and CATS's
 * time-series encoder (docs/patchtst.md), whose patches play the tokens'
 * part and whose forecasting head the classifier's. Every size is in
 * elements, not bytes. */
#ifndef MESHINFER_CONFIG_H
#define MESHINFER_CONFIG_H

#include <stddef.h>

#include "meshinfer/tensor.h"

/* The weight matrices of a layer, the columns of the dtype table. */
enum { MI_WQ, MI_WK, MI_WV, MI_WO, MI_W1, MI_W2, MI_W3, MI_N_LAYER_MATS };
#define MI_MAX_LAYERS 1024

/* Model families. */
typedef enum {
    MI_FAMILY_LLAMA = 0,    /* RMSNorm, RoPE, causal attention, SwiGLU FFN, token embeddings, logits */
    MI_FAMILY_PATCHTST = 1, /* CATS's workload: patch embedding, LayerNorm with bias, non-causal
                               attention with biases, GELU MLP with biases, a linear forecasting head
                               over all patches (vocab_size = horizon, seq_len = n_patches) */
} mi_family;

/* "llama" or "patchtst". */
const char *mi_family_name(int family);

typedef struct {
    int family;         /* mi_family */
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
    /* Precision of each stored weight matrix (mi_dtype; all 0 = fp32), as the
     * model file holds it. Norms are always fp32. */
    unsigned char dtype[MI_MAX_LAYERS][MI_N_LAYER_MATS];
    unsigned char emb_dtype; /* token embeddings */
    unsigned char cls_dtype; /* classifier (the embeddings' dtype when shared) */
    /* MI_FAMILY_PATCHTST only (0 otherwise) */
    int patch_len;      /* values of one channel per patch (P) */
    int patch_stride;   /* rows between the starts of consecutive patches (S) */
    int lookback;       /* rows of history a forecast reads (L); n_patches = (L - P) / S + 1 = seq_len */
    int horizon;        /* rows forecast (= vocab_size: the head's outputs) */
    int n_channels;     /* columns of the series the model was trained on (channel-independent) */
} mi_config;

/* Names of the layer matrices as stored in the model file, by MI_W* index:
 * wq wk wv wo_t w1 w2_t w3. */
extern const char *const mi_layer_mat_names[MI_N_LAYER_MATS];

/* Check that the values fit together (positive sizes, n_heads divisible by
 * n_kv_heads, dim == n_heads * head_dim, even head_dim for RoPE, sane limits,
 * known dtypes, and block dtypes only where their blocked axis is a multiple
 * of 32). Returns 0, or -1 with one line naming the offending field in err
 * (MI_ERRLEN). */
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

/* Bytes of those weights in their stored dtypes (what a decoded token streams). */
size_t mi_decode_weight_bytes(const mi_config *c);

/* Bytes (in their dtypes) of the units HeadSplit places, norms excluded:
 * one KV-head group of layer l (its query heads' wq rows, its wk and wv rows),
 * the wo columns of n_kv KV-head groups (n_kv_heads: all of wo), the FFN's nf
 * units (w1 and w3 rows, w2 columns), the token embeddings, and `rows` rows of
 * the classifier; the time-series family's biases and patch embedding with
 * them (docs/patchtst.md). */
size_t mi_head_group_bytes(const mi_config *c, int l);
size_t mi_proj_bytes(const mi_config *c, int l, int n_kv);
size_t mi_ffn_bytes(const mi_config *c, int l, int nf);
size_t mi_embedding_bytes(const mi_config *c);
/* Bytes of one w3 row of layer l (0 in the time-series family, whose MLP has no gate). */
size_t mi_w3_row_bytes(const mi_config *c, int l);
size_t mi_classifier_bytes(const mi_config *c, int rows);

/* Alignment of column splits (Voltron tensor parallelism) in layer l: a
 * slice of the FFN must start and end on a multiple of mi_ffn_align (32 when
 * w2 is a block dtype, else 1), and the KV-head groups whose wo columns one
 * rank holds must be runs that start and end on a multiple of mi_kv_align
 * (the fewest heads whose columns are whole blocks when wo is a block dtype,
 * else 1), so that no rank holds part of a block. */
int mi_ffn_align(const mi_config *c, int l);
int mi_kv_align(const mi_config *c, int l);

/* One-line summary of the weight dtypes ("fp32", "q4_0", or "mixed: q8_0 x2,
 * q4_0 x4 layers, embeddings q8_0"), for reports. Returns buf. */
const char *mi_config_dtype_summary(const mi_config *c, char *buf, size_t n);

/* KV-cache bytes (fp32) for n_pos positions of all layers and heads. */
size_t mi_kv_cache_bytes(const mi_config *c, int n_pos);

/* Known real-model shapes for `synth`: "stories15M", "stories42M",
 * "stories110M", "tinyllama-1.1b", and "tiny-gqa" (a small GQA model for tests).
 * Fills *c (synthetic=1). Returns 0, or -1 if the name is unknown. */
int mi_config_from_shape(const char *shape, mi_config *c);

/* Comma-separated list of shape names, for --help text. */
const char *mi_config_shape_names(void);

#endif
