/* The GGUF front-end of the importer (import_internal.h): the config from
 * llama.cpp's metadata keys ({arch}.embedding_length, ...), the tokenizer
 * from tokenizer.ggml.*, and the tensors with their ggml types. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_internal.h"
#include "meshinfer/common.h"
#include "meshinfer/gguf.h"
#include "meshinfer/tensor.h"

static int gguf_find(const im_ctx *x, const char *name, im_tensor *t, char *err)
{
    (void)err;
    const mi_gguf *gg = x->h;
    const mi_gguf_tensor *g = mi_gguf_find_tensor(gg, name);
    if (!g)
        return 1;
    if (x->used) /* tensors are one array: the index is the offset from the first */
        x->used[g - mi_gguf_tensor_at(gg, 0)] = 1;
    memset(t, 0, sizeof *t);
    t->n_dims = g->n_dims;
    for (int i = 0; i < g->n_dims; i++) /* ggml's dims run innermost first */
        t->shape[i] = g->dims[g->n_dims - 1 - i];
    t->dtype = g->type == MI_GGML_F32    ? MI_F32
               : g->type == MI_GGML_F16  ? MI_F16
               : g->type == MI_GGML_BF16 ? IM_BF16
               : g->type == MI_GGML_Q8_0 ? MI_Q8_0
               : g->type == MI_GGML_Q4_0 ? MI_Q4_0
               : g->type == MI_GGML_Q4_K ? MI_Q4_K /* super-blocks kept byte for byte (tensor.h) */
               : g->type == MI_GGML_Q5_K ? MI_Q5_K
               : g->type == MI_GGML_Q6_K ? MI_Q6_K
                                         : IM_OTHER;
    t->type_name = g->type_name;
    t->data = g->data;
    t->size = g->size;
    return 0;
}

static const struct { const char *arch; int family; } archs[] = {
    {"llama", MI_FAMILY_LLAMA}, {"qwen2", MI_FAMILY_QWEN2}, {"qwen3", MI_FAMILY_QWEN3},
    {"gemma3", MI_FAMILY_GEMMA3}, {"gpt2", MI_FAMILY_GPT2}, {"qwen2moe", MI_FAMILY_QWEN2MOE},
    {"qwen3moe", MI_FAMILY_QWEN3MOE},
};

/* {arch}.key as an int: 0, or (absent) the default def (-1: required). */
static int key_int(const mi_gguf *g, const char *arch, const char *key, int def, int *v, const char *path, char *err)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int32_t x = 0;
    int rc = mi_gguf_get_i32(g, k, &x, err);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        if (def < 0)
            return mi_set_error(err, "%s: metadata key %s is missing", path, k);
        x = def;
    }
    if (x < 0) /* every such key is a size or a count */
        return mi_set_error(err, "%s: metadata key %s = %d: a size cannot be negative", path, k, (int)x);
    *v = x;
    return 0;
}

static int key_float(const mi_gguf *g, const char *arch, const char *key, float def, float *v, char *err)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int rc = mi_gguf_get_f32(g, k, v, err);
    if (rc == 1)
        *v = def;
    return rc < 0 ? -1 : 0;
}

/* A mixture of experts' keys as llama.cpp writes them (its defaults where
 * absent: the expert width feed_forward_length / expert_used_count, the
 * shared one feed_forward_length). llama.cpp renormalises the top-k weights
 * of qwen3moe and not of qwen2moe unless expert_weights_norm says so. The
 * expert width becomes hidden_dim (config.h). */
static int gguf_moe(im_ctx *x, const mi_gguf *g, const char *arch, char *err)
{
    mi_config *c = &x->cfg;
    const char *p = x->src;
    int ff = c->hidden_dim;
    if (key_int(g, arch, "expert_count", -1, &c->n_experts, p, err) ||
        key_int(g, arch, "expert_used_count", -1, &c->n_experts_used, p, err))
        return -1;
    if (c->n_experts_used <= 0)
        return mi_set_error(err, "%s: %s.expert_used_count = %d is not a count", p, arch, c->n_experts_used);
    if (key_int(g, arch, "expert_feed_forward_length", ff / c->n_experts_used, &c->hidden_dim, p, err) ||
        (c->family == MI_FAMILY_QWEN2MOE &&
         key_int(g, arch, "expert_shared_feed_forward_length", ff, &c->shared_hidden_dim, p, err)))
        return -1;
    char k[128];
    snprintf(k, sizeof k, "%s.expert_weights_norm", arch);
    bool norm = c->family == MI_FAMILY_QWEN3MOE;
    if (mi_gguf_get_bool(g, k, &norm, err) < 0)
        return -1;
    c->norm_topk_prob = norm;
    return 0;
}

/* The sizes and the family's traits from the metadata. */
static int gguf_config(im_ctx *x, const mi_gguf *g, const char *arch, int family, char *err)
{
    mi_config *c = &x->cfg;
    const char *p = x->src;
    int ctx = 0, rope_dims = 0;
    if (key_int(g, arch, "embedding_length", -1, &c->dim, p, err) ||
        key_int(g, arch, "feed_forward_length", -1, &c->hidden_dim, p, err) ||
        key_int(g, arch, "block_count", -1, &c->n_layers, p, err) ||
        key_int(g, arch, "attention.head_count", -1, &c->n_heads, p, err) ||
        key_int(g, arch, "attention.head_count_kv", c->n_heads, &c->n_kv_heads, p, err) ||
        key_int(g, arch, "context_length", 2048, &ctx, p, err))
        return -1;
    const char *zero = !c->dim ? "embedding_length" : !c->n_layers ? "block_count" : !c->n_heads ? "attention.head_count"
                     : !c->n_kv_heads ? "attention.head_count_kv" : !ctx ? "context_length" : NULL;
    if (zero)
        return mi_set_error(err, "%s: metadata key %s.%s = 0", p, arch, zero);
    mi_config_set_family(c, family);
    if (c->n_heads <= 0 || c->dim % c->n_heads)
        return mi_set_error(err, "%s: %s.attention.head_count = %d does not divide embedding_length = %d", p, arch,
                            c->n_heads, c->dim);
    if (key_int(g, arch, "attention.key_length", c->dim / c->n_heads, &c->head_dim, p, err) ||
        key_int(g, arch, "rope.dimension_count", c->head_dim, &rope_dims, p, err))
        return -1;
    if (c->rope_type != MI_ROPE_NONE && rope_dims != c->head_dim)
        return mi_set_error(err, "%s: %s.rope.dimension_count = %d rotates part of a head of %d: partial rotary "
                                 "embeddings are not supported", p, arch, rope_dims, c->head_dim);
    if (key_float(g, arch, "rope.freq_base", family == MI_FAMILY_GPT2 ? 0.0f : 10000.0f, &c->rope_theta, err) ||
        key_float(g, arch, c->norm_type == MI_NORMK_LAYER ? "attention.layer_norm_epsilon"
                                                         : "attention.layer_norm_rms_epsilon",
                  1e-5f, &c->norm_eps, err))
        return -1;
    c->seq_len = im_context(x->o, ctx);
    if ((family == MI_FAMILY_QWEN2MOE || family == MI_FAMILY_QWEN3MOE) && gguf_moe(x, g, arch, err))
        return -1;
    if (family == MI_FAMILY_GEMMA3) { /* llama.cpp's Gemma 3: every 6th layer global, local base 10,000 */
        if (key_int(g, arch, "attention.sliding_window", 512, &c->sliding_window, p, err))
            return -1;
        c->swa_period = c->n_layers < 6 ? c->n_layers : 6;
        if (key_float(g, arch, "rope.freq_base_swa", 10000.0f, &c->rope_theta_local, err))
            return -1;
        c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    }
    const mi_gguf_tensor *emb = mi_gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2)
        return mi_set_error(err, "%s: tensor token_embd.weight is missing or not a matrix", p);
    c->vocab_size = (int)emb->dims[1];
    c->shared_classifier = mi_gguf_find_tensor(g, "output.weight") == NULL;
    c->rope_freqs = mi_gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    if (mi_gguf_get_str_copy(g, "general.name", c->name, sizeof c->name, err) < 0)
        c->name[0] = 0;
    return 0;
}

/* An optional id key: -1 when absent. */
static int id_key(const mi_gguf *g, const char *key, int *v, char *err)
{
    int32_t x;
    int rc = mi_gguf_get_i32(g, key, &x, err);
    *v = rc == 0 ? x : -1;
    return rc < 0 ? -1 : 0;
}

/* tokenizer.ggml.* into a spec (arrays borrowed from the map, lengths and
 * numbers copied), then the tokenizer. */
static int gguf_tokenizer(im_ctx *x, const mi_gguf *g, char *err)
{
    char model[32] = "", pre[64] = "";
    if (mi_gguf_get_str_copy(g, "tokenizer.ggml.model", model, sizeof model, err) != 0)
        return mi_set_error(err, "%s: tokenizer.ggml.model is missing: the file carries no tokenizer", x->src);
    if (mi_gguf_get_str_copy(g, "tokenizer.ggml.pre", pre, sizeof pre, err) < 0)
        return -1;
    mi_gguf_arr tok, sc, ty, mg;
    if (mi_gguf_get_arr(g, "tokenizer.ggml.tokens", &tok, err) != 0)
        return mi_set_error(err, "%s: tokenizer.ggml.tokens is missing or not an array", x->src);
    int has_sc = mi_gguf_get_arr(g, "tokenizer.ggml.scores", &sc, err) == 0;
    int has_ty = mi_gguf_get_arr(g, "tokenizer.ggml.token_type", &ty, err) == 0;
    int has_mg = mi_gguf_get_arr(g, "tokenizer.ggml.merges", &mg, err) == 0;
    int n = (int)tok.count, nm = has_mg ? (int)mg.count : 0, rc = 0;
    if (tok.count > (1u << 24) || (has_sc && sc.count != tok.count) || (has_ty && ty.count != tok.count))
        return mi_set_error(err, "%s: tokenizer.ggml.tokens, scores and token_type have different lengths", x->src);
    const char **pieces = mi_calloc((size_t)n + 1, sizeof *pieces, "tokenizer"), **merges = NULL;
    int *lens = mi_calloc((size_t)n + 1, sizeof(int), "tokenizer"), *types = NULL, *mlen = NULL;
    float *scores = has_sc ? mi_calloc((size_t)n + 1, sizeof(float), "tokenizer") : NULL;
    if (has_ty)
        types = mi_calloc((size_t)n + 1, sizeof(int), "tokenizer");
    if (nm) {
        merges = mi_calloc((size_t)nm, sizeof *merges, "tokenizer");
        mlen = mi_calloc((size_t)nm, sizeof(int), "tokenizer");
    }
    for (int i = 0; i < n && !rc; i++) {
        size_t len;
        int32_t t32;
        rc = mi_gguf_arr_str(&tok, (uint64_t)i, &pieces[i], &len, err) ||
             (has_sc && mi_gguf_arr_f32(&sc, (uint64_t)i, &scores[i], err)) ||
             (has_ty && mi_gguf_arr_i32(&ty, (uint64_t)i, &t32, err));
        lens[i] = (int)len;
        if (has_ty)
            types[i] = t32;
    }
    for (int i = 0; i < nm && !rc; i++) {
        size_t len;
        rc = mi_gguf_arr_str(&mg, (uint64_t)i, &merges[i], &len, err);
        mlen[i] = (int)len;
    }
    mi_tok_spec s = {model, pre[0] ? pre : NULL, n, pieces, lens, scores, types, nm, merges, mlen,
                     -1, -1, -1, -1, -1, -1, -1};
    bool b;
    if (!rc)
        rc = id_key(g, "tokenizer.ggml.bos_token_id", &s.bos_id, err) ||
             id_key(g, "tokenizer.ggml.eos_token_id", &s.eos_id, err) ||
             id_key(g, "tokenizer.ggml.eot_token_id", &s.eot_id, err) ||
             id_key(g, "tokenizer.ggml.padding_token_id", &s.pad_id, err) ||
             id_key(g, "tokenizer.ggml.unknown_token_id", &s.unk_id, err);
    if (!rc && mi_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, err) == 0)
        s.add_bos = b;
    if (!rc && mi_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b, err) == 0)
        s.add_space_prefix = b;
    if (!rc && mi_tokenizer_init_spec(&x->tok, &s, err) == 0) {
        x->has_tok = 1;
    } else if (!rc) { /* the tokenizer's own line, with the file it came from */
        char why[MI_ERRLEN];
        snprintf(why, sizeof why, "%s", err);
        rc = mi_set_error(err, "%s: %s", x->src, why);
    }
    free(pieces), free(lens), free(scores), free(types), free(merges), free(mlen);
    const char *tmpl;
    size_t tl;
    if (!rc && mi_gguf_get_str(g, "tokenizer.chat_template", &tmpl, &tl, err) == 0) {
        x->chat_template = mi_malloc(tl + 1, "chat template");
        memcpy(x->chat_template, tmpl, tl);
        x->chat_template[tl] = 0;
    }
    return rc ? -1 : 0;
}

int im_gguf_open(im_ctx *x, const char *path, char *err)
{
    mi_gguf *g;
    if (mi_gguf_open(path, &g, err))
        return -1;
    x->h = g;
    x->gguf = 1;
    x->find = gguf_find;
    x->used = mi_calloc((size_t)mi_gguf_n_tensors(g) + 1, 1, "tensor use flags");
    char arch[64] = "";
    int rc = mi_gguf_get_str_copy(g, "general.architecture", arch, sizeof arch, err);
    if (rc == 1)
        return mi_set_error(err, "%s: general.architecture is missing", path);
    if (rc) /* not a string, or too long: err names it */
        return -1;
    int family = -1;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(arch, archs[i].arch))
            family = archs[i].family;
    if (family < 0)
        return mi_set_error(err, "%s: architecture '%s' is not supported (meshinfer runs %s)", path, arch,
                            mi_family_names());
    if (gguf_config(x, g, arch, family, err) || gguf_tokenizer(x, g, err))
        return -1;
    return 0;
}

void im_gguf_close(im_ctx *x)
{
    if (x->h && x->gguf)
        mi_gguf_close((mi_gguf *)x->h);
    x->h = NULL;
}
