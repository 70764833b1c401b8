/* Model configuration checks and known shapes (see config.h). */
#include "meshinfer/config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "meshinfer/common.h"

const char *const mi_layer_mat_names[MI_N_LAYER_MATS] = {"wq", "wk", "wv", "wo_t", "w1", "w2_t", "w3"};
const char *const mi_expert_mat_names[MI_N_LAYER_MATS] = {[MI_W1] = "experts_w1", [MI_W2] = "experts_w2",
                                                          [MI_W3] = "experts_w3"};
const char *const mi_moe_mat_names[MI_N_MOE_MATS] = {"router", "shared_w1", "shared_w2_t", "shared_w3"};

/* Length of the axis a layer matrix is blocked along (the input of its
 * matrix-vector product). */
static int blocked_axis(const mi_config *c, int mat)
{
    return mat == MI_WO ? c->n_heads * c->head_dim : mat == MI_W2 ? c->hidden_dim : c->dim;
}

static int check_dtype(int t, int axis, const char *what, int layer, char *err)
{
    char where[32] = "";
    if (layer >= 0)
        snprintf(where, sizeof where, "layer %d ", layer);
    if (t < 0 || t >= MI_N_DTYPES)
        return mi_set_error(err, "config: %s%s has unknown dtype %d", where, what, t);
    if (mi_dtype_blocked(t) && axis % mi_dtype_block(t) != 0)
        return mi_set_error(err, "config: %s%s is %s, but its blocked axis of %d is not a multiple of %d", where,
                            what, mi_dtype_name(t), axis, mi_dtype_block(t));
    return 0;
}

static const char *const family_names[MI_N_FAMILIES] = {"llama", "patchtst", "qwen2",   "qwen3",
                                                        "gemma3", "gpt2",     "qwen2moe", "qwen3moe"};

const char *mi_family_name(int family)
{
    return family >= 0 && family < MI_N_FAMILIES ? family_names[family] : "unknown";
}

int mi_family_parse(const char *s)
{
    for (int f = 0; f < MI_N_FAMILIES; f++)
        if (strcmp(s, family_names[f]) == 0)
            return f;
    return -1;
}

const char *mi_family_names(void)
{
    return "llama, qwen2, qwen3, gemma3, gpt2, qwen2moe, qwen3moe";
}

void mi_config_set_family(mi_config *c, int family)
{
    c->family = family;
    c->norm_type = family == MI_FAMILY_PATCHTST || family == MI_FAMILY_GPT2 ? MI_NORMK_LAYER : MI_NORMK_RMS;
    c->ffn_type = family == MI_FAMILY_PATCHTST ? MI_FFNK_GELU_ERF
                  : family == MI_FAMILY_GEMMA3 ? MI_FFNK_GEGLU
                  : family == MI_FAMILY_GPT2   ? MI_FFNK_GELU_TANH
                                               : MI_FFNK_SWIGLU;
    c->rope_type = family == MI_FAMILY_PATCHTST || family == MI_FAMILY_GPT2 ? MI_ROPE_NONE
                   : family == MI_FAMILY_LLAMA                           ? MI_ROPE_PAIRS
                                                                         : MI_ROPE_HALVES;
    c->qkv_bias = family == MI_FAMILY_PATCHTST || family == MI_FAMILY_QWEN2 || family == MI_FAMILY_GPT2 ||
                  family == MI_FAMILY_QWEN2MOE;
    c->out_bias = family == MI_FAMILY_PATCHTST || family == MI_FAMILY_GPT2;
    c->qk_norm = family == MI_FAMILY_QWEN3 || family == MI_FAMILY_GEMMA3 || family == MI_FAMILY_QWEN3MOE;
    c->post_norms = family == MI_FAMILY_GEMMA3;
    c->pos_embed = family == MI_FAMILY_PATCHTST || family == MI_FAMILY_GPT2;
    c->emb_scale = family == MI_FAMILY_GEMMA3 && c->dim > 0 ? sqrtf((float)c->dim) : 0.0f;
}

/* The traits' own ranges, and the ones a family's blocks need. */
static int validate_traits(const mi_config *c, char *err)
{
    if (c->norm_type > MI_NORMK_LAYER || c->ffn_type > MI_FFNK_GELU_TANH || c->rope_type > MI_ROPE_NONE)
        return mi_set_error(err, "config: unknown norm, FFN or RoPE type (%d, %d, %d)", c->norm_type, c->ffn_type,
                            c->rope_type);
    if (c->qkv_bias > 1 || c->out_bias > 1 || c->qk_norm > 1 || c->post_norms > 1 || c->pos_embed > 1 ||
        c->rope_freqs > 1)
        return mi_set_error(err, "config: a trait flag (qkv_bias, out_bias, qk_norm, post_norms, pos_embed, "
                                 "rope_freqs) is not 0 or 1");
    if (!(c->emb_scale >= 0.0f && c->emb_scale < 1e6f) || !(c->attn_scale >= 0.0f && c->attn_scale < 1e6f) ||
        !(c->rope_theta_local >= 0.0f && c->rope_theta_local < 1e12f))
        return mi_set_error(err, "config: emb_scale = %g, attn_scale = %g or rope_theta_local = %g is out of range",
                            (double)c->emb_scale, (double)c->attn_scale, (double)c->rope_theta_local);
    if (c->sliding_window < 0 || c->swa_period < 0 || c->swa_period > c->n_layers)
        return mi_set_error(err, "config: sliding_window = %d or swa_period = %d is out of range", c->sliding_window,
                            c->swa_period);
    if (c->rope_freqs && c->rope_type == MI_ROPE_NONE)
        return mi_set_error(err, "config: rope_freqs without a rotary embedding");
    return 0;
}

/* The time-series family's own fields (docs/patchtst.md): patches tile the
 * look-back exactly, and its head and attention reuse the vocabulary and
 * context fields. Float32 only: its weights are a few hundred kilobytes. */
static int patchtst_ranges(const mi_config *c, char *err)
{
    /* bounded so that one channel's look-back and patches stay a few megabytes */
    struct { const char *name; int v; int hi; } f[] = {
        {"patch_len", c->patch_len, 4096}, {"patch_stride", c->patch_stride, 4096},
        {"lookback", c->lookback, 1 << 16}, {"horizon", c->horizon, 1 << 16},
        {"n_channels", c->n_channels, 1 << 16},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v <= 0 || f[i].v > f[i].hi)
            return mi_set_error(err, "config: %s = %d is outside [1, %d]", f[i].name, f[i].v, f[i].hi);
    return 0;
}

static int validate_patchtst(const mi_config *c, char *err)
{
    if (c->lookback < c->patch_len || (c->lookback - c->patch_len) % c->patch_stride != 0)
        return mi_set_error(err, "config: lookback = %d is not patch_len = %d plus a multiple of patch_stride = %d",
                            c->lookback, c->patch_len, c->patch_stride);
    int n = (c->lookback - c->patch_len) / c->patch_stride + 1;
    if (c->seq_len != n)
        return mi_set_error(err, "config: %d patches, but seq_len = %d", n, c->seq_len);
    if (c->vocab_size != c->horizon)
        return mi_set_error(err, "config: the head has %d outputs, but horizon = %d", c->vocab_size, c->horizon);
    if (c->n_kv_heads != c->n_heads)
        return mi_set_error(err, "config: n_kv_heads = %d must equal n_heads = %d in the time-series family",
                            c->n_kv_heads, c->n_heads);
    /* its model files hold float32 (model_file.c checks every tensor); other
     * dtypes are for the memory model's questions (int8 weights on a
     * microcontroller, CATS's feasibility), never loaded; the patch
     * embedding is counted in float32 whatever emb_dtype says */
    for (int l = 0; l < c->n_layers; l++)
        for (int m = 0; m < MI_N_LAYER_MATS; m++)
            if (check_dtype(c->dtype[l][m], blocked_axis(c, m), mi_layer_mat_names[m], l, err))
                return -1;
    return check_dtype(c->cls_dtype, c->seq_len * c->dim, "head", -1, err);
}

static int family_is_moe(int family)
{
    return family == MI_FAMILY_QWEN2MOE || family == MI_FAMILY_QWEN3MOE;
}

/* The experts' counts and widths, and the dtypes of the router and the
 * shared expert (the experts' own are the dtype table's w1, w2, w3). */
static int validate_moe(const mi_config *c, char *err)
{
    if (!family_is_moe(c->family)) {
        if (c->n_experts || c->n_experts_used || c->shared_hidden_dim || c->norm_topk_prob)
            return mi_set_error(err, "config: family %s has no experts, but n_experts = %d", mi_family_name(c->family),
                                c->n_experts);
        return 0;
    }
    if (c->n_experts < 1 || c->n_experts > MI_MAX_EXPERTS)
        return mi_set_error(err, "config: n_experts = %d is outside [1, %d]", c->n_experts, MI_MAX_EXPERTS);
    if (c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
        return mi_set_error(err, "config: n_experts_used = %d is outside [1, n_experts = %d]", c->n_experts_used,
                            c->n_experts);
    if (c->shared_hidden_dim < 0 || c->shared_hidden_dim > 1 << 18)
        return mi_set_error(err, "config: shared_hidden_dim = %d is outside [0, %d]", c->shared_hidden_dim, 1 << 18);
    if (c->norm_topk_prob > 1)
        return mi_set_error(err, "config: norm_topk_prob = %d is not 0 or 1", c->norm_topk_prob);
    if (c->ffn_type != MI_FFNK_SWIGLU || c->out_bias)
        return mi_set_error(err, "config: the experts of %s are SwiGLU FFNs without biases", mi_family_name(c->family));
    int sh = c->shared_hidden_dim, axis[MI_N_MOE_MATS] = {c->dim, c->dim, sh, c->dim};
    for (int l = 0; l < c->n_layers; l++)
        for (int m = 0; m < MI_N_MOE_MATS; m++)
            if ((m == MI_MOE_ROUTER || sh > 0) &&
                check_dtype(c->moe_dtype[l][m], axis[m], mi_moe_mat_names[m], l, err))
                return -1;
    return 0;
}

int mi_config_validate(const mi_config *c, char *err)
{
    if (c->family < 0 || c->family >= MI_N_FAMILIES)
        return mi_set_error(err, "config: unknown model family %d", c->family);
    /* the family's own fields first: seq_len and vocab_size are derived from them */
    if (c->family == MI_FAMILY_PATCHTST && patchtst_ranges(c, err))
        return -1;
    struct { const char *name; int v; int hi; } f[] = {
        {"dim", c->dim, 1 << 16},          {"hidden_dim", c->hidden_dim, 1 << 18},
        {"n_layers", c->n_layers, 1024},   {"n_heads", c->n_heads, 1024},
        {"n_kv_heads", c->n_kv_heads, 128}, {"head_dim", c->head_dim, 4096},
        {"vocab_size", c->vocab_size, 1 << 20}, {"seq_len", c->seq_len, 1 << 20},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v <= 0 || f[i].v > f[i].hi)
            return mi_set_error(err, "config: %s = %d is outside [1, %d]", f[i].name, f[i].v, f[i].hi);
    if (c->n_heads % c->n_kv_heads != 0)
        return mi_set_error(err, "config: n_heads = %d is not a multiple of n_kv_heads = %d",
                            c->n_heads, c->n_kv_heads);
    /* Qwen3 and Gemma 3 choose head_dim; the others split dim into the heads */
    if (c->family != MI_FAMILY_QWEN3 && c->family != MI_FAMILY_GEMMA3 && c->family != MI_FAMILY_QWEN3MOE &&
        c->n_heads * c->head_dim != c->dim)
        return mi_set_error(err, "config: n_heads * head_dim = %d * %d does not equal dim = %d",
                            c->n_heads, c->head_dim, c->dim);
    if (c->n_layers > MI_MAX_LAYERS)
        return mi_set_error(err, "config: n_layers = %d is more than %d", c->n_layers, MI_MAX_LAYERS);
    if (!(c->norm_eps > 0.0f && c->norm_eps < 1.0f))
        return mi_set_error(err, "config: norm_eps = %g must be in (0, 1)", (double)c->norm_eps);
    if (validate_traits(c, err))
        return -1;
    if (c->family == MI_FAMILY_PATCHTST)
        return validate_patchtst(c, err);
    if (c->seq_len < 2)
        return mi_set_error(err, "config: seq_len = %d leaves no room to generate (needs >= 2)", c->seq_len);
    if (c->rope_type != MI_ROPE_NONE && c->head_dim % 2 != 0)
        return mi_set_error(err, "config: head_dim = %d must be even for RoPE", c->head_dim);
    if (c->rope_type != MI_ROPE_NONE && !(c->rope_theta > 0.0f))
        return mi_set_error(err, "config: rope_theta = %g must be positive", (double)c->rope_theta);
    if (!(c->norm_eps > 0.0f && c->norm_eps < 1.0f))
        return mi_set_error(err, "config: norm_eps = %g must be in (0, 1)", (double)c->norm_eps);
    if (c->vocab_size < 259)
        return mi_set_error(err, "config: vocab_size = %d is too small for byte fallback (needs >= 259)",
                            c->vocab_size);
    if (c->n_layers > MI_MAX_LAYERS)
        return mi_set_error(err, "config: n_layers = %d is more than %d", c->n_layers, MI_MAX_LAYERS);
    if (check_dtype(c->emb_dtype, c->dim, "tok_embeddings", -1, err) ||
        check_dtype(c->cls_dtype, c->dim, "classifier", -1, err))
        return -1;
    if (c->shared_classifier && c->cls_dtype != c->emb_dtype)
        return mi_set_error(err, "config: the classifier shares the embeddings but has dtype %s, not %s",
                            mi_dtype_name(c->cls_dtype), mi_dtype_name(c->emb_dtype));
    for (int l = 0; l < c->n_layers; l++)
        for (int m = 0; m < MI_N_LAYER_MATS; m++)
            if (check_dtype(c->dtype[l][m], blocked_axis(c, m), mi_layer_mat_names[m], l, err))
                return -1;
    return validate_moe(c, err);
}

/* 1 when the FFN has a gate (w3). */
static int gated(const mi_config *c)
{
    return c->ffn_type == MI_FFNK_SWIGLU || c->ffn_type == MI_FFNK_GEGLU;
}

/* Elements of a layer's FFN matrices with n_exp experts (a dense FFN: its w1, w2, w3). */
static size_t ffn_params(const mi_config *c, int n_exp)
{
    size_t d = (size_t)c->dim, h = (size_t)c->hidden_dim;
    if (!mi_config_is_moe(c))
        return (gated(c) ? 3 : 2) * h * d;
    /* the experts, the router, the shared expert and its gate */
    return (size_t)n_exp * 3 * h * d + (size_t)c->n_experts * d +
           (c->shared_hidden_dim > 0 ? 3 * (size_t)c->shared_hidden_dim * d + d : 0);
}

/* One layer's elements with n_exp experts. */
static size_t layer_params(const mi_config *c, int n_exp)
{
    size_t d = (size_t)c->dim, kv = (size_t)mi_kv_dim(c), h = (size_t)c->hidden_dim, q = (size_t)mi_q_dim(c);
    size_t n = 2 * q * d /* wq, wo */ + 2 * kv * d /* wk, wv */ + ffn_params(c, n_exp);
    n += (c->norm_type == MI_NORMK_LAYER ? 4 : 2) * d + (c->post_norms ? 2 * d : 0) +
         (c->qk_norm ? 2 * (size_t)c->head_dim : 0);
    n += (c->qkv_bias ? q + 2 * kv : 0) + (c->out_bias ? 2 * d + h : 0);
    return n;
}

size_t mi_layer_params(const mi_config *c)
{
    return layer_params(c, c->n_experts);
}

size_t mi_model_params(const mi_config *c)
{
    size_t d = (size_t)c->dim, v = (size_t)c->vocab_size;
    if (c->family == MI_FAMILY_PATCHTST) /* patch embedding, positions, layers, head over all patches */
        return d * (size_t)c->patch_len + d + (size_t)c->seq_len * d + (size_t)c->n_layers * mi_layer_params(c) +
               v * (size_t)c->seq_len * d + v;
    return v * d + (size_t)c->n_layers * mi_layer_params(c) + (c->norm_type == MI_NORMK_LAYER ? 2 : 1) * d +
           (c->shared_classifier ? 0 : v * d) + (c->pos_embed ? (size_t)c->seq_len * d : 0);
}

size_t mi_decode_weight_elems(const mi_config *c)
{
    return (size_t)c->n_layers * layer_params(c, c->n_experts_used) + (size_t)c->vocab_size * (size_t)c->dim;
}

static size_t row_bytes(const mi_config *c, int l, int mat, size_t n)
{
    return mi_dtype_row_bytes(c->dtype[l][mat], n);
}

/* Biases are float32, one per output row: of q, k and v (qkv), or of the FFN's w1 (out). */
static size_t bias_bytes(int has, size_t rows)
{
    return has ? rows * sizeof(float) : 0;
}

size_t mi_head_group_bytes(const mi_config *c, int l)
{
    size_t d = (size_t)c->dim, hd = (size_t)c->head_dim, g = (size_t)mi_kv_group(c);
    return g * hd * row_bytes(c, l, MI_WQ, d) + hd * (row_bytes(c, l, MI_WK, d) + row_bytes(c, l, MI_WV, d)) +
           bias_bytes(c->qkv_bias, (g + 2) * hd);
}

size_t mi_proj_bytes(const mi_config *c, int l, int n_kv)
{
    return (size_t)c->dim * row_bytes(c, l, MI_WO, (size_t)n_kv * mi_kv_group(c) * c->head_dim);
}

size_t mi_ffn_bytes(const mi_config *c, int l, int nf)
{
    size_t d = (size_t)c->dim;
    return (size_t)nf * (row_bytes(c, l, MI_W1, d) + mi_w3_row_bytes(c, l)) + d * row_bytes(c, l, MI_W2, (size_t)nf) +
           bias_bytes(c->out_bias, (size_t)nf);
}

size_t mi_w3_row_bytes(const mi_config *c, int l)
{
    return gated(c) ? row_bytes(c, l, MI_W3, (size_t)c->dim) : 0;
}

size_t mi_embedding_bytes(const mi_config *c)
{
    if (c->family == MI_FAMILY_PATCHTST) /* patch embedding, its bias, the positions (fp32) */
        return sizeof(float) * ((size_t)c->dim * (size_t)(c->patch_len + 1) + (size_t)c->seq_len * (size_t)c->dim);
    return (size_t)c->vocab_size * mi_dtype_row_bytes(c->emb_dtype, (size_t)c->dim) +
           (c->pos_embed ? sizeof(float) * (size_t)c->seq_len * (size_t)c->dim : 0);
}

size_t mi_classifier_bytes(const mi_config *c, int rows)
{
    if (c->family == MI_FAMILY_PATCHTST) /* head rows over every patch's features, and their biases */
        return (size_t)rows * mi_dtype_row_bytes(c->cls_dtype, (size_t)c->seq_len * (size_t)c->dim) +
               bias_bytes(1, (size_t)rows);
    return (size_t)rows * mi_dtype_row_bytes(c->cls_dtype, (size_t)c->dim);
}

size_t mi_experts_bytes(const mi_config *c, int l, int n_exp)
{
    size_t d = (size_t)c->dim, h = (size_t)c->hidden_dim;
    return (size_t)n_exp * (h * (row_bytes(c, l, MI_W1, d) + row_bytes(c, l, MI_W3, d)) + d * row_bytes(c, l, MI_W2, h));
}

size_t mi_moe_shared_bytes(const mi_config *c, int l)
{
    size_t d = (size_t)c->dim, sh = (size_t)c->shared_hidden_dim;
    const unsigned char *t = c->moe_dtype[l];
    if (sh == 0)
        return 0;
    return sh * (mi_dtype_row_bytes(t[MI_MOE_SW1], d) + mi_dtype_row_bytes(t[MI_MOE_SW3], d)) +
           d * mi_dtype_row_bytes(t[MI_MOE_SW2], sh) + d * sizeof(float);
}

size_t mi_moe_common_bytes(const mi_config *c, int l)
{
    const unsigned char *t = c->moe_dtype[l];
    return (size_t)c->n_experts * mi_dtype_row_bytes(t[MI_MOE_ROUTER], (size_t)c->dim) + mi_moe_shared_bytes(c, l);
}

size_t mi_decode_weight_bytes(const mi_config *c)
{
    size_t n = mi_classifier_bytes(c, c->vocab_size);
    for (int l = 0; l < c->n_layers; l++)
        n += (size_t)c->n_kv_heads * mi_head_group_bytes(c, l) + mi_proj_bytes(c, l, c->n_kv_heads) +
             (mi_config_is_moe(c) ? mi_moe_common_bytes(c, l) + mi_experts_bytes(c, l, c->n_experts_used)
                                  : mi_ffn_bytes(c, l, c->hidden_dim));
    return n;
}

int mi_ffn_align(const mi_config *c, int l)
{
    int b = mi_dtype_block(c->dtype[l][MI_W2]);
    return b > 1 ? b : 1;
}

int mi_kv_align(const mi_config *c, int l)
{
    int b = mi_dtype_block(c->dtype[l][MI_WO]);
    if (b <= 1)
        return 1;
    int w = mi_kv_group(c) * c->head_dim, k = 1;
    while ((k * w) % b != 0)
        k++;
    return k;
}

const char *mi_config_dtype_summary(const mi_config *c, char *buf, size_t n)
{
    int count[MI_N_DTYPES] = {0}, mixed_layers = 0;
    for (int l = 0; l < c->n_layers; l++) {
        int t = c->dtype[l][0], same = 1;
        for (int m = 1; m < MI_N_LAYER_MATS; m++)
            same &= c->dtype[l][m] == t;
        if (same)
            count[t]++;
        else
            mixed_layers++;
    }
    for (int t = 0; t < MI_N_DTYPES; t++)
        if (count[t] == c->n_layers && c->emb_dtype == t && c->cls_dtype == t) {
            snprintf(buf, n, "%s", mi_dtype_name(t));
            return buf;
        }
    size_t k = (size_t)snprintf(buf, n, "mixed:");
    for (int t = 0; t < MI_N_DTYPES && k < n; t++)
        if (count[t])
            k += (size_t)snprintf(buf + k, n - k, " %s x%d,", mi_dtype_name(t), count[t]);
    if (mixed_layers && k < n)
        k += (size_t)snprintf(buf + k, n - k, " mixed x%d,", mixed_layers);
    if (k < n)
        k += (size_t)snprintf(buf + k, n - k, " layers; embeddings %s", mi_dtype_name(c->emb_dtype));
    if (!c->shared_classifier && k < n)
        snprintf(buf + k, n - k, ", classifier %s", mi_dtype_name(c->cls_dtype));
    return buf;
}

size_t mi_kv_cache_bytes(const mi_config *c, int n_pos)
{
    return 2 * sizeof(float) * (size_t)c->n_layers * (size_t)n_pos * (size_t)mi_kv_dim(c);
}

static const struct {
    const char *name;
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len, shared;
} shapes[] = {
    /* llama2.c TinyStories checkpoints */
    {"stories15M", 288, 768, 6, 6, 6, 32000, 256, 1},
    {"stories42M", 512, 1376, 8, 8, 8, 32000, 1024, 1},
    {"stories110M", 768, 2048, 12, 12, 12, 32000, 1024, 1},
    /* TinyLlama-1.1B, the seeds' model: grouped-query attention, 4 KV heads */
    {"tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, 2048, 0},
    /* small GQA model that keeps MPI tests fast */
    {"tiny-gqa", 128, 320, 4, 8, 2, 512, 128, 0},
    /* the k-quants' shape: every matrix axis whole super-blocks of 256 (dim 256, hidden 768) */
    {"tiny-kquant", 256, 768, 4, 4, 4, 512, 128, 0},
};

/* The papers' and users' model families at their real shapes (synthetic
 * weights) and tiny ones that keep the tests fast; seq_len is the context
 * meshinfer runs, not the longest the model was trained for. */
static const struct {
    const char *name;
    int family, dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, vocab_size, seq_len;
    float theta, theta_local;
    int window, period, llama3_rope;
} family_shapes[] = {
    {"tiny-llama3", MI_FAMILY_LLAMA, 128, 384, 4, 8, 2, 16, 512, 128, 500000.0f, 0, 0, 0, 1},
    {"tiny-qwen2", MI_FAMILY_QWEN2, 128, 320, 4, 8, 2, 16, 512, 128, 1e6f, 0, 0, 0, 0},
    {"tiny-qwen3", MI_FAMILY_QWEN3, 128, 320, 4, 8, 2, 32, 512, 128, 1e6f, 0, 0, 0, 0},
    {"tiny-gemma3", MI_FAMILY_GEMMA3, 128, 320, 6, 4, 1, 64, 512, 128, 1e6f, 10000.0f, 8, 3, 0},
    {"tiny-gpt2", MI_FAMILY_GPT2, 128, 512, 4, 4, 4, 32, 512, 128, 0, 0, 0, 0, 0},
    {"llama-3.2-1b", MI_FAMILY_LLAMA, 2048, 8192, 16, 32, 8, 64, 128256, 2048, 500000.0f, 0, 0, 0, 1},
    {"qwen2.5-0.5b", MI_FAMILY_QWEN2, 896, 4864, 24, 14, 2, 64, 151936, 2048, 1e6f, 0, 0, 0, 0},
    {"qwen3-0.6b", MI_FAMILY_QWEN3, 1024, 3072, 28, 16, 8, 128, 151936, 2048, 1e6f, 0, 0, 0, 0},
    {"gemma3-1b", MI_FAMILY_GEMMA3, 1152, 6912, 26, 4, 1, 256, 262144, 2048, 1e6f, 10000.0f, 512, 6, 0},
    {"gpt2", MI_FAMILY_GPT2, 768, 3072, 12, 12, 12, 64, 50257, 1024, 0, 0, 0, 0, 0},
    /* mixtures of experts (the experts below): hidden_dim is one expert's width */
    {"tiny-qwen2moe", MI_FAMILY_QWEN2MOE, 128, 64, 4, 8, 2, 16, 512, 128, 1e6f, 0, 0, 0, 0},
    {"qwen1.5-moe-a2.7b", MI_FAMILY_QWEN2MOE, 2048, 1408, 24, 16, 16, 128, 151936, 2048, 1e6f, 0, 0, 0, 0},
};

void mi_rope_llama3_factors(int head_dim, float theta, float factor, float low, float high, int orig_ctx,
                            float *out)
{
    double lo_wavelen = orig_ctx / low, hi_wavelen = orig_ctx / high;
    for (int i = 0; i < head_dim / 2; i++) {
        double freq = 1.0 / pow(theta, 2.0 * i / head_dim), wavelen = 2.0 * 3.14159265358979323846 / freq, scaled;
        if (wavelen < hi_wavelen)
            scaled = freq;
        else if (wavelen > lo_wavelen)
            scaled = freq / factor;
        else {
            double smooth = (orig_ctx / wavelen - low) / (high - low);
            scaled = (1.0 - smooth) * freq / factor + smooth * freq;
        }
        out[i] = (float)(freq / scaled);
    }
}

/* The experts of the MoE shapes above: E, k, the shared expert's width, norm_topk_prob (Qwen1.5-MoE-A2.7B:
 * 60 experts of 1408, top 4 not renormalised, a shared expert of 5632). */
static const struct {
    const char *name;
    int n_experts, n_used, shared, norm_topk, tied;
} moe_shapes[] = {
    {"tiny-qwen2moe", 8, 2, 128, 0, 1},
    {"qwen1.5-moe-a2.7b", 60, 4, 5632, 0, 0},
};

static int family_shape(const char *shape, mi_config *c)
{
    for (size_t i = 0; i < sizeof family_shapes / sizeof family_shapes[0]; i++) {
        if (strcmp(family_shapes[i].name, shape) != 0)
            continue;
        memset(c, 0, sizeof *c);
        c->dim = family_shapes[i].dim;
        mi_config_set_family(c, family_shapes[i].family);
        c->hidden_dim = family_shapes[i].hidden_dim;
        c->n_layers = family_shapes[i].n_layers;
        c->n_heads = family_shapes[i].n_heads;
        c->n_kv_heads = family_shapes[i].n_kv_heads;
        c->head_dim = family_shapes[i].head_dim;
        c->vocab_size = family_shapes[i].vocab_size;
        c->seq_len = family_shapes[i].seq_len;
        c->rope_theta = family_shapes[i].theta;
        c->rope_theta_local = family_shapes[i].theta_local;
        c->sliding_window = family_shapes[i].window;
        c->swa_period = family_shapes[i].period;
        c->rope_freqs = (unsigned char)family_shapes[i].llama3_rope;
        c->norm_eps = c->family == MI_FAMILY_GPT2 ? 1e-5f : 1e-6f;
        c->shared_classifier = 1;
        c->synthetic = 1;
        strncpy(c->name, shape, sizeof c->name - 1);
        for (size_t j = 0; j < sizeof moe_shapes / sizeof moe_shapes[0]; j++)
            if (!strcmp(moe_shapes[j].name, shape)) {
                c->n_experts = moe_shapes[j].n_experts;
                c->n_experts_used = moe_shapes[j].n_used;
                c->shared_hidden_dim = moe_shapes[j].shared;
                c->norm_topk_prob = (unsigned char)moe_shapes[j].norm_topk;
                c->shared_classifier = moe_shapes[j].tied;
            }
        return 0;
    }
    return -1;
}

int mi_config_from_shape(const char *shape, mi_config *c)
{
    if (family_shape(shape, c) == 0)
        return 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (strcmp(shapes[i].name, shape) != 0)
            continue;
        memset(c, 0, sizeof *c);
        c->dim = shapes[i].dim;
        c->hidden_dim = shapes[i].hidden_dim;
        c->n_layers = shapes[i].n_layers;
        c->n_heads = shapes[i].n_heads;
        c->n_kv_heads = shapes[i].n_kv_heads;
        c->head_dim = c->dim / c->n_heads;
        c->vocab_size = shapes[i].vocab_size;
        c->seq_len = shapes[i].seq_len;
        c->rope_theta = 10000.0f;
        c->norm_eps = 1e-5f;
        c->shared_classifier = shapes[i].shared;
        c->synthetic = 1;
        strncpy(c->name, shapes[i].name, sizeof c->name - 1);
        return 0;
    }
    if (strcmp(shape, "patchtst") == 0) { /* CATS's workload, docs/patchtst.md */
        memset(c, 0, sizeof *c);
        mi_config_set_family(c, MI_FAMILY_PATCHTST);
        c->dim = 128;
        c->hidden_dim = 256;
        c->n_layers = 6;
        c->n_heads = c->n_kv_heads = 16;
        c->head_dim = 8;
        c->patch_len = 16;
        c->patch_stride = 8;
        c->lookback = 96;
        c->horizon = c->vocab_size = 24;
        c->seq_len = (c->lookback - c->patch_len) / c->patch_stride + 1;
        c->n_channels = 3;
        c->rope_theta = 10000.0f;
        c->norm_eps = 1e-5f;
        c->synthetic = 1;
        strncpy(c->name, "patchtst-synthetic", sizeof c->name - 1);
        return 0;
    }
    return -1;
}

const char *mi_config_shape_names(void)
{
    return "stories15M, stories42M, stories110M, tinyllama-1.1b, tiny-gqa, llama-3.2-1b, qwen2.5-0.5b, qwen3-0.6b, "
           "gemma3-1b, gpt2, tiny-llama3, tiny-qwen2, tiny-qwen3, tiny-gemma3, tiny-gpt2, tiny-qwen2moe, "
           "qwen1.5-moe-a2.7b (mixtures of experts), patchtst (CATS's time-series encoder)";
}

int mi_config_trait_tensors(const mi_config *c, int l, const char **names, size_t *rows, size_t *cols)
{
    size_t d = (size_t)c->dim, hd = (size_t)c->head_dim, q = (size_t)mi_q_dim(c), kv = (size_t)mi_kv_dim(c);
    int ln = c->norm_type == MI_NORMK_LAYER, n = 0;
    const struct { const char *t; int has; size_t r, k; } ts[] = {
        {"norm_b", l < 0 && ln, d, 1}, {"pos_embed", l < 0 && c->pos_embed, (size_t)c->seq_len, d},
        {"rope_freqs", l < 0 && c->rope_freqs, hd / 2, 1},
        {"attention_norm_b", l >= 0 && ln, d, 1}, {"ffn_norm_b", l >= 0 && ln, d, 1},
        {"wq_b", l >= 0 && c->qkv_bias, q, 1}, {"wk_b", l >= 0 && c->qkv_bias, kv, 1},
        {"wv_b", l >= 0 && c->qkv_bias, kv, 1}, {"wo_b", l >= 0 && c->out_bias, d, 1},
        {"w1_b", l >= 0 && c->out_bias, (size_t)c->hidden_dim, 1}, {"w2_b", l >= 0 && c->out_bias, d, 1},
        {"q_norm", l >= 0 && c->qk_norm, hd, 1}, {"k_norm", l >= 0 && c->qk_norm, hd, 1},
        {"post_attention_norm", l >= 0 && c->post_norms, d, 1}, {"post_ffn_norm", l >= 0 && c->post_norms, d, 1},
        {"shared_gate", l >= 0 && c->shared_hidden_dim > 0, d, 1},
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        if (ts[i].has) {
            names[n] = ts[i].t, rows[n] = ts[i].r, cols[n] = ts[i].k;
            n++;
        }
    return n;
}
