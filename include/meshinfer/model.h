/* Weights and KV cache held by one device: the whole model, or the shard that
 * a placement plan gives this rank (HeadSplit "Splitting by heads": attention
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
#include "meshinfer/tensor.h"

#define MI_MAX_KV_HEADS 128

/* How much of the output projection wo a device holds. */
typedef enum {
    MI_PROJ_NONE = 0,
    MI_PROJ_FULL = 1,  /* all of wo: head outputs are gathered here (HeadSplit) */
    MI_PROJ_HEADS = 2, /* the wo columns of this device's own heads (tensor parallelism) */
    MI_PROJ_ROWS = 3,  /* rows [o0, o0+no) of wo over every head's output: this device's residual
                          columns (CATS somegather) */
} mi_proj_kind;

/* What one device holds of one layer. KV heads need not be contiguous
 * (round-robin and greedy placements scatter them). */
typedef struct {
    int n_kv;                           /* KV heads held, with their query heads */
    unsigned char kv[MI_MAX_KV_HEADS];  /* their ids, ascending */
    int proj;                           /* mi_proj_kind */
    int f0, nf;                         /* FFN units [f0, f0+nf) of hidden_dim (w1, w3 rows) */
    int o0, no;                         /* residual columns [o0, o0+no) this device computes
                                           (somegather: its wo rows, and its w2 rows when w2_rows) */
    int w2_rows;                        /* 1: w2 rows [o0, o0+no) over all hidden units (somegather);
                                           0: the w2 columns of units [f0, f0+nf) (partial sums) */
    /* a mixture of experts (config.h n_experts > 0), held with the FFN (nf > 0, all of it): the
     * router, the shared expert and its gate, and these experts. mi_layer_spec_full holds every
     * expert; expert parallelism places fewer (the router still scores all E, the layer's output
     * is then a partial sum over the experts held, to be reduced over the holders). */
    int n_experts;                      /* experts held */
    unsigned char experts[MI_MAX_EXPERTS]; /* their ids, ascending */
    int no_shared;                      /* 1: the shared expert and its gate are another device's (expert
                                           parallelism places them with one piece, plan.h); 0: held */
} mi_layer_spec;

/* What one device holds of the whole model. */
typedef struct {
    mi_layer_spec *layers;  /* [n_layers] */
    int embeddings;         /* token embeddings and final norm (the controller) */
    int cls_v0, cls_nv;     /* classifier rows [cls_v0, cls_v0+cls_nv) of vocab_size */
    int emb_c0, emb_nc;     /* somegather: columns [emb_c0, emb_c0+emb_nc) of every embedding row
                               (when embeddings == 0; block dtypes hold the blocks covering them) */
    int emb_v0, emb_nv;     /* a split vocabulary (head-level plans): rows [emb_v0, emb_v0+emb_nv) of the
                               token embeddings, every column (when embeddings == 0 and emb_nc == 0); a tied
                               classifier whose rows lie among them is a view of them */
} mi_shard_spec;

/* One layer's weights on this device (only the parts its spec holds; the
 * rest are empty tensors). Every tensor lives in the layer's arena, one
 * mapping per layer, so a re-placement frees a layer with one call and weight
 * streams can use huge pages. */
typedef struct {
    mi_layer_spec spec;
    float *attention_norm;  /* [dim], held with attention or a full projection */
    mi_tensor wq;           /* [n_kv*group*head_dim, dim], held heads stacked in kv order */
    mi_tensor wk, wv;       /* [n_kv*head_dim, dim] */
    /* the time-series family's biases (NULL for a language model), each the rows of its matrix held */
    float *attention_norm_b;/* [dim] */
    float *bq, *bk, *bv;    /* [n_kv*head_dim] */
    float *bo;              /* [dim] (FULL, HEADS) or [no] (ROWS) */
    float *ffn_norm_b;      /* [dim] */
    float *b1;              /* [nf] */
    float *b2;              /* [dim], or [no] with w2_rows */
    float *k_cache, *v_cache; /* [n_kv][seq_len][head_dim] */
    mi_tensor wo;           /* [dim, n_in]: n_in = n_heads*head_dim (FULL) or n_kv*group*head_dim (HEADS);
                               [no, n_heads*head_dim] (ROWS) */
    float *ffn_norm;        /* [dim], held with the FFN */
    /* the traits' vectors (NULL where the family has none) */
    float *q_norm, *k_norm; /* [head_dim] RMSNorm of each q and k head (qk_norm), held with attention */
    float *post_attn_norm;  /* [dim] norm of the attention output (post_norms), held with the projection */
    float *post_ffn_norm;   /* [dim] norm of the FFN output (post_norms), held with the FFN */
    mi_tensor w1, w3;       /* [nf, dim] (no w3 in the time-series family: its MLP is gelu(w1 x + b1)) */
    mi_tensor w2;           /* [dim, nf]: a column block of w2; [no, hidden_dim] with w2_rows */
    /* a mixture of experts (config.h), held with the FFN; w1, w2, w3 are then empty */
    mi_tensor router;       /* [n_experts, dim], every expert's row */
    mi_tensor ew1, ew3;     /* [spec.n_experts * hidden_dim, dim]: held expert i's rows i*hidden_dim .. */
    mi_tensor ew2;          /* [spec.n_experts * dim, hidden_dim]: held expert i's w2 rows i*dim .. */
    mi_tensor sw1, sw3;     /* [shared_hidden_dim, dim] the shared expert (empty without one) */
    mi_tensor sw2;          /* [dim, shared_hidden_dim] */
    float *shared_gate;     /* [dim] the shared expert's gate, sigmoid(shared_gate . x) */
    void *arena;            /* the layer's weights */
    size_t arena_bytes;
} mi_layer;

typedef struct {
    mi_config cfg;
    int has_embeddings;
    mi_tensor tok_embeddings; /* [vocab_size, dim] when held; [vocab_size, covering columns] for a
                                 somegather column slice */
    int emb_c0, emb_nc;     /* the embedding columns held: [emb_c0, emb_c0+emb_nc) of dim */
    int emb_skip;           /* column of tok_embeddings where emb_c0 is (the covering blocks start earlier) */
    int emb_v0, emb_nv;     /* the vocabulary rows held: tok_embeddings row i is token emb_v0 + i (a split
                               vocabulary holds some; otherwise 0 and vocab_size) */
    float *norm;            /* [dim] final RMSNorm, held with embeddings or a classifier slice */
    float *norm_b;          /* [dim] its bias (LayerNorm families), else NULL */
    int cls_v0, cls_nv;
    mi_tensor classifier;   /* [cls_nv, dim]; may be a view of rows of tok_embeddings when tied */
    /* the time-series family (docs/patchtst.md): patches instead of tokens, a forecasting head instead
     * of the classifier; every device that embeds holds the whole patch embedding (dim * patch_len) */
    mi_tensor patch_embed;  /* [dim, patch_len] */
    float *patch_embed_b;   /* [dim] */
    float *pos_embed;       /* [seq_len (n_patches), dim]: also GPT-2's learned positions (pos_embed trait) */
    float *cls_b;           /* [cls_nv] the head's bias rows (classifier: head rows [cls_nv, n_patches*dim]) */
    int cls_alias;          /* classifier points into tok_embeddings */
    void *arena;            /* embeddings, final norm and classifier */
    size_t arena_bytes;
    mi_layer *layers;       /* [n_layers] */
    mi_rope_table rope;     /* the global layers' (all layers' without a sliding window) */
    mi_rope_table rope_local; /* the local layers' (its own base), when the family has them */
    float *rope_freqs;      /* [head_dim/2] the global table's frequency divisors (rope_freqs trait), else NULL */
    size_t weight_bytes;    /* bytes of weights held (what this device must store) */
    size_t kv_bytes;        /* bytes of KV cache allocated */
} mi_model;

/* Where shard bytes come from. The loader asks for stored rows of datasets
 * (a tensor, or the qs / d part of a block-format one; model_file.h) as raw
 * bytes: bytes [byte0, byte0+nbytes) of each row of row_bytes bytes (whole
 * rows: byte0 = 0, nbytes = row_bytes), in a fixed order (the same on every
 * rank for a given spec), so the same routine serves reading the HDF5 file
 * and receiving a shard from rank 0 (--weights scatter). fetch returns 0 or
 * -1 with err set. When discard is set the loader drops every piece right
 * after fetching it (rank 0 streaming another rank's shard). */
typedef struct {
    int (*fetch)(void *ctx, const char *dataset, size_t row0, size_t nrows, size_t row_bytes, size_t byte0,
                 size_t nbytes, void *out, char *err);
    void *ctx;
    int discard;
} mi_weight_source;

/* A source reading hyperslabs from an open model file. */
mi_weight_source mi_weight_source_file(mi_model_file *mf);

/* Spec for holding one whole layer (single device or layer-wise pipeline). */
mi_layer_spec mi_layer_spec_full(const mi_config *c);

/* Spec for holding everything: all layers, embeddings and the classifier.
 * layers must hold n_layers entries. */
mi_shard_spec mi_shard_spec_full(const mi_config *c, mi_layer_spec *layers);

/* The stored embedding columns [*a, *b) a device holding columns [c0, c0+nc)
 * loads: those columns, widened to whole blocks for a block dtype. */
void mi_emb_cover(const mi_config *c, int c0, int nc, int *a, int *b);

/* Bytes of weights a spec holds in the model's dtypes (what mi_model_load
 * stores), excluding the KV cache. */
size_t mi_shard_weight_bytes(const mi_config *c, const mi_shard_spec *spec);

/* KV-cache bytes a spec needs for seq_len positions. */
size_t mi_shard_kv_bytes(const mi_config *c, const mi_shard_spec *spec);

/* Load the parts listed in spec from src (reading only those row ranges) and
 * allocate the KV cache of the held KV heads for seq_len positions.
 * Returns 0, or -1 with err set (read failure, ids or ranges outside the
 * model, or a column shard of wo or w2 that would cut a q8_0/q4_0 block). */
int mi_model_load(mi_model *m, const mi_weight_source *src, const mi_config *cfg, const mi_shard_spec *spec,
                  char *err);

/* Convenience: open path and load everything. mi_fatal on error. Also loads
 * the tokenizer into tok when tok != NULL. */
void mi_model_load_path(mi_model *m, const char *path, mi_tokenizer *tok);

/* Every weight m holds finite (files are checked whole; `meshinfer
 * check`): the embeddings, norms, classifier and every layer matrix, read
 * row by row in their dtype. Sets *n_weights (may be NULL) to the values
 * checked. Returns 0, or -1 with one line in err naming path, the tensor
 * and the first bad element. */
int mi_model_check_finite(const mi_model *m, const char *path, size_t *n_weights, char *err);

void mi_model_free(mi_model *m);

/* Columns [emb_c0, emb_c0+emb_nc) of token tok's embedding at position pos
 * into out[emb_nc] (the whole row for a device holding all embeddings):
 * the embedding row times emb_scale, plus the learned position's row where
 * the family has one. A token outside the rows m holds ([emb_v0,
 * emb_v0+emb_nv), a split vocabulary) gives a row of zeros. */
void mi_model_embed(const mi_model *m, int tok, int pos, float *out);

/* Free layer l's weights and KV cache (its arena), leaving it empty. */
void mi_layer_free(mi_layer *L);

/* Voltron §4.3.1 "computation scaling": re-encode layer L's weight matrices
 * (the ones it holds) in dtypes to[MI_N_LAYER_MATS] (mi_layer_mat order),
 * in a new arena that replaces the old one; norms and KV cache stay. Lowering
 * goes through fp32 (mi_tensor_convert); raising precision cannot restore
 * what was lost, so a caller that wants the stored weights back reloads the
 * layer. Returns 0, or -1 with err when a blocked dtype does not fit a held
 * matrix's columns (a tensor-parallel shard of wo or w2 not a multiple of
 * 32); L is then unchanged. */
int mi_layer_convert(mi_layer *L, int dim, const unsigned char *to, char *err);

/* Clear the KV cache (start a new sequence). */
void mi_model_reset(mi_model *m);

#endif
