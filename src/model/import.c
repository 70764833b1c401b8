/* Importing GGUF files and Hugging Face folders (see import.h): the
 * front-ends (import_gguf.c, import_hf.c) read the config and tokenizer;
 * here every tensor is found under its source name, checked against the
 * config's shape, given its stored dtype (a first pass, so the file's
 * header and the disk-space check know the sizes), then written. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "import_internal.h"
#include "meshinfer/gguf.h"
#include "meshinfer/common.h"
#include "meshinfer/model_file.h"
#include "meshinfer/tensor.h"

/* ------------------------------------------------------------ what a file is */

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

int mi_import_kind(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return MI_IMPORT_NONE;
    if (S_ISDIR(st.st_mode)) {
        char p[4200];
        snprintf(p, sizeof p, "%s/config.json", path);
        return stat(p, &st) == 0 ? MI_IMPORT_HF : MI_IMPORT_NONE;
    }
    unsigned char b[4] = {0};
    size_t n = mi_read_head(path, b, sizeof b);
    if (n == 4 && !memcmp(b, "GGUF", 4))
        return MI_IMPORT_GGUF;
    if (ends_with(path, ".safetensors"))
        return MI_IMPORT_HF;
    return MI_IMPORT_NONE;
}

/* ------------------------------------------------------------ names */

enum { VEC = 0, MAT = 1, TR = 2 /* stored transposed (wo_t, w2_t) */, NORM = 4 /* an RMSNorm weight */,
       EXP = 8 /* a mixture of experts' stack [E * rows, cols]: one 3-D GGUF tensor [E, rows, cols], or E Hugging
                  Face tensors (the second "%d" of the name the expert) */ };

/* Our tensors and their names in GGUF files and in Hugging Face folders of
 * the Llama-like families (after the prefix), Gemma 3's and GPT-2's where
 * they differ. "%d" is the layer. */
static const struct {
    const char *our;
    int flags;
    const char *gguf, *hf, *hf_gemma, *hf_gpt2;
} names[] = {
    {"tok_embeddings", MAT, "token_embd.weight", "embed_tokens.weight", "embed_tokens.weight", "wte.weight"},
    {"classifier", MAT, "output.weight", "@lm_head.weight", "@lm_head.weight", NULL},
    {"norm", VEC | NORM, "output_norm.weight", "norm.weight", "norm.weight", "ln_f.weight"},
    {"norm_b", VEC, "output_norm.bias", NULL, NULL, "ln_f.bias"},
    {"pos_embed", MAT, "position_embd.weight", NULL, NULL, "wpe.weight"},
    {"rope_freqs", VEC, "rope_freqs.weight", NULL, NULL, NULL},
    {"attention_norm", VEC | NORM, "blk.%d.attn_norm.weight", "layers.%d.input_layernorm.weight",
     "layers.%d.input_layernorm.weight", "h.%d.ln_1.weight"},
    {"attention_norm_b", VEC, "blk.%d.attn_norm.bias", NULL, NULL, "h.%d.ln_1.bias"},
    {"wq", MAT, "blk.%d.attn_q.weight", "layers.%d.self_attn.q_proj.weight", "layers.%d.self_attn.q_proj.weight",
     "h.%d.attn.c_attn.weight"},
    {"wk", MAT, "blk.%d.attn_k.weight", "layers.%d.self_attn.k_proj.weight", "layers.%d.self_attn.k_proj.weight",
     "h.%d.attn.c_attn.weight"},
    {"wv", MAT, "blk.%d.attn_v.weight", "layers.%d.self_attn.v_proj.weight", "layers.%d.self_attn.v_proj.weight",
     "h.%d.attn.c_attn.weight"},
    {"wq_b", VEC, "blk.%d.attn_q.bias", "layers.%d.self_attn.q_proj.bias", NULL, "h.%d.attn.c_attn.bias"},
    {"wk_b", VEC, "blk.%d.attn_k.bias", "layers.%d.self_attn.k_proj.bias", NULL, "h.%d.attn.c_attn.bias"},
    {"wv_b", VEC, "blk.%d.attn_v.bias", "layers.%d.self_attn.v_proj.bias", NULL, "h.%d.attn.c_attn.bias"},
    {"wo_t", MAT | TR, "blk.%d.attn_output.weight", "layers.%d.self_attn.o_proj.weight",
     "layers.%d.self_attn.o_proj.weight", "h.%d.attn.c_proj.weight"},
    {"wo_b", VEC, "blk.%d.attn_output.bias", NULL, NULL, "h.%d.attn.c_proj.bias"},
    {"q_norm", VEC | NORM, "blk.%d.attn_q_norm.weight", "layers.%d.self_attn.q_norm.weight",
     "layers.%d.self_attn.q_norm.weight", NULL},
    {"k_norm", VEC | NORM, "blk.%d.attn_k_norm.weight", "layers.%d.self_attn.k_norm.weight",
     "layers.%d.self_attn.k_norm.weight", NULL},
    {"post_attention_norm", VEC | NORM, "blk.%d.post_attention_norm.weight", NULL,
     "layers.%d.post_attention_layernorm.weight", NULL},
    {"ffn_norm", VEC | NORM, "blk.%d.ffn_norm.weight", "layers.%d.post_attention_layernorm.weight",
     "layers.%d.pre_feedforward_layernorm.weight", "h.%d.ln_2.weight"},
    {"ffn_norm_b", VEC, "blk.%d.ffn_norm.bias", NULL, NULL, "h.%d.ln_2.bias"},
    {"w1", MAT, "blk.%d.ffn_gate.weight", "layers.%d.mlp.gate_proj.weight", "layers.%d.mlp.gate_proj.weight",
     "h.%d.mlp.c_fc.weight"},
    {"w3", MAT, "blk.%d.ffn_up.weight", "layers.%d.mlp.up_proj.weight", "layers.%d.mlp.up_proj.weight", NULL},
    {"w2_t", MAT | TR, "blk.%d.ffn_down.weight", "layers.%d.mlp.down_proj.weight",
     "layers.%d.mlp.down_proj.weight", "h.%d.mlp.c_proj.weight"},
    {"w1_b", VEC, "blk.%d.ffn_up.bias", NULL, NULL, "h.%d.mlp.c_fc.bias"},
    {"w2_b", VEC, "blk.%d.ffn_down.bias", NULL, NULL, "h.%d.mlp.c_proj.bias"},
    {"post_ffn_norm", VEC | NORM, "blk.%d.post_ffw_norm.weight", NULL, "layers.%d.post_feedforward_layernorm.weight",
     NULL},
    /* a mixture of experts (llama.cpp's qwen2moe, qwen3moe; transformers' Qwen2Moe, Qwen3Moe) */
    {"router", MAT, "blk.%d.ffn_gate_inp.weight", "layers.%d.mlp.gate.weight", NULL, NULL},
    {"experts_w1", MAT | EXP, "blk.%d.ffn_gate_exps.weight", "layers.%d.mlp.experts.%d.gate_proj.weight", NULL, NULL},
    {"experts_w3", MAT | EXP, "blk.%d.ffn_up_exps.weight", "layers.%d.mlp.experts.%d.up_proj.weight", NULL, NULL},
    {"experts_w2", MAT | EXP, "blk.%d.ffn_down_exps.weight", "layers.%d.mlp.experts.%d.down_proj.weight", NULL, NULL},
    {"shared_w1", MAT, "blk.%d.ffn_gate_shexp.weight", "layers.%d.mlp.shared_expert.gate_proj.weight", NULL, NULL},
    {"shared_w3", MAT, "blk.%d.ffn_up_shexp.weight", "layers.%d.mlp.shared_expert.up_proj.weight", NULL, NULL},
    {"shared_w2_t", MAT | TR, "blk.%d.ffn_down_shexp.weight", "layers.%d.mlp.shared_expert.down_proj.weight", NULL,
     NULL},
    {"shared_gate", VEC, "blk.%d.ffn_gate_inp_shexp.weight", "layers.%d.mlp.shared_expert_gate.weight", NULL, NULL},
};
enum { N_NAMES = sizeof names / sizeof names[0], FIRST_LAYER_NAME = 6 };

static int name_index(const char *our)
{
    for (int i = 0; i < N_NAMES; i++)
        if (!strcmp(names[i].our, our))
            return i;
    return -1;
}

/* GPT-2 fuses q, k and v: which third of the rows (or bias) a name takes. */
static int fused_part(const char *our)
{
    return our[1] == 'q' ? 0 : our[1] == 'k' ? 1 : 2;
}

const char *im_source_name(const im_ctx *x, const char *our, int layer, char *buf, size_t n, int64_t *row0,
                           int64_t *nrows)
{
    int i = name_index(our), gpt2 = x->cfg.family == MI_FAMILY_GPT2, gated = x->cfg.ffn_type == MI_FFNK_SWIGLU ||
                                                                          x->cfg.ffn_type == MI_FFNK_GEGLU;
    int expert = (int)*nrows; /* the expert of a Hugging Face stack */
    *row0 = *nrows = 0;
    if (i < 0)
        return NULL;
    const char *pat = x->gguf ? names[i].gguf
                      : gpt2  ? names[i].hf_gpt2
                      : x->cfg.family == MI_FAMILY_GEMMA3 ? names[i].hf_gemma
                                                          : names[i].hf;
    if (x->gguf && gpt2 && !strcmp(our, "w1")) /* llama.cpp calls GPT-2's only up-projection ffn_up */
        pat = "blk.%d.ffn_up.weight";
    if (x->gguf && !gpt2 && !strcmp(our, "w1_b"))
        pat = NULL;
    if (!gated && !strcmp(our, "w3"))
        pat = NULL;
    if (!pat)
        return NULL;
    int fused = gpt2 && (!strcmp(our, "wq") || !strcmp(our, "wk") || !strcmp(our, "wv") || !strcmp(our, "wq_b") ||
                         !strcmp(our, "wk_b") || !strcmp(our, "wv_b"));
    if (fused) {
        if (x->gguf) /* llama.cpp's GPT-2: one attn_qkv */
            pat = our[2] == '_' ? "blk.%d.attn_qkv.bias" : "blk.%d.attn_qkv.weight";
        *row0 = (int64_t)fused_part(our) * x->cfg.dim;
        *nrows = x->cfg.dim;
    }
    char tmp[200];
    if (!x->gguf && (names[i].flags & EXP)) /* expert *nrows of the stack (im_expert_name) */
        snprintf(tmp, sizeof tmp, pat, layer, expert);
    else
        snprintf(tmp, sizeof tmp, pat, layer);
    if (x->gguf || pat[0] == '@') /* lm_head sits beside the prefix's model */
        snprintf(buf, n, "%s%s", x->gguf ? "" : !strncmp(x->hf_prefix, "language_model.", 15) ? "language_model."
                                                                                                : "",
                 tmp + (pat[0] == '@'));
    else
        snprintf(buf, n, "%s%s", x->hf_prefix, tmp);
    return buf;
}

/* ------------------------------------------------------------ values */

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Elements [e0, e0+n) of t as floats (n within one row for block types). */
static void to_float(const im_tensor *t, size_t e0, size_t n, float *out)
{
    if (t->dtype == MI_F32) {
        memcpy(out, t->data + e0 * 4, n * 4);
    } else if (t->dtype == MI_F16 || t->dtype == IM_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, t->data + (e0 + i) * 2, 2);
            out[i] = t->dtype == MI_F16 ? mi_f32_from_fp16(h) : bf16_to_f32(h);
        }
    } else if (mi_dtype_kquant(t->dtype)) { /* super-blocks of 256, our layout as they are */
        mi_dequantize_row(t->dtype, t->data + mi_dtype_q_row_bytes(t->dtype, e0), NULL, (int)n, out);
    } else { /* ggml blocks of 32: an fp16 scale, then the values */
        size_t bb = t->dtype == MI_Q8_0 ? 34 : 18;
        for (size_t i = 0; i < n; i += MI_QK) {
            const unsigned char *b = t->data + (e0 + i) / MI_QK * bb;
            uint16_t d;
            memcpy(&d, b, 2);
            mi_dequantize_row(t->dtype, b + 2, &d, MI_QK, out + i);
        }
    }
}

static int64_t numel(const im_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++)
        n *= t->shape[i];
    return n;
}

/* The stored dtype of a matrix from source type t: kept, or BF16 as fp16
 * when every value is exactly an fp16 value (bf16 has fewer mantissa bits,
 * so that is every value inside fp16's normal range), else fp32. */
static int stored_dtype(const im_tensor *t)
{
    if (t->dtype != IM_BF16)
        return t->dtype;
    size_t n = (size_t)numel(t);
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, t->data + i * 2, 2);
        float f = bf16_to_f32(h);
        if (mi_f32_from_fp16(mi_fp16_from_f32(f)) != f)
            return MI_F32;
    }
    return MI_F16;
}

/* ------------------------------------------------------------ tensors */

/* Our tensor i (names[]) of layer l: does the config have it, and its shape
 * in the product's orientation ([rows, cols]; a vector is [n, 1]). */
static int expected(const mi_config *c, int i, int64_t *rows, int64_t *cols)
{
    const char *s = names[i].our;
    int64_t d = c->dim, q = mi_q_dim(c), kv = mi_kv_dim(c), h = c->hidden_dim, hd = c->head_dim, V = c->vocab_size;
    int64_t E = c->n_experts, sh = c->shared_hidden_dim;
    int ln = c->norm_type == MI_NORMK_LAYER, gated = c->ffn_type == MI_FFNK_SWIGLU || c->ffn_type == MI_FFNK_GEGLU;
    int moe = mi_config_is_moe(c), dense = !moe;
    struct { const char *n; int has; int64_t r, k; } t[] = {
        {"tok_embeddings", 1, V, d}, {"classifier", !c->shared_classifier, V, d}, {"norm", 1, d, 1},
        {"norm_b", ln, d, 1}, {"pos_embed", c->pos_embed, c->seq_len, d}, {"rope_freqs", c->rope_freqs, hd / 2, 1},
        {"attention_norm", 1, d, 1}, {"attention_norm_b", ln, d, 1}, {"wq", 1, q, d}, {"wk", 1, kv, d},
        {"wv", 1, kv, d}, {"wq_b", c->qkv_bias, q, 1}, {"wk_b", c->qkv_bias, kv, 1}, {"wv_b", c->qkv_bias, kv, 1},
        {"wo_t", 1, d, q}, {"wo_b", c->out_bias, d, 1}, {"q_norm", c->qk_norm, hd, 1}, {"k_norm", c->qk_norm, hd, 1},
        {"post_attention_norm", c->post_norms, d, 1}, {"ffn_norm", 1, d, 1}, {"ffn_norm_b", ln, d, 1},
        {"w1", dense, h, d}, {"w3", dense && gated, h, d}, {"w2_t", dense, d, h}, {"w1_b", c->out_bias, h, 1},
        {"w2_b", c->out_bias, d, 1}, {"post_ffn_norm", c->post_norms, d, 1},
        {"router", moe, E, d}, {"experts_w1", moe, E * h, d}, {"experts_w3", moe, E * h, d},
        {"experts_w2", moe, E * d, h}, {"shared_w1", moe && sh > 0, sh, d}, {"shared_w3", moe && sh > 0, sh, d},
        {"shared_w2_t", moe && sh > 0, d, sh}, {"shared_gate", moe && sh > 0, d, 1},
    };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
        if (!strcmp(t[k].n, s)) {
            *rows = t[k].r, *cols = t[k].k;
            return t[k].has;
        }
    return 0;
}

/* One tensor to import: where it is in the source and how it maps. */
typedef struct {
    int i, layer;
    char our[128], src[200];
    im_tensor t;
    int64_t rows, cols, row0, nrows;
    int transposed_src; /* the source holds [cols, rows] (GPT-2's Conv1D) */
    int dtype;          /* stored */
    im_tensor *parts;   /* a Hugging Face expert stack: its n_parts experts' tensors (t is parts[0]), else NULL */
    int n_parts;
} item;

/* The stored dtype of a Hugging Face expert stack: its parts' common type
 * (fp16 only when every part keeps fp16 exactly). */
static int stack_dtype(const item *it)
{
    int t = MI_F16;
    for (int e = 0; e < it->n_parts; e++)
        if (stored_dtype(&it->parts[e]) != MI_F16)
            t = MI_F32;
    return t;
}

/* A stack of E experts: a 3-D GGUF tensor [E, rows/E, cols] seen as [rows,
 * cols], or E Hugging Face tensors of [rows/E, cols] each. */
static int find_stack(im_ctx *x, int i, int layer, item *it, char *err)
{
    int64_t E = x->cfg.n_experts, er = it->rows / E;
    if (x->gguf) {
        int rc = x->find(x, it->src, &it->t, err);
        if (rc == 1)
            return mi_set_error(err, "%s: tensor '%s' is missing (needed for %s of a %s model)", x->src, it->src,
                                it->our, mi_family_name(x->cfg.family));
        if (rc)
            return -1;
        if (it->t.n_dims != 3 || it->t.shape[0] != E || it->t.shape[1] != er || it->t.shape[2] != it->cols)
            return mi_set_error(err, "%s: tensor '%s' is not [%lld experts, %lld, %lld] (the config's %lld experts "
                                     "of %s)", x->src, it->src, (long long)E, (long long)er, (long long)it->cols,
                                (long long)E, it->our);
        if (it->t.dtype == IM_OTHER)
            return mi_set_error(err, "%s: tensor '%s' is %s, which meshinfer does not run (it runs f32, f16, bf16, "
                                     "q8_0 and q4_0)", x->src, it->src, it->t.type_name);
        it->t.n_dims = 2;
        it->t.shape[0] = it->rows;
        it->t.shape[1] = it->cols;
        it->dtype = it->t.dtype == IM_BF16 ? stored_dtype(&it->t) : it->t.dtype;
        return 0;
    }
    it->parts = mi_calloc((size_t)E, sizeof(im_tensor), "expert tensors");
    it->n_parts = (int)E;
    for (int64_t e = 0; e < E; e++) {
        int64_t r0, ne = e;
        char nm[200];
        im_source_name(x, names[i].our, layer, nm, sizeof nm, &r0, &ne);
        im_tensor *t = &it->parts[e];
        int rc = x->find(x, nm, t, err);
        if (rc == 1)
            return mi_set_error(err, "%s: tensor '%s' is missing (the config says %lld experts)", x->src, nm,
                                (long long)E);
        if (rc)
            return -1;
        if (t->dtype == IM_OTHER)
            return mi_set_error(err, "%s: tensor '%s' is %s, which meshinfer does not run", x->src, nm, t->type_name);
        if (t->n_dims != 2 || t->shape[0] != er || t->shape[1] != it->cols)
            return mi_set_error(err, "%s: tensor '%s' is not [%lld, %lld] as the config implies", x->src, nm,
                                (long long)er, (long long)it->cols);
    }
    /* a stack one past the config's count means the config undercounts */
    char nm[200];
    int64_t r0, ne = E;
    im_tensor extra;
    im_source_name(x, names[i].our, layer, nm, sizeof nm, &r0, &ne);
    if (x->find(x, nm, &extra, err) == 0)
        return mi_set_error(err, "%s: holds '%s', an expert past the config's num_experts = %lld", x->src, nm,
                            (long long)E);
    it->t = it->parts[0];
    it->dtype = stack_dtype(it);
    return 0;
}

static int find_item(im_ctx *x, int i, int layer, item *it, char *err)
{
    memset(it, 0, sizeof *it);
    it->i = i, it->layer = layer;
    if (layer >= 0)
        mi_model_layer_name(it->our, sizeof it->our, layer, names[i].our);
    else
        snprintf(it->our, sizeof it->our, "%s", names[i].our);
    if (!expected(&x->cfg, i, &it->rows, &it->cols))
        return 1;
    if (!strcmp(names[i].our, "rope_freqs") && x->rope_freqs)
        return 0; /* computed from the config */
    if (!im_source_name(x, names[i].our, layer, it->src, sizeof it->src, &it->row0, &it->nrows))
        return mi_set_error(err, "%s: %s has no source tensor for '%s' in family %s", x->src,
                            x->gguf ? "a GGUF file" : "a Hugging Face folder", it->our, mi_family_name(x->cfg.family));
    if (names[i].flags & EXP) {
        it->row0 = it->nrows = 0;
        return find_stack(x, i, layer, it, err);
    }
    int rc = x->find(x, it->src, &it->t, err);
    if (rc == 1)
        return mi_set_error(err, "%s: tensor '%s' is missing (needed for %s of a %s model)", x->src, it->src, it->our,
                            mi_family_name(x->cfg.family));
    if (rc)
        return -1;
    if (it->t.dtype == IM_OTHER)
        return mi_set_error(err, "%s: tensor '%s' is %s, which meshinfer does not run (it runs f32, f16, bf16, q8_0, "
                                 "q4_0, q4_K, q5_K and q6_K): requantize it, e.g. llama-quantize IN OUT Q4_K_M (or "
                                 "Q8_0)", x->src, it->src, it->t.type_name);
    it->transposed_src = x->conv1d && (names[i].flags & MAT) && strcmp(names[i].our, "tok_embeddings") &&
                         strcmp(names[i].our, "pos_embed");
    if (!(names[i].flags & MAT) && it->t.n_dims == 2 && it->t.shape[0] == 1) { /* a vector as one row (shared_gate) */
        it->t.n_dims = 1;
        it->t.shape[0] = it->t.shape[1];
    }
    int64_t sr = it->t.n_dims >= 2 ? it->t.shape[0] : numel(&it->t), sc = it->t.n_dims >= 2 ? it->t.shape[1] : 1;
    if (it->t.n_dims > 2 || (it->t.n_dims == 2 && !(names[i].flags & MAT)))
        return mi_set_error(err, "%s: tensor '%s' has %d dims, expected %s", x->src, it->src, it->t.n_dims,
                            names[i].flags & MAT ? "2" : "1");
    if (it->transposed_src) { /* [in, out]: our rows are its columns */
        int64_t tmp = sr;
        sr = sc, sc = tmp;
    }
    int64_t want_rows = it->nrows ? it->row0 + it->nrows : it->rows;
    /* learned positions: the first seq_len of the model's; a fused q/k/v: a third */
    int ok = !strcmp(names[i].our, "pos_embed") ? sr >= it->rows && sc == it->cols
             : it->nrows                         ? sr == 3 * it->nrows && sc == it->cols
                                                 : sr == want_rows && sc == it->cols;
    if (!ok)
        return mi_set_error(err, "%s: tensor '%s' is [%lld, %lld], but the config implies [%lld, %lld] for %s", x->src,
                            it->src, (long long)sr, (long long)sc,
                            (long long)(it->nrows ? 3 * it->nrows : it->rows), (long long)it->cols, it->our);
    it->dtype = (names[i].flags & MAT) && strcmp(names[i].our, "pos_embed") ? stored_dtype(&it->t) : MI_F32;
    if (mi_dtype_blocked(it->dtype) && (it->transposed_src || (names[i].flags & NORM)))
        it->dtype = MI_F32; /* never: HF files hold no blocks */
    return 0;
}

/* Rows [r0, r0+n) of a matrix item in our layout, as floats (rows of cols). */
static void item_rows_float(const item *it, int64_t r0, int64_t n, float *out)
{
    int64_t c = it->cols;
    if (!it->transposed_src) {
        for (int64_t r = 0; r < n; r++)
            to_float(&it->t, (size_t)((it->row0 + r0 + r) * c), (size_t)c, out + r * c);
        return;
    }
    int64_t src_cols = it->t.shape[1]; /* [in = cols, out] */
    float *line = mi_malloc((size_t)src_cols * sizeof(float), "import row");
    for (int64_t k = 0; k < c; k++) {
        to_float(&it->t, (size_t)(k * src_cols), (size_t)src_cols, line);
        for (int64_t r = 0; r < n; r++)
            out[r * c + k] = line[it->row0 + r0 + r];
    }
    free(line);
}

/* Write a matrix item: blocks (k-quant super-blocks too) and fp16/fp32
 * values byte for byte, BF16 converted, Conv1D transposed. */
static int write_matrix(mi_model_writer *w, const item *it, char *err)
{
    int transpose = (names[it->i].flags & TR) != 0;
    size_t rows = (size_t)it->rows, cols = (size_t)it->cols;
    if (it->parts) { /* a Hugging Face expert stack: the experts one after another */
        size_t er = rows / (size_t)it->n_parts;
        float *v = mi_malloc(rows * cols * sizeof(float), "import buffer");
        for (int e = 0; e < it->n_parts; e++)
            for (size_t r = 0; r < er; r++)
                to_float(&it->parts[e], r * cols, cols, v + ((size_t)e * er + r) * cols);
        int rc = mi_model_writer_put_tensor(w, it->our, it->dtype, v, rows, cols, 0, err);
        free(v);
        return rc;
    }
    if (it->t.dtype == it->dtype && !it->transposed_src) { /* kept as it is */
        /* k-quants: a row of super-blocks is ours as it is (no scales apart) */
        size_t qrow = mi_dtype_q_row_bytes(it->dtype, cols), nb = mi_dtype_split_scales(it->dtype) ? cols / MI_QK : 0;
        unsigned char *q = mi_malloc(rows * qrow + 1, "import buffer");
        uint16_t *d = mi_malloc(rows * nb * 2 + 2, "import scales");
        size_t bb = it->dtype == MI_Q8_0 ? 34 : 18, src_row = nb ? nb * bb : qrow;
        for (size_t r = 0; r < rows; r++) {
            const unsigned char *s = it->t.data + ((size_t)it->row0 + r) * src_row;
            if (!nb) {
                memcpy(q + r * qrow, s, qrow);
                continue;
            }
            for (size_t b = 0; b < nb; b++) { /* ggml: scale then values; ours: values and scales apart */
                memcpy(&d[r * nb + b], s + b * bb, 2);
                memcpy(q + r * qrow + b * (bb - 2), s + b * bb + 2, bb - 2);
            }
        }
        int rc = mi_model_writer_put_encoded(w, it->our, it->dtype, q, d, rows, cols, transpose, err);
        free(q);
        free(d);
        return rc;
    }
    float *v = mi_malloc(rows * cols * sizeof(float), "import buffer");
    item_rows_float(it, 0, (int64_t)rows, v);
    int rc = mi_model_writer_put_tensor(w, it->our, it->dtype, v, rows, cols, transpose, err);
    free(v);
    return rc;
}

static int write_item(im_ctx *x, mi_model_writer *w, const item *it, char *err)
{
    if (!strcmp(names[it->i].our, "rope_freqs") && x->rope_freqs)
        return mi_model_writer_put_tensor(w, it->our, MI_F32, x->rope_freqs, (size_t)it->rows, 1, 0, err);
    if ((names[it->i].flags & MAT) && strcmp(names[it->i].our, "pos_embed"))
        return write_matrix(w, it, err);
    size_t n = (size_t)(it->rows * it->cols);
    float *v = mi_malloc(n * sizeof(float), "import buffer");
    if (it->t.n_dims >= 2)
        item_rows_float(it, 0, it->rows, v);
    else
        to_float(&it->t, (size_t)it->row0, n, v);
    if ((names[it->i].flags & NORM) && x->norm_plus_one)
        for (size_t k = 0; k < n; k++)
            v[k] += 1.0f;
    int rc = mi_model_writer_put_tensor(w, it->our, MI_F32, v, (size_t)it->rows, (size_t)it->cols, 0, err);
    free(v);
    return rc;
}

/* The stored dtype of a matrix item into the config's table. */
static void record_dtype(mi_config *c, const item *it)
{
    static const char *const mats[MI_N_LAYER_MATS] = {"wq", "wk", "wv", "wo_t", "w1", "w2_t", "w3"};
    const char *s = names[it->i].our;
    if (!strcmp(s, "tok_embeddings")) {
        c->emb_dtype = (unsigned char)it->dtype;
        if (c->shared_classifier)
            c->cls_dtype = c->emb_dtype;
    } else if (!strcmp(s, "classifier")) {
        c->cls_dtype = (unsigned char)it->dtype;
    }
    for (int m = 0; m < MI_N_LAYER_MATS; m++)
        if (it->layer >= 0 && !strcmp(s, mats[m]))
            c->dtype[it->layer][m] = (unsigned char)it->dtype;
    if (it->layer >= 0 && !strcmp(s, "w1") && c->ffn_type != MI_FFNK_SWIGLU && c->ffn_type != MI_FFNK_GEGLU)
        c->dtype[it->layer][MI_W3] = (unsigned char)it->dtype;
    for (int m = 0; m < MI_N_LAYER_MATS; m++)
        if (it->layer >= 0 && mi_expert_mat_names[m] && !strcmp(s, mi_expert_mat_names[m]))
            c->dtype[it->layer][m] = (unsigned char)it->dtype;
    for (int m = 0; m < MI_N_MOE_MATS; m++)
        if (it->layer >= 0 && !strcmp(s, mi_moe_mat_names[m]))
            c->moe_dtype[it->layer][m] = (unsigned char)it->dtype;
}

static void free_items(item *items, int n)
{
    for (int k = 0; k < n; k++)
        free(items[k].parts);
    free(items);
}

/* Every tensor the config needs, found and checked (pass one). */
static item *plan_items(im_ctx *x, int *n_items, char *err)
{
    const mi_config *c = &x->cfg;
    item *items = mi_calloc((size_t)N_NAMES * (size_t)(c->n_layers + 1), sizeof(item), "import list");
    int n = 0;
    for (int l = -1; l < c->n_layers; l++)
        for (int i = l < 0 ? 0 : FIRST_LAYER_NAME; i < (l < 0 ? FIRST_LAYER_NAME : N_NAMES); i++) {
            int rc = find_item(x, i, l, &items[n], err);
            if (rc < 0) {
                free(items[n].parts);
                free_items(items, n);
                return NULL;
            }
            if (rc == 0) {
                if (names[i].flags & MAT)
                    record_dtype(&x->cfg, &items[n]);
                x->n_bf16_f16 += items[n].t.dtype == IM_BF16 && items[n].dtype == MI_F16;
                x->n_bf16_f32 += items[n].t.dtype == IM_BF16 && items[n].dtype == MI_F32 && (names[i].flags & MAT);
                n++;
            }
        }
    *n_items = n;
    return items;
}

/* No layer past the config's count: a config (or GGUF block_count) that
 * undercounts would drop the file's last layers without a word. Its first
 * missing layer's input norm (every family has one) must be absent. */
static int check_layer_count(const im_ctx *x, char *err)
{
    char buf[256];
    int64_t r0 = 0, nr = 0;
    im_tensor t;
    const char *nm = im_source_name(x, "attention_norm", x->cfg.n_layers, buf, sizeof buf, &r0, &nr);
    int rc = nm ? x->find(x, nm, &t, err) : 1;
    if (rc == 0)
        return mi_set_error(err, "%s: holds '%s', a tensor of layer %d, but its config says %d layers", x->src, nm,
                            x->cfg.n_layers, x->cfg.n_layers);
    return rc < 0 ? -1 : 0;
}

/* The tokenizer must fit the embeddings: every id a row. */
static int check_vocab(const im_ctx *x, char *err)
{
    if (x->has_tok && mi_tokenizer_check_rows(&x->tok, x->cfg.vocab_size, x->src, err))
        return -1;
    if (!x->has_tok)
        return mi_set_error(err, "%s: no tokenizer found (a GGUF needs tokenizer.ggml.* metadata, a folder "
                                 "tokenizer.json)", x->src);
    return 0;
}

static int write_all(im_ctx *x, const item *items, int n, const char *out, char *err)
{
    mi_model_writer *w = mi_model_writer_create(out, &x->cfg, err);
    if (!w)
        return -1;
    FILE *pg = x->o ? x->o->progress : NULL;
    int rc = 0, L = x->cfg.n_layers, step = (L + 3) / 4;
    if (pg)
        fprintf(pg, "convert: %s -> %s (%s, %d layers)\n", x->src, out, mi_family_name(x->cfg.family), L);
    for (int k = 0; k < n && !rc; k++) {
        rc = write_item(x, w, &items[k], err);
        int l = items[k].layer;
        if (!rc && pg && l >= 0 && (k + 1 == n || items[k + 1].layer != l) && ((l + 1) % step == 0 || l + 1 == L))
            fprintf(pg, "convert: layer %d/%d written\n", l + 1, L);
    }
    if (!rc)
        rc = mi_model_writer_put_tokenizer(w, &x->tok, err);
    if (!rc && x->chat_template)
        rc = mi_model_writer_put_text(w, "chat_template", x->chat_template, err);
    if (rc) {
        mi_model_writer_abort(w);
        return -1;
    }
    return mi_model_writer_commit(w, err);
}

/* A GGUF's tensors that no part of the model read (a stray blk.5.* in a
 * 2-layer file, a family's tensor meshinfer does not use): said, not an
 * error, so that a file with an extra tensor still converts. */
static void unused_note(const im_ctx *x, FILE *f)
{
    if (!x->gguf || !x->used)
        return;
    const mi_gguf *g = x->h;
    int64_t n = 0, first = -1;
    for (int64_t i = 0; i < mi_gguf_n_tensors(g); i++)
        if (!x->used[i]) {
            if (first < 0)
                first = i;
            n++;
        }
    if (n)
        fprintf(f, "convert: note: %lld tensor%s of %s not used by the %s model (%s%s)\n", (long long)n,
                n > 1 ? "s" : "", x->src, mi_family_name(x->cfg.family), mi_gguf_tensor_at(g, first)->name,
                n > 1 ? ", ..." : "");
}

int mi_import(const char *src, const char *out, const mi_import_options *o, char *err)
{
    im_ctx x;
    memset(&x, 0, sizeof x);
    x.o = o;
    x.src = src;
    int kind = mi_import_kind(src), rc;
    struct stat st;
    if (kind == MI_IMPORT_NONE && (stat(src, &st) != 0 || !S_ISDIR(st.st_mode)) &&
        mi_check_input_file(src, "input", err))
        return -1; /* missing, a FIFO or a device: said as such */
    if (kind == MI_IMPORT_NONE)
        return mi_set_error(err, "%s: neither a GGUF file nor a Hugging Face folder (config.json with safetensors)",
                            src);
    rc = kind == MI_IMPORT_GGUF ? im_gguf_open(&x, src, err) : im_hf_open(&x, src, err);
    if (!rc && o && o->name) /* --name replaces the source's (checked by the caller: 1 to 63 bytes) */
        snprintf(x.cfg.name, sizeof x.cfg.name, "%s", o->name);
    int n = 0;
    item *items = NULL;
    char cerr[MI_ERRLEN];
    if (!rc && mi_config_validate(&x.cfg, cerr))
        rc = mi_set_error(err, "%s: %s", src, cerr);
    if (!rc && !(items = plan_items(&x, &n, err)))
        rc = -1;
    if (!rc && mi_config_validate(&x.cfg, cerr)) /* with the dtypes found */
        rc = mi_set_error(err, "%s: %s", src, cerr);
    if (!rc)
        rc = check_layer_count(&x, err);
    if (!rc)
        rc = check_vocab(&x, err);
    if (!rc)
        rc = write_all(&x, items, n, out, err);
    if (!rc && o && o->summary) {
        char dts[160];
        fprintf(o->summary, "convert: %s -> %s: %s, %d layers, dim %d, %d heads (%d KV), vocab %d, context %d, %s",
                src, out, mi_family_name(x.cfg.family), x.cfg.n_layers, x.cfg.dim, x.cfg.n_heads, x.cfg.n_kv_heads,
                x.cfg.vocab_size, x.cfg.seq_len, mi_config_dtype_summary(&x.cfg, dts, sizeof dts));
        if (x.n_bf16_f16 || x.n_bf16_f32)
            fprintf(o->summary, "; bf16 matrices: %d as fp16 (every value exact), %d as fp32 (values outside fp16)",
                    x.n_bf16_f16, x.n_bf16_f32);
        fputc('\n', o->summary);
        unused_note(&x, o->summary);
    }
    if (items)
        free_items(items, n);
    free(x.used);
    if (kind == MI_IMPORT_GGUF)
        im_gguf_close(&x);
    else
        im_hf_close(&x);
    if (x.has_tok)
        mi_tokenizer_free(&x.tok);
    free(x.chat_template);
    free(x.rope_freqs);
    return rc;
}
