/* Choosing weight dtypes and writing lower-precision model files (see quantize.h). */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/quantize.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/model_file.h"

static int parse_dtype(const char *s, const char *what, mi_dtype *t, char *err)
{
    if (mi_dtype_parse(s, t))
        return mi_set_error(err, "%s: unknown dtype '%s' (fp32, fp16, q8_0, q4_0, q4_K, q5_K, q6_K%s)", what, s,
                            strcmp(what, "--dtype") ? "" : "; or the mixes q4_K_M, q5_K_M");
    return 0;
}

/* llama.cpp's llama_tensor_get_type for its *_M mixes: the layers whose
 * attention v and FFN down projections get q6_K (the first and last eighth,
 * and every third layer between). */
static int more_bits(int l, int n)
{
    return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2;
}

/* The k-quant t on a matrix whose blocked axis is `axis` long: t, or when
 * the axis is not whole super-blocks of 256, q4_0 for q4_K and q8_0 for
 * q5_K and q6_K (the 32-blocks at the same size, or at no less precision;
 * llama.cpp takes q5_0, q5_1, q8_0, which we do not have), or fp16 when the
 * axis is not whole blocks of 32 either; *n counts the fallbacks. */
static unsigned char fall_back(int t, int axis, int *n)
{
    if (!mi_dtype_kquant(t) || axis % MI_QK_K == 0)
        return (unsigned char)t;
    ++*n;
    if (axis % MI_QK)
        return MI_F16;
    return t == MI_Q4_K ? MI_Q4_0 : MI_Q8_0;
}

/* --dtype: one dtype for every matrix, or a mix (q4_K_M, q5_K_M), with the
 * k-quants' fall-back on rows that are not whole super-blocks when
 * n_fallback != NULL (else such a choice is left for the config's check to
 * refuse). */
static int apply_whole(mi_config *c, const char *dtype, int *n_fallback, char *err)
{
    mi_dtype t;
    int mix = !strcmp(dtype, "q4_K_M") || !strcmp(dtype, "q5_K_M");
    if (mix)
        t = dtype[1] == '4' ? MI_Q4_K : MI_Q5_K;
    else if (parse_dtype(dtype, "--dtype", &t, err))
        return -1;
    int nfb = 0, *fb = n_fallback ? n_fallback : &nfb, fallback = n_fallback != NULL;
    *fb = 0;
    const int axis[MI_N_LAYER_MATS] = {c->dim, c->dim, c->dim, c->n_heads * c->head_dim, c->dim, c->hidden_dim, c->dim};
    for (int l = 0; l < c->n_layers; l++)
        for (int m = 0; m < MI_N_LAYER_MATS; m++) {
            int lt = mix && (m == MI_WV || m == MI_W2) && more_bits(l, c->n_layers) ? MI_Q6_K : (int)t;
            c->dtype[l][m] = fallback ? fall_back(lt, axis[m], fb) : (unsigned char)lt;
        }
    /* the mixes' classifier is q6_K, and so are tied embeddings (one tensor); untied ones keep t */
    int ct = mix ? MI_Q6_K : (int)t, et = mix && !c->shared_classifier ? (int)t : ct;
    c->emb_dtype = fallback ? fall_back(et, c->dim, fb) : (unsigned char)et;
    c->cls_dtype = c->shared_classifier ? c->emb_dtype : fallback ? fall_back(ct, c->dim, fb) : (unsigned char)ct;
    return 0;
}

/* A non-negative layer index at *p (digits only); advances p. Numbers too
 * large for any model come back as INT_MAX, which the caller reports as a
 * layer that does not exist. */
static int parse_layer(const char **p, int *v)
{
    if (**p < '0' || **p > '9')
        return -1;
    char *end;
    errno = 0;
    long long x = strtoll(*p, &end, 10);
    *v = errno || x > INT_MAX ? INT_MAX : (int)x;
    *p = end;
    return 0;
}

int mi_dtypes_apply(mi_config *c, const char *dtype, const char *layer_spec, const char *emb_dtype, char *err)
{
    return mi_dtypes_apply_fallback(c, dtype, layer_spec, emb_dtype, NULL, err);
}

int mi_dtypes_apply_fallback(mi_config *c, const char *dtype, const char *layer_spec, const char *emb_dtype,
                             int *n_fallback, char *err)
{
    mi_dtype t;
    if (n_fallback)
        *n_fallback = 0;
    if (dtype && apply_whole(c, dtype, n_fallback, err))
        return -1;
    if (emb_dtype) {
        if (parse_dtype(emb_dtype, "--embeddings-dtype", &t, err))
            return -1;
        c->emb_dtype = c->cls_dtype = (unsigned char)t;
    }
    if (layer_spec) {
        unsigned char *seen = calloc((size_t)c->n_layers, 1);
        const char *p = layer_spec;
        int rc = 0;
        if (!*p)
            rc = mi_set_error(err, "--layer-dtype is empty (expected e.g. 0-1:q8_0,2-5:q4_0)");
        while (!rc && *p) {
            int a, b;
            if (parse_layer(&p, &a)) {
                rc = mi_set_error(err, "--layer-dtype '%s': expected a layer number at '%s'", layer_spec, p);
                break;
            }
            b = a;
            if (*p == '-') {
                p++;
                if (parse_layer(&p, &b) || b < a) {
                    rc = mi_set_error(err, "--layer-dtype '%s': bad layer range before '%s'", layer_spec, p);
                    break;
                }
            }
            if (*p != ':') {
                rc = mi_set_error(err, "--layer-dtype '%s': expected ':DTYPE' after the layers at '%s'", layer_spec,
                                  p);
                break;
            }
            char name[16];
            size_t n = strcspn(++p, ",");
            if (n == 0) {
                rc = mi_set_error(err, "--layer-dtype '%s': expected a dtype at '%s'", layer_spec, p);
                break;
            }
            if (n >= sizeof name) {
                rc = mi_set_error(err, "--layer-dtype: unknown dtype '%.*s' (fp32, fp16, q8_0, q4_0, q4_K, q5_K, "
                                       "q6_K)", (int)n, p);
                break;
            }
            memcpy(name, p, n);
            name[n] = '\0';
            p += n;
            if (parse_dtype(name, "--layer-dtype", &t, err)) {
                rc = -1;
                break;
            }
            if (b >= c->n_layers) {
                if (b == INT_MAX)
                    rc = mi_set_error(err, "--layer-dtype: a layer beyond %d does not exist (the model has %d layers, "
                                           "0-%d)", INT_MAX - 1, c->n_layers, c->n_layers - 1);
                else
                    rc = mi_set_error(err, "--layer-dtype: layer %d does not exist (the model has %d layers, 0-%d)", b,
                                      c->n_layers, c->n_layers - 1);
                break;
            }
            for (int l = a; l <= b && !rc; l++) {
                if (seen[l]++)
                    rc = mi_set_error(err, "--layer-dtype: layer %d is given twice", l);
                memset(c->dtype[l], (int)t, MI_N_LAYER_MATS);
            }
            if (*p == ',' && !*++p)
                rc = mi_set_error(err, "--layer-dtype '%s' ends with a comma", layer_spec);
        }
        free(seen);
        if (rc)
            return -1;
    }
    char cerr[MI_ERRLEN];
    if (mi_config_validate(c, cerr))
        return mi_set_error(err, "%s", cerr);
    return 0;
}

/* Every value finite and within what dtype t can hold (fp16: 65504; a
 * block's fp16 scale: 65504 * 127 for q8_0, 65504 * 8 for q4_0; a k-quant's
 * fp16 d times its largest sub-block scale and level, halved for q4_K/q5_K
 * whose levels span max - min); otherwise name the tensor and the first bad
 * element. */
static int check_values(int t, const float *x, size_t n, const char *name, const char *path, char *err)
{
    double lim = t == MI_F16    ? 65504.0
                 : t == MI_Q8_0 ? 65504.0 * 127
                 : t == MI_Q4_0 ? 65504.0 * 8
                 : t == MI_Q4_K ? 65504.0 * 63 * 15 / 2
                 : t == MI_Q5_K ? 65504.0 * 63 * 31 / 2
                 : t == MI_Q6_K ? 65504.0 * 127 * 32
                                : INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            return mi_set_error(err, "%s: tensor '%s' holds a non-finite value (%g at element %zu); refusing to "
                                     "quantize it", path, name, (double)x[i], i);
        if (fabs((double)x[i]) > lim)
            return mi_set_error(err, "%s: tensor '%s' holds %g at element %zu, beyond what %s can hold (%g); keep "
                                     "it in a wider dtype", path, name, (double)x[i], i, mi_dtype_name(t), lim);
    }
    return 0;
}

/* Keep the hidden channels `keep` (ascending) of a matrix held as rows x cols
 * fp32 in buf: rows when rows_are_channels (w1, w3), else columns (w2 in the
 * product's orientation). In place: each value moves to an index no greater
 * than its own, in order, so nothing is overwritten before it is read. */
static void select_channels(float *buf, size_t rows, size_t cols, const int *keep, size_t kept, int rows_are_channels)
{
    if (rows_are_channels) {
        for (size_t i = 0; i < kept; i++)
            memmove(buf + i * cols, buf + (size_t)keep[i] * cols, cols * sizeof(float));
        return;
    }
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < kept; j++)
            buf[r * kept + j] = buf[r * cols + (size_t)keep[j]];
}

int mi_model_quantize(const char *in, const char *out, const mi_config *target, int progress, char *err)
{
    return mi_model_quantize_pruned(in, out, target, NULL, progress, err);
}

int mi_model_quantize_pruned(const char *in, const char *out, const mi_config *target, const int *ffn_keep,
                             int progress, char *err)
{
    if (mi_output_check(out, "model file", &in, 1, err))
        return -1;
    mi_config c;
    mi_model_file *mf = mi_model_open(in, &c, err);
    if (!mf)
        return -1;
    int rc = 0;
    /* the input must be fp32: quantizing quantized values compounds errors */
    const char *lower = NULL;
    int lower_t = 0;
    char where[64] = "";
    if (c.emb_dtype != MI_F32) {
        lower = "tok_embeddings";
        lower_t = c.emb_dtype;
    }
    for (int l = 0; l < c.n_layers && !lower; l++)
        for (int m = 0; m < MI_N_LAYER_MATS && !lower; m++)
            if (c.dtype[l][m] != MI_F32) {
                snprintf(where, sizeof where, "layer %d %s", l, mi_layer_mat_names[m]);
                lower = where;
                lower_t = c.dtype[l][m];
            }
    for (int l = 0; l < c.n_layers && !lower && mi_config_is_moe(&c); l++)
        for (int m = 0; m < MI_N_MOE_MATS && !lower; m++)
            if (c.moe_dtype[l][m] != MI_F32) {
                snprintf(where, sizeof where, "layer %d %s", l, mi_moe_mat_names[m]);
                lower = where;
                lower_t = c.moe_dtype[l][m];
            }
    if (!lower && !c.shared_classifier && c.cls_dtype != MI_F32) {
        lower = "classifier";
        lower_t = c.cls_dtype;
    }
    if (lower)
        rc = mi_set_error(err, "%s is already quantized (%s is %s): quantize from the fp32 model", in, lower,
                          mi_dtype_name(lower_t));
    /* pruning keeps a subset of the hidden channels; otherwise the shape is the input's */
    int pruned = ffn_keep && target->hidden_dim != c.hidden_dim;
    if (!rc && ffn_keep && mi_config_is_moe(&c))
        rc = mi_set_error(err, "%s: pruning FFN channels of a mixture of experts is not supported", in);
    if (!rc && ffn_keep && (target->hidden_dim > c.hidden_dim || target->hidden_dim <= 0))
        rc = mi_set_error(err, "%s: pruning keeps at most its %d hidden channels (asked %d)", in, c.hidden_dim,
                          target->hidden_dim);
    for (int l = 0; pruned && !rc && l < c.n_layers; l++)
        for (int i = 0; i < target->hidden_dim && !rc; i++) {
            int u = ffn_keep[(size_t)l * target->hidden_dim + i];
            if (u < 0 || u >= c.hidden_dim || (i && u <= ffn_keep[(size_t)l * target->hidden_dim + i - 1]))
                rc = mi_set_error(err, "%s: layer %d's kept hidden channels must ascend within 0..%d", in, l,
                                  c.hidden_dim - 1);
        }
    if (!rc && (target->dim != c.dim || (!pruned && target->hidden_dim != c.hidden_dim) || target->n_layers != c.n_layers ||
                target->n_heads != c.n_heads || target->n_kv_heads != c.n_kv_heads ||
                target->vocab_size != c.vocab_size))
        rc = mi_set_error(err, "%s: the target dtypes are for a model of another shape", in);
    mi_config oc = c;
    oc.hidden_dim = pruned ? target->hidden_dim : c.hidden_dim;
    if (!rc) {
        memcpy(oc.dtype, target->dtype, sizeof oc.dtype);
        oc.emb_dtype = target->emb_dtype;
        oc.cls_dtype = c.shared_classifier ? target->emb_dtype : target->cls_dtype;
        /* a mixture of experts: the shared expert takes the layer's w1, w2, w3 dtypes as the experts do;
         * the router stays float32, as llama.cpp keeps ffn_gate_inp (its scores choose the experts) */
        for (int l = 0; l < c.n_layers && mi_config_is_moe(&c); l++) {
            oc.moe_dtype[l][MI_MOE_ROUTER] = MI_F32;
            oc.moe_dtype[l][MI_MOE_SW1] = oc.dtype[l][MI_W1];
            oc.moe_dtype[l][MI_MOE_SW2] = oc.dtype[l][MI_W2];
            oc.moe_dtype[l][MI_MOE_SW3] = oc.dtype[l][MI_W3];
        }
    }
    mi_model_writer *w = rc ? NULL : mi_model_writer_create(out, &oc, err);
    if (!w)
        rc = -1;
    size_t d = (size_t)c.dim, V = (size_t)c.vocab_size, h = (size_t)c.hidden_dim;
    size_t q = (size_t)c.n_heads * (size_t)c.head_dim, kv = (size_t)mi_kv_dim(&c);
    size_t biggest = V * d > h * d ? V * d : h * d;
    if (biggest < (size_t)c.seq_len * d) /* learned positions */
        biggest = (size_t)c.seq_len * d;
    if (biggest < q * d)
        biggest = q * d;
    size_t E = (size_t)c.n_experts, sh = (size_t)c.shared_hidden_dim;
    if (biggest < E * h * d)
        biggest = E * h * d;
    if (biggest < sh * d)
        biggest = sh * d;
    float *buf = rc ? NULL : mi_malloc(biggest * sizeof(float), "tensor buffer");
    /* one tensor: read fp32 (transposed ones back in the product's
     * orientation), check, write in its dtype */
#define COPY(nm, dt, rows, cols, tr) COPY_KEEP(nm, dt, rows, cols, tr, NULL, 0)
    /* keep: the hidden channels kept (NULL: all); w1 and w3 lose rows, w2 columns */
#define COPY_KEEP(nm, dt, rows, cols, tr, keep, on_rows)                                                 \
    if (!rc) {                                                                                           \
        size_t r_ = (rows), c_ = (cols);                                                                 \
        rc = (tr) ? mi_model_read_t(mf, nm, 0, c_, buf, err) : mi_model_read_rows(mf, nm, 0, r_, buf, biggest, err); \
        if (!rc && (keep)) {                                                                             \
            select_channels(buf, r_, c_, (keep), (size_t)oc.hidden_dim, (on_rows));                      \
            *((on_rows) ? &r_ : &c_) = (size_t)oc.hidden_dim;                                            \
        }                                                                                                \
        if (!rc)                                                                                         \
            rc = check_values((dt), buf, r_ * c_, nm, in, err);                                          \
        if (!rc)                                                                                         \
            rc = mi_model_writer_put_tensor(w, nm, (dt), buf, r_, c_, (tr), err);                        \
    }
    COPY("tok_embeddings", oc.emb_dtype, V, d, 0);
    COPY("norm", MI_F32, d, 1, 0);
    if (!c.shared_classifier)
        COPY("classifier", oc.cls_dtype, V, d, 0);
    const char *tn[MI_MAX_TRAIT_TENSORS];
    size_t tr_[MI_MAX_TRAIT_TENSORS], tc_[MI_MAX_TRAIT_TENSORS];
    /* the family's vectors as they are (fp32); FFN biases lose the pruned channels */
    for (int l = -1; l < c.n_layers && !rc; l++) {
        int nt = mi_config_trait_tensors(&c, l, tn, tr_, tc_);
        for (int i = 0; i < nt; i++) {
            char nm[128];
            if (l < 0)
                snprintf(nm, sizeof nm, "%s", tn[i]);
            else
                mi_model_layer_name(nm, sizeof nm, l, tn[i]);
            const int *keep = pruned && !strcmp(tn[i], "w1_b") ? ffn_keep + (size_t)l * oc.hidden_dim : NULL;
            COPY_KEEP(nm, MI_F32, tr_[i], tc_[i], 0, keep, 1);
        }
    }
    const size_t rows[MI_N_LAYER_MATS] = {q, kv, kv, d, h, d, h}, cols[MI_N_LAYER_MATS] = {d, d, d, q, d, h, d};
    for (int l = 0; l < c.n_layers && !rc; l++) {
        char nm[128];
        mi_model_layer_name(nm, sizeof nm, l, "attention_norm");
        COPY(nm, MI_F32, d, 1, 0);
        mi_model_layer_name(nm, sizeof nm, l, "ffn_norm");
        COPY(nm, MI_F32, d, 1, 0);
        for (int m = 0; m < MI_N_LAYER_MATS; m++) {
            if (m == MI_W3 && c.ffn_type != MI_FFNK_SWIGLU && c.ffn_type != MI_FFNK_GEGLU)
                continue; /* no gate */
            if (mi_config_is_moe(&c) && (m == MI_W1 || m == MI_W2 || m == MI_W3)) { /* the stacked experts */
                mi_model_layer_name(nm, sizeof nm, l, mi_expert_mat_names[m]);
                COPY(nm, oc.dtype[l][m], m == MI_W2 ? E * d : E * h, m == MI_W2 ? h : d, 0);
                continue;
            }
            mi_model_layer_name(nm, sizeof nm, l, mi_layer_mat_names[m]);
            /* wo_t and w2_t are stored transposed: [rows, cols] here is the product's orientation */
            const int *keep = pruned && (m == MI_W1 || m == MI_W2 || m == MI_W3)
                                  ? ffn_keep + (size_t)l * oc.hidden_dim : NULL;
            COPY_KEEP(nm, oc.dtype[l][m], rows[m], cols[m], m == MI_WO || m == MI_W2, keep, m != MI_W2);
        }
        for (int m = 0; m < MI_N_MOE_MATS && mi_config_is_moe(&c); m++) {
            if (m != MI_MOE_ROUTER && sh == 0)
                continue;
            mi_model_layer_name(nm, sizeof nm, l, mi_moe_mat_names[m]);
            COPY(nm, oc.moe_dtype[l][m], m == MI_MOE_ROUTER ? E : m == MI_MOE_SW2 ? d : sh, m == MI_MOE_SW2 ? sh : d,
                 m == MI_MOE_SW2);
        }
        if (progress == 2)
            fprintf(stderr, "\rquantize: layer %d/%d written", l + 1, c.n_layers);
        else if (progress && ((l + 1) % ((c.n_layers + 3) / 4) == 0 || l + 1 == c.n_layers))
            fprintf(stderr, "quantize: layer %d/%d written\n", l + 1, c.n_layers);
    }
#undef COPY
#undef COPY_KEEP
    if (progress == 2 && w)
        fputc('\n', stderr);
    free(buf);
    if (!rc) {
        mi_tokenizer tok;
        rc = mi_model_read_tokenizer(mf, &tok, err);
        if (!rc) {
            rc = mi_model_writer_put_tokenizer(w, &tok, err);
            mi_tokenizer_free(&tok);
        }
    }
    char *tmpl = NULL;
    if (!rc && mi_model_read_text(mf, "chat_template", &tmpl, err) == 0)
        rc = mi_model_writer_put_text(w, "chat_template", tmpl, err);
    free(tmpl);
    mi_model_close(mf);
    if (rc) {
        mi_model_writer_abort(w);
        return -1;
    }
    return mi_model_writer_commit(w, err);
}
