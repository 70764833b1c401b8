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
/* A mixture-of-experts layer's matrices besides the experts' (whose dtypes
 * are the dtype table's w1, w2, w3 columns): the router and the shared expert. */
enum { MI_MOE_ROUTER, MI_MOE_SW1, MI_MOE_SW2, MI_MOE_SW3, MI_N_MOE_MATS };
#define MI_MAX_EXPERTS 128

/* Model families. A language model's family is a name plus the traits
 * below (mi_config_set_family); the blocks read the traits, never the name. */
typedef enum {
    MI_FAMILY_LLAMA = 0,    /* Llama 2/3, TinyLlama: RMSNorm, RoPE, causal attention, SwiGLU FFN */
    MI_FAMILY_PATCHTST = 1, /* CATS's workload: patch embedding, LayerNorm with bias, non-causal
                               attention with biases, GELU MLP with biases, a linear forecasting head
                               over all patches (vocab_size = horizon, seq_len = n_patches) */
    MI_FAMILY_QWEN2 = 2,    /* Qwen1.5, Qwen2.5: Llama with biases on q, k, v */
    MI_FAMILY_QWEN3 = 3,    /* Qwen3: Llama with RMSNorm of each q and k head; head_dim free of dim */
    MI_FAMILY_GEMMA3 = 4,   /* Gemma 3: GeGLU, norms after attention and FFN too, scaled embeddings,
                               q/k norms, sliding-window (local) layers between global ones */
    MI_FAMILY_GPT2 = 5,     /* GPT-2: LayerNorm with bias, GELU MLP, learned positions, biases */
    MI_FAMILY_QWEN2MOE = 6, /* Qwen1.5-MoE, Qwen2-MoE: Qwen2's attention, every FFN a mixture of experts
                               with a shared expert (the moe fields below) */
    MI_FAMILY_QWEN3MOE = 7, /* Qwen3-MoE: Qwen3's attention, every FFN a mixture of routed experts */
    MI_N_FAMILIES
} mi_family;

/* "llama", "patchtst", "qwen2", "qwen3", "gemma3", "gpt2", "qwen2moe", "qwen3moe". */
const char *mi_family_name(int family);
/* The family named s (as mi_family_name), or -1. */
int mi_family_parse(const char *s);
/* The language-model families, comma-separated, for messages and --help. */
const char *mi_family_names(void);

/* Norms, FFN activations and rotary embeddings of the families' blocks. */
typedef enum { MI_NORMK_RMS = 0, MI_NORMK_LAYER = 1 } mi_norm_type; /* LAYER: mean-centred, with bias */
typedef enum {
    MI_FFNK_SWIGLU = 0,  /* w2 (silu(w1 x) * w3 x) */
    MI_FFNK_GELU_ERF,    /* w2 gelu(w1 x + b1) + b2, exact GELU (the time-series family) */
    MI_FFNK_GEGLU,       /* w2 (gelu_tanh(w1 x) * w3 x) (Gemma) */
    MI_FFNK_GELU_TANH,   /* w2 gelu_tanh(w1 x + b1) + b2 (GPT-2's "gelu_new") */
} mi_ffn_type;
/* (0 is every zeroed config's: Llama's, as llama2.c files have always run) */
typedef enum {
    MI_ROPE_PAIRS = 0,   /* rotate pairs (2i, 2i+1) of a head: Meta's and llama2.c's order, GGUF llama */
    MI_ROPE_HALVES,      /* rotate pairs (i, i + head_dim/2): Hugging Face's rotate_half, GGUF NEOX */
    MI_ROPE_NONE,        /* no rotary embedding (learned or patch positions) */
} mi_rope_type;
typedef struct {
    int family;         /* mi_family */
    int dim;            /* d_model */
    int hidden_dim;     /* FFN inner width (a mixture of experts: the width of one expert) */
    int n_layers;
    int n_heads;        /* query heads */
    int n_kv_heads;     /* key/value heads (grouped-query attention when < n_heads) */
    int head_dim;       /* width of one head: dim / n_heads, or the family's own (Qwen3, Gemma 3) */
    int vocab_size;
    int seq_len;        /* context length: positions 0 .. seq_len-1 */
    int kv_slots;       /* KV cache slots: sequences held at once, each seq_len positions (serve's
                           batch); 0 or 1: one. Not a property of the file: the session sets it */
    float rope_theta;   /* RoPE base (of the global layers when some are local) */
    float norm_eps;     /* RMSNorm (or LayerNorm) epsilon */
    int shared_classifier; /* 1: logits use tok_embeddings (tied), 0: separate classifier */
    int synthetic;      /* 1: seeded random weights, not a trained model */
    char name[64];      /* shape name or source, e.g. "stories15M" */
    /* Precision of each stored weight matrix (mi_dtype; all 0 = fp32), as the
     * model file holds it. Norms are always fp32. */
    unsigned char dtype[MI_MAX_LAYERS][MI_N_LAYER_MATS];
    unsigned char emb_dtype; /* token embeddings */
    unsigned char cls_dtype; /* classifier (the embeddings' dtype when shared) */
    /* The family's traits (mi_config_set_family sets its defaults; files store them). */
    unsigned char norm_type;   /* mi_norm_type of every norm */
    unsigned char ffn_type;    /* mi_ffn_type */
    unsigned char rope_type;   /* mi_rope_type */
    unsigned char qkv_bias;    /* biases on q, k, v (wq_b, wk_b, wv_b) */
    unsigned char out_bias;    /* biases on wo and the FFN (wo_b, w1_b, w2_b) */
    unsigned char qk_norm;     /* RMSNorm of every q and k head, weights [head_dim] (q_norm, k_norm) */
    unsigned char post_norms;  /* attention and FFN outputs normed before they join the residual
                                  (post_attention_norm, post_ffn_norm) */
    unsigned char pos_embed;   /* learned absolute positions pos_embed [seq_len, dim] added to the embeddings */
    unsigned char rope_freqs;  /* /rope_freqs [head_dim/2]: each frequency divided by its factor (Llama 3's
                                  RoPE scaling, linear scaling) in the global layers */
    float emb_scale;           /* embeddings multiplied by this (Gemma: sqrt(dim)); 0: 1 */
    float attn_scale;          /* scores multiplied by this; 0: 1/sqrt(head_dim) */
    float rope_theta_local;    /* RoPE base of the local layers (0: rope_theta) */
    int sliding_window;        /* local layers attend to the last sliding_window positions; 0: none */
    int swa_period;            /* layer l is global when (l+1) % swa_period == 0, else local; 0: all global */
    /* Mixture of experts (n_experts > 0, the MoE families): every layer's FFN is a router
     * [n_experts, dim], softmax over its logits (fp32), the top n_experts_used experts (ties: the
     * lower index first), their weights renormalised to sum 1 when norm_topk_prob, the sum of the
     * chosen experts' SwiGLU FFNs (width hidden_dim) times their weights, plus a shared expert
     * (SwiGLU of width shared_hidden_dim) times sigmoid(shared_gate . x) when shared_hidden_dim > 0. */
    int n_experts;             /* routed experts per layer (E), 0: a dense FFN */
    int n_experts_used;        /* experts each token runs (k, 1 <= k <= E) */
    int shared_hidden_dim;     /* width of the shared expert, 0: none */
    unsigned char norm_topk_prob; /* 1: the k routing weights renormalised to sum 1 */
    unsigned char moe_dtype[MI_MAX_LAYERS][MI_N_MOE_MATS]; /* dtypes of the router and the shared expert */
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
/* A mixture-of-experts layer's (model_file.h): by MI_W1, MI_W2, MI_W3 the
 * stacked experts experts_w1, experts_w2, experts_w3 (other indices NULL), and
 * by MI_MOE_* router, shared_w1, shared_w2_t, shared_w3. */
extern const char *const mi_expert_mat_names[MI_N_LAYER_MATS];
extern const char *const mi_moe_mat_names[MI_N_MOE_MATS];

/* 1 when c's FFNs are mixtures of experts. */
static inline int mi_config_is_moe(const mi_config *c) { return c->n_experts > 0; }

/* Check that the values fit together (positive sizes, n_heads divisible by
 * n_kv_heads, dim == n_heads * head_dim, even head_dim for RoPE, sane limits,
 * known dtypes, and block dtypes only where their blocked axis is a multiple
 * of 32; experts only in the MoE families, which need them: 1 <= k <= E <=
 * MI_MAX_EXPERTS, a SwiGLU FFN). Returns 0, or -1 with one line naming the
 * offending field in err (MI_ERRLEN). */
int mi_config_validate(const mi_config *c, char *err);

/* Fill c's family and its traits' defaults (the sizes stay). */
void mi_config_set_family(mi_config *c, int family);

/* 1 when layer l attends through a sliding window (a local layer). */
static inline int mi_config_layer_local(const mi_config *c, int l)
{
    return c->sliding_window > 0 && (c->swa_period <= 0 || (l + 1) % c->swa_period != 0);
}

/* 1 for the language-model families (tokens in, logits out). */
/* KV cache slots, and the positions one KV head's cache holds: its slots one
 * after another, slot s at [s * seq_len, (s + 1) * seq_len). */
static inline int mi_config_kv_slots(const mi_config *c) { return c->kv_slots > 1 ? c->kv_slots : 1; }
static inline size_t mi_config_kv_stride(const mi_config *c)
{
    return (size_t)mi_config_kv_slots(c) * (size_t)c->seq_len;
}
static inline int mi_config_is_lm(const mi_config *c) { return c->family != MI_FAMILY_PATCHTST; }

/* Width of the attention heads side by side: n_heads * head_dim (equal to
 * dim except where the family frees head_dim, e.g. Qwen3 and Gemma 3). */
static inline int mi_q_dim(const mi_config *c) { return c->n_heads * c->head_dim; }

/* Query heads that share one KV head (n_heads / n_kv_heads). */
static inline int mi_kv_group(const mi_config *c) { return c->n_heads / c->n_kv_heads; }
/* Width of the K (or V) projection output: n_kv_heads * head_dim. */
static inline int mi_kv_dim(const mi_config *c) { return c->n_kv_heads * c->head_dim; }

/* Parameter counts (elements) of one layer and the whole model, including the
 * separate classifier when not shared. Used for memory predictions and for
 * effective-bandwidth figures in benchmarks. A mixture of experts counts
 * every expert (all are stored). */
size_t mi_layer_params(const mi_config *c);
size_t mi_model_params(const mi_config *c);

/* Weight elements read from memory per decoded token: every layer matrix plus
 * the classifier (the embedding row read is negligible). A mixture of
 * experts reads its router, the n_experts_used experts a token is routed to
 * (k of E) and the shared expert, not every expert. */
size_t mi_decode_weight_elems(const mi_config *c);

/* Bytes of those weights in their stored dtypes (what a decoded token
 * streams; k of E experts, as mi_decode_weight_elems). */
size_t mi_decode_weight_bytes(const mi_config *c);

/* Bytes (in their dtypes) of n_exp experts of layer l (w1, w3 rows and w2),
 * and of the MoE layer's parts every holder of its experts keeps: the router
 * and the shared expert with its float32 gate. */
size_t mi_experts_bytes(const mi_config *c, int l, int n_exp);
size_t mi_moe_common_bytes(const mi_config *c, int l);
/* Of mi_moe_common_bytes, the shared expert's and its gate's (0 without one). */
size_t mi_moe_shared_bytes(const mi_config *c, int l);

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
 * slice of the FFN must start and end on a multiple of mi_ffn_align (w2's
 * mi_dtype_block: 32 for q8_0/q4_0, 256 for the k-quants, else 1), and the KV-head groups whose wo columns one
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

/* Llama 3's RoPE scaling as frequency divisors (config.h rope_freqs):
 * out[i] for i < head_dim/2 divides theta^(-2i/head_dim); wavelengths
 * shorter than orig_ctx/high keep their frequency, longer than orig_ctx/low
 * are divided by factor, and those between blend smoothly (Meta's
 * apply_scaling). */
void mi_rope_llama3_factors(int head_dim, float theta, float factor, float low, float high, int orig_ctx,
                            float *out);

/* The float32 tensors c's traits add (model_file.h, format 4) to layer l
 * (-1: the model's own, e.g. norm_b, pos_embed, rope_freqs): their names
 * (without the layer's path) and shapes [rows, cols] (a vector: cols 1).
 * Returns how many (at most MI_MAX_TRAIT_TENSORS). */
#define MI_MAX_TRAIT_TENSORS 16
int mi_config_trait_tensors(const mi_config *c, int l, const char **names, size_t *rows, size_t *cols);

/* Comma-separated list of shape names, for --help text. */
const char *mi_config_shape_names(void);

#endif
