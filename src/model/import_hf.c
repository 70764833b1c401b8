/* The Hugging Face front-end of the importer (import_internal.h): the
 * config from config.json (each family's keys as transformers names them),
 * the tokenizer from tokenizer.json and tokenizer_config.json, the tensors
 * from model.safetensors or its shards. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../util/json_keys.h"
#include "import_internal.h"
#include "meshinfer/common.h"
#include "meshinfer/safetensors.h"
#include "meshinfer/tensor.h"

static int st_find(const im_ctx *x, const char *name, im_tensor *t, char *err)
{
    (void)err;
    const mi_st_tensor *s = mi_st_find((const mi_st *)x->h, name);
    if (!s)
        return 1;
    memset(t, 0, sizeof *t);
    if (s->n_dims > 4)
        return mi_set_error(err, "%s: tensor '%s' has %d dims", x->src, name, s->n_dims);
    t->n_dims = s->n_dims;
    for (int i = 0; i < s->n_dims; i++)
        t->shape[i] = s->shape[i];
    t->dtype = s->dtype == MI_ST_F32 ? MI_F32 : s->dtype == MI_ST_F16 ? MI_F16 : s->dtype == MI_ST_BF16 ? IM_BF16
                                                                                                          : IM_OTHER;
    t->type_name = s->dtype_name;
    t->data = s->data;
    t->size = s->size;
    return 0;
}

static const struct { const char *arch; int family; } archs[] = {
    {"LlamaForCausalLM", MI_FAMILY_LLAMA},   {"Qwen2ForCausalLM", MI_FAMILY_QWEN2},
    {"Qwen3ForCausalLM", MI_FAMILY_QWEN3},   {"Gemma3ForCausalLM", MI_FAMILY_GEMMA3},
    {"Gemma3ForConditionalGeneration", MI_FAMILY_GEMMA3}, {"GPT2LMHeadModel", MI_FAMILY_GPT2},
    {"Qwen2MoeForCausalLM", MI_FAMILY_QWEN2MOE}, {"Qwen3MoeForCausalLM", MI_FAMILY_QWEN3MOE},
};

/* A number of config.json: 0; 1 when absent or null (v untouched); -1 with
 * err when it holds another type (read as absent it would take its default:
 * "64" for n_embd). */
static int num(const cJSON *o, const char *k, double *v, const char *path, char *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!j || cJSON_IsNull(j))
        return 1;
    if (!cJSON_IsNumber(j))
        return mi_set_error(err, "%s/config.json: %s is %s, not a number", path, k,
                            cJSON_IsString(j) ? "a string" : cJSON_IsBool(j) ? "a boolean" : "not a number");
    *v = j->valuedouble;
    return 0;
}

static int get_int(const cJSON *o, const char *k, int def, int *v, const char *path, char *err)
{
    double d = 0;
    int rc = num(o, k, &d, path, err);
    if (rc < 0)
        return -1;
    if (rc) {
        if (def == -2)
            return mi_set_error(err, "%s/config.json: %s is missing", path, k);
        *v = def;
        return 0;
    }
    if (d != floor(d) || d < 0 || d > 1e9)
        return mi_set_error(err, "%s/config.json: %s = %g is not a count", path, k, d);
    *v = (int)d;
    return 0;
}

/* Llama 3's or linear RoPE scaling as frequency divisors; others refused. */
static int rope_scaling(im_ctx *x, const cJSON *cfg, char *err)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (!rs || cJSON_IsNull(rs))
        return 0;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!cJSON_IsString(ty))
        ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
    const char *t = cJSON_IsString(ty) ? ty->valuestring : "?";
    double f = 1, lo = 1, hi = 4, orig = 8192;
    if (num(rs, "factor", &f, x->src, err) < 0 || num(rs, "low_freq_factor", &lo, x->src, err) < 0 ||
        num(rs, "high_freq_factor", &hi, x->src, err) < 0 ||
        num(rs, "original_max_position_embeddings", &orig, x->src, err) < 0)
        return -1;
    int half = x->cfg.head_dim / 2;
    if (!(f >= 1 && f < 1e4) || !(hi > lo) || !(orig > 0))
        return mi_set_error(err, "%s/config.json: rope_scaling has factors out of range", x->src);
    x->rope_freqs = mi_malloc((size_t)half * sizeof(float), "RoPE factors");
    if (!strcmp(t, "llama3"))
        mi_rope_llama3_factors(x->cfg.head_dim, x->cfg.rope_theta, (float)f, (float)lo, (float)hi, (int)orig,
                               x->rope_freqs);
    else if (!strcmp(t, "linear"))
        for (int i = 0; i < half; i++)
            x->rope_freqs[i] = (float)f;
    else
        return mi_set_error(err, "%s/config.json: rope_scaling type '%s' is not supported (llama3 and linear are)",
                            x->src, t);
    x->cfg.rope_freqs = 1;
    return 0;
}

/* Gemma 3's local layers: the period of global ones, from layer_types or
 * sliding_window_pattern; its softcaps must be off (Gemma 2 had them). */
static int gemma3_config(im_ctx *x, const cJSON *t, char *err)
{
    mi_config *c = &x->cfg;
    double q = c->head_dim, lb = 10000, sc;
    if (num(t, "query_pre_attn_scalar", &q, x->src, err) < 0 || num(t, "rope_local_base_freq", &lb, x->src, err) < 0)
        return -1;
    c->attn_scale = (float)(1.0 / sqrt(q));
    c->rope_theta_local = (float)lb;
    if (get_int(t, "sliding_window", 512, &c->sliding_window, x->src, err) ||
        get_int(t, "sliding_window_pattern", 6, &c->swa_period, x->src, err))
        return -1;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(t, "layer_types");
    if (cJSON_IsArray(lt)) { /* newer configs list each layer: it must be "every p-th is full attention" */
        int p = 0, l = 0;
        for (const cJSON *e = lt->child; e; e = e->next, l++)
            if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention") && !p)
                p = l + 1;
        c->swa_period = p;
        l = 0;
        for (const cJSON *e = lt->child; e; e = e->next, l++)
            if (!cJSON_IsString(e) || (!strcmp(e->valuestring, "full_attention")) != (p && (l + 1) % p == 0))
                return mi_set_error(err, "%s/config.json: layer_types is not a global layer every %d", x->src, p);
    }
    if (c->swa_period > c->n_layers)
        c->swa_period = c->n_layers;
    if (num(t, "final_logit_softcapping", &sc, x->src, err) != 1 ||
        num(t, "attn_logit_softcapping", &sc, x->src, err) != 1)
        return mi_set_error(err, "%s/config.json: logit softcapping is not supported (Gemma 3 has none)", x->src);
    return 0;
}

/* A mixture of experts' keys (transformers' Qwen2MoeConfig, Qwen3MoeConfig).
 * Only models whose every layer is sparse are run: decoder_sparse_step 1
 * and no mlp_only_layers. The expert width becomes hidden_dim (config.h). */
static int moe_config(im_ctx *x, const cJSON *t, char *err)
{
    mi_config *c = &x->cfg;
    const char *p = x->src;
    int step = 1, shared = 0;
    if (get_int(t, "num_experts", -2, &c->n_experts, p, err) ||
        get_int(t, "num_experts_per_tok", -2, &c->n_experts_used, p, err) ||
        get_int(t, "moe_intermediate_size", -2, &c->hidden_dim, p, err) ||
        get_int(t, "decoder_sparse_step", 1, &step, p, err))
        return -1;
    if (c->family == MI_FAMILY_QWEN2MOE && get_int(t, "shared_expert_intermediate_size", -2, &shared, p, err))
        return -1;
    c->shared_hidden_dim = shared;
    if (step != 1)
        return mi_set_error(err, "%s/config.json: decoder_sparse_step = %d: only models whose every layer is a mixture "
                                 "of experts run (decoder_sparse_step 1)", p, step);
    const cJSON *mlp = cJSON_GetObjectItemCaseSensitive(t, "mlp_only_layers");
    if (mlp && !cJSON_IsNull(mlp) && (!cJSON_IsArray(mlp) || cJSON_GetArraySize(mlp) > 0))
        return mi_set_error(err, "%s/config.json: mlp_only_layers is not empty: only models whose every layer is a "
                                 "mixture of experts run", p);
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(t, "norm_topk_prob");
    if (norm && !cJSON_IsNull(norm) && !cJSON_IsBool(norm))
        return mi_set_error(err, "%s/config.json: norm_topk_prob is not true or false", p);
    c->norm_topk_prob = cJSON_IsTrue(norm); /* transformers' default: false */
    return 0;
}

static int hf_sizes(im_ctx *x, const cJSON *t, char *err)
{
    mi_config *c = &x->cfg;
    int gpt2 = c->family == MI_FAMILY_GPT2, ctx = 0;
    const char *p = x->src;
    if (gpt2 ? get_int(t, "n_embd", -2, &c->dim, p, err) || get_int(t, "n_layer", -2, &c->n_layers, p, err) ||
                   get_int(t, "n_head", -2, &c->n_heads, p, err) || get_int(t, "n_positions", 1024, &ctx, p, err)
             : get_int(t, "hidden_size", -2, &c->dim, p, err) ||
                   get_int(t, "intermediate_size", -2, &c->hidden_dim, p, err) ||
                   get_int(t, "num_hidden_layers", -2, &c->n_layers, p, err) ||
                   get_int(t, "num_attention_heads", -2, &c->n_heads, p, err) ||
                   get_int(t, "max_position_embeddings", 2048, &ctx, p, err))
        return -1;
    if (c->n_heads <= 0 || c->dim <= 0)
        return mi_set_error(err, "%s/config.json: zero heads or width", p);
    if (gpt2 && get_int(t, "n_inner", 4 * c->dim, &c->hidden_dim, p, err))
        return -1;
    if (get_int(t, "num_key_value_heads", c->n_heads, &c->n_kv_heads, p, err) ||
        get_int(t, "head_dim", c->dim / c->n_heads, &c->head_dim, p, err))
        return -1;
    double eps = 1e-6, theta = 10000;
    if (num(t, gpt2 ? "layer_norm_epsilon" : "rms_norm_eps", &eps, p, err) < 0 ||
        num(t, "rope_theta", &theta, p, err) < 0)
        return -1;
    c->norm_eps = (float)eps;
    c->rope_theta = gpt2 ? 0.0f : (float)theta;
    if (ctx <= 0)
        return mi_set_error(err, "%s/config.json: %s = %d: a context length must be positive", p,
                            gpt2 ? "n_positions" : "max_position_embeddings", ctx);
    c->seq_len = im_context(x->o, ctx);
    return 0;
}

/* The activation config.json names must be the family's. */
static int check_act(const im_ctx *x, const cJSON *t, char *err)
{
    const char *want = x->cfg.family == MI_FAMILY_GPT2 ? "gelu_new" : x->cfg.family == MI_FAMILY_GEMMA3
                                                                          ? "gelu_pytorch_tanh"
                                                                          : "silu";
    const char *key = x->cfg.family == MI_FAMILY_GPT2 ? "activation_function" : x->cfg.family == MI_FAMILY_GEMMA3
                                                                                    ? "hidden_activation"
                                                                                    : "hidden_act";
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(t, key);
    if (cJSON_IsString(a) && strcmp(a->valuestring, want))
        return mi_set_error(err, "%s/config.json: %s = \"%s\", but %s runs \"%s\"", x->src, key, a->valuestring,
                            mi_family_name(x->cfg.family), want);
    return 0;
}

/* Which prefix the folder's tensor names carry. */
static int find_prefix(im_ctx *x, char *err)
{
    static const char *const pre[] = {"model.", "language_model.model.", "", "transformer."};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
        char n[128];
        snprintf(n, sizeof n, "%s%s", pre[i], x->cfg.family == MI_FAMILY_GPT2 ? "wte.weight" : "embed_tokens.weight");
        if (mi_st_find((const mi_st *)x->h, n)) {
            snprintf(x->hf_prefix, sizeof x->hf_prefix, "%s", pre[i]);
            const mi_st_tensor *e = mi_st_find((const mi_st *)x->h, n);
            if (e->n_dims != 2)
                return mi_set_error(err, "%s: %s is not a matrix", x->src, n);
            x->cfg.vocab_size = (int)e->shape[0];
            return 0;
        }
    }
    return mi_set_error(err, "%s: no token embedding tensor (embed_tokens.weight or wte.weight) in the safetensors",
                        x->src);
}

static int hf_config(im_ctx *x, const cJSON *cfg, char *err)
{
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const char *arch = cJSON_IsArray(ar) && cJSON_IsString(ar->child) ? ar->child->valuestring : "(none)";
    int family = -1;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(arch, archs[i].arch))
            family = archs[i].family;
    if (family < 0)
        return mi_set_error(err, "%s/config.json: architecture '%s' is not supported (meshinfer runs %s: "
                                 "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, "
                                 "GPT2LMHeadModel, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM)", x->src, arch, mi_family_names());
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
    if (!cJSON_IsObject(t))
        t = cfg;
    x->cfg.family = family;
    if (hf_sizes(x, t, err))
        return -1;
    mi_config_set_family(&x->cfg, family);
    if ((family == MI_FAMILY_QWEN2MOE || family == MI_FAMILY_QWEN3MOE) && moe_config(x, t, err))
        return -1;
    if (family == MI_FAMILY_LLAMA)
        x->cfg.rope_type = MI_ROPE_HALVES; /* transformers' rotate_half order (GGUF permutes to pairs) */
    x->norm_plus_one = family == MI_FAMILY_GEMMA3;
    x->conv1d = family == MI_FAMILY_GPT2;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
    x->cfg.shared_classifier = cJSON_IsBool(tie) ? cJSON_IsTrue(tie) : family == MI_FAMILY_GEMMA3 ||
                                                                           family == MI_FAMILY_GPT2;
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(t, "use_sliding_window");
    if (family != MI_FAMILY_GEMMA3 && cJSON_IsTrue(sw))
        return mi_set_error(err, "%s/config.json: use_sliding_window is true: only Gemma 3's local layers are "
                                 "supported", x->src);
    int vocab = 0;
    if (check_act(x, t, err) || (family == MI_FAMILY_GEMMA3 && gemma3_config(x, t, err)) ||
        rope_scaling(x, t, err) || find_prefix(x, err) || get_int(t, "vocab_size", x->cfg.vocab_size, &vocab,
                                                                   x->src, err))
        return -1;
    if (vocab != x->cfg.vocab_size)
        return mi_set_error(err, "%s/config.json: vocab_size = %d, but the embeddings have %d rows", x->src, vocab,
                            x->cfg.vocab_size);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cfg, "_name_or_path");
    snprintf(x->cfg.name, sizeof x->cfg.name, "%s", cJSON_IsString(nm) ? nm->valuestring : arch);
    return 0;
}

/* tokenizer.json (with tokenizer_config.json when present) and the chat template. */
static int hf_tokenizer(im_ctx *x, const char *dir, char *err)
{
    char tj[4300], tc[4300];
    struct stat st;
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
    if (stat(tj, &st) != 0)
        return mi_set_error(err, "%s: tokenizer.json is missing (meshinfer reads Hugging Face's fast-tokenizer file; "
                                 "vocab.json/merges.txt alone are not enough)", dir);
    int has_cfg = stat(tc, &st) == 0;
    if (mi_tokenizer_load_json(&x->tok, tj, has_cfg ? tc : NULL, err))
        return -1;
    x->has_tok = 1;
    if (!has_cfg)
        return 0;
    char prefix[4400];
    cJSON *j = mi_json_load(tc, "tokenizer config", 64u << 20, prefix, sizeof prefix, err);
    if (!j)
        return -1;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    if (cJSON_IsArray(ct)) /* [{name, template}]: the default one */
        for (const cJSON *e = ct->child; e; e = e->next) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(n) && !strcmp(n->valuestring, "default"))
                ct = cJSON_GetObjectItemCaseSensitive(e, "template");
        }
    if (cJSON_IsString(ct))
        x->chat_template = strdup(ct->valuestring);
    cJSON_Delete(j);
    return 0;
}

int im_hf_open(im_ctx *x, const char *path, char *err)
{
    char dir[4200];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", path);
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) { /* a .safetensors file: its folder */
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, ".");
    }
    mi_st *s;
    if (mi_st_open(dir, &s, err))
        return -1;
    x->h = s;
    x->gguf = 0;
    x->find = st_find;
    char cj[4300], prefix[4400];
    snprintf(cj, sizeof cj, "%s/config.json", dir);
    cJSON *cfg = mi_json_load(cj, "config", 16u << 20, prefix, sizeof prefix, err);
    if (!cfg)
        return -1;
    x->src = path;
    int rc = hf_config(x, cfg, err);
    cJSON_Delete(cfg);
    return rc || hf_tokenizer(x, dir, err) ? -1 : 0;
}

void im_hf_close(im_ctx *x)
{
    if (x->h && !x->gguf)
        mi_st_close((mi_st *)x->h);
    x->h = NULL;
}
