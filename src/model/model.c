/* Loading a model, or one device's shard of it (see model.h). */
#define _GNU_SOURCE
#include "meshinfer/model.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "meshinfer/common.h"

static int file_fetch(void *ctx, const char *name, size_t row0, size_t nrows, size_t row_bytes, size_t byte0,
                      size_t nbytes, void *out, char *err)
{
    return mi_model_read_raw_cols((mi_model_file *)ctx, name, row0, nrows, row_bytes, byte0, nbytes, out, err);
}

mi_weight_source mi_weight_source_file(mi_model_file *mf)
{
    mi_weight_source s = {file_fetch, mf, 0};
    return s;
}

mi_layer_spec mi_layer_spec_full(const mi_config *c)
{
    mi_layer_spec s;
    memset(&s, 0, sizeof s);
    s.n_kv = c->n_kv_heads;
    for (int k = 0; k < c->n_kv_heads && k < MI_MAX_KV_HEADS; k++)
        s.kv[k] = (unsigned char)k;
    s.proj = MI_PROJ_FULL;
    s.f0 = 0;
    s.nf = c->hidden_dim;
    s.n_experts = c->n_experts;
    for (int e = 0; e < c->n_experts && e < MI_MAX_EXPERTS; e++)
        s.experts[e] = (unsigned char)e;
    return s;
}

mi_shard_spec mi_shard_spec_full(const mi_config *c, mi_layer_spec *layers)
{
    for (int l = 0; l < c->n_layers; l++)
        layers[l] = mi_layer_spec_full(c);
    mi_shard_spec s;
    memset(&s, 0, sizeof s);
    s.layers = layers;
    s.embeddings = 1;
    s.cls_nv = c->vocab_size;
    return s;
}

void mi_emb_cover(const mi_config *c, int c0, int nc, int *a, int *b)
{
    int q = mi_dtype_block(c->emb_dtype) > 1 ? mi_dtype_block(c->emb_dtype) : 1;
    *a = c0 / q * q;
    *b = (c0 + nc + q - 1) / q * q;
    if (*b > c->dim)
        *b = c->dim;
}

void mi_model_embed(const mi_model *m, int tok, int pos, float *out)
{
    const mi_tensor *t = &m->tok_embeddings;
    const mi_config *c = &m->cfg;
    int r = tok - m->emb_v0;
    if (r < 0 || r >= m->emb_nv || r >= t->rows) { /* another rank's row (a split vocabulary) */
        memset(out, 0, (size_t)m->emb_nc * sizeof(float));
        return;
    }
    if (m->emb_skip == 0 && m->emb_nc == t->cols) {
        mi_tensor_row_f32(t, r, out);
    } else {
        float row[t->cols];
        mi_tensor_row_f32(t, r, row);
        memcpy(out, row + m->emb_skip, (size_t)m->emb_nc * sizeof(float));
    }
    if (c->emb_scale > 0.0f)
        for (int i = 0; i < m->emb_nc; i++)
            out[i] *= c->emb_scale;
    if (c->pos_embed && m->pos_embed) {
        const float *p = m->pos_embed + (size_t)pos * c->dim + m->emb_c0;
        for (int i = 0; i < m->emb_nc; i++)
            out[i] += p[i];
    }
}

/* The spec holds every column of the embedding rows its classifier rows
 * are (all of them, a somegather slice that is the whole width, or a split
 * vocabulary's rows around them): a tied classifier is then a view. */
static int whole_table(const mi_config *c, const mi_shard_spec *spec)
{
    if (spec->emb_nv > 0 && !spec->embeddings && spec->emb_nc == 0)
        return spec->cls_v0 >= spec->emb_v0 && spec->cls_v0 + spec->cls_nv <= spec->emb_v0 + spec->emb_nv;
    return spec->embeddings || (spec->emb_c0 == 0 && spec->emb_nc == c->dim);
}

/* A split vocabulary's embedding rows (spec.emb_v0/emb_nv): the spec holds them. */
static int emb_rows(const mi_shard_spec *spec)
{
    return !spec->embeddings && spec->emb_nc == 0 && spec->emb_nv > 0;
}

size_t mi_shard_weight_bytes(const mi_config *c, const mi_shard_spec *spec)
{
    size_t f = sizeof(float), d = (size_t)c->dim;
    size_t norm = d * f * (c->norm_type == MI_NORMK_LAYER ? 2 : 1), post = c->post_norms ? d * f : 0, n = 0;
    if (spec->embeddings) {
        n += mi_embedding_bytes(c);
    } else if (spec->emb_nc > 0) {
        int a, b;
        mi_emb_cover(c, spec->emb_c0, spec->emb_nc, &a, &b);
        n += (size_t)c->vocab_size * mi_dtype_row_bytes(c->emb_dtype, (size_t)(b - a)) +
             (c->pos_embed ? (size_t)c->seq_len * d * f : 0);
    } else if (emb_rows(spec)) {
        n += (size_t)spec->emb_nv * mi_dtype_row_bytes(c->emb_dtype, d) +
             (c->pos_embed ? (size_t)c->seq_len * d * f : 0);
    }
    if (spec->embeddings || spec->cls_nv > 0)
        n += norm;
    if (spec->cls_nv > 0 && !(whole_table(c, spec) && c->shared_classifier))
        n += mi_classifier_bytes(c, spec->cls_nv);
    if (c->rope_freqs)
        n += (size_t)c->head_dim / 2 * f;
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_spec *s = &spec->layers[l];
        if (s->n_kv > 0)
            n += norm + (size_t)s->n_kv * mi_head_group_bytes(c, l) + (c->qk_norm ? 2 * (size_t)c->head_dim * f : 0);
        size_t nq = (size_t)c->n_heads * c->head_dim, no = s->proj == MI_PROJ_ROWS ? (size_t)s->no : d;
        if (s->proj == MI_PROJ_FULL)
            n += mi_proj_bytes(c, l, c->n_kv_heads);
        else if (s->proj == MI_PROJ_HEADS)
            n += mi_proj_bytes(c, l, s->n_kv);
        else if (s->proj == MI_PROJ_ROWS)
            n += (size_t)s->no * mi_dtype_row_bytes(c->dtype[l][MI_WO], nq);
        if (s->proj != MI_PROJ_NONE)
            n += post + (c->out_bias ? no * f : 0);
        if (s->nf > 0 && mi_config_is_moe(c))
            n += norm + mi_moe_common_bytes(c, l) - (s->no_shared ? mi_moe_shared_bytes(c, l) : 0) +
                 mi_experts_bytes(c, l, s->n_experts);
        else if (s->nf > 0 && !s->w2_rows)
            n += norm + post + mi_ffn_bytes(c, l, s->nf) + (c->out_bias ? d * f : 0);
        else if (s->nf > 0)
            n += norm + post + (size_t)s->nf * (mi_dtype_row_bytes(c->dtype[l][MI_W1], d) + mi_w3_row_bytes(c, l)) +
                 (size_t)s->no * mi_dtype_row_bytes(c->dtype[l][MI_W2], (size_t)c->hidden_dim) +
                 (c->out_bias ? ((size_t)s->nf + (size_t)s->no) * f : 0);
    }
    return n;
}

size_t mi_shard_kv_bytes(const mi_config *c, const mi_shard_spec *spec)
{
    size_t n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += (size_t)spec->layers[l].n_kv;
    return 2 * n * mi_config_kv_stride(c) * (size_t)c->head_dim * sizeof(float);
}

/* ------------------------------------------------------------ arenas */

#define HUGE_PAGE ((size_t)2 << 20)

/* One mapping per layer (and one for the embeddings and classifier): its
 * start is aligned to 2 MB and the whole 2 MB pages inside it may be huge
 * pages, which streams weights faster (fewer TLB misses); the tail keeps 4 KB
 * pages so that resident memory stays the weights' size. Returned to the
 * system when freed, so a re-placement really gives the memory back. */
static void *arena_alloc(size_t bytes)
{
    if (bytes == 0)
        return NULL;
    size_t len = bytes + (bytes >= HUGE_PAGE ? HUGE_PAGE : 0);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        mi_fatal("out of memory: cannot map %zu bytes of weights", bytes);
    if (bytes < HUGE_PAGE)
        return p;
    char *a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    size_t tail = (size_t)(p + len - (a + bytes));
    if (tail > 0)
        munmap(a + bytes, tail);
#ifdef MADV_HUGEPAGE
    madvise(a, bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
    return a;
}

static void arena_free(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

/* ------------------------------------------------------------ loading */

#define MAX_RANGES MI_MAX_KV_HEADS

/* One tensor to load: stored row ranges of a dataset (or block group). A
 * transposed tensor (wo_t, w2_t) is stored as the transpose of the matrix the
 * product uses: its ranges select columns of that matrix. */
typedef struct {
    char name[128];
    int dtype;
    size_t stored_cols;
    size_t c0, nc;    /* stored columns [c0, c0+nc) (all: 0, stored_cols): a transposed tensor's rows */
    int transposed;
    int n;
    size_t r0[MAX_RANGES], len[MAX_RANGES];
    mi_tensor *dst;   /* receives the tensor ... */
    float **vec;      /* ... or, for a norm, the float vector */
    mi_tensor t;      /* its in-memory shape */
} treq;

typedef struct {
    mi_model *m;
    const mi_weight_source *src;
    int rc;
    char *err;
    treq req[32];
    int n_req;
} loader;

static treq *want(loader *ld, int layer, const char *t, int dtype, size_t stored_cols, int transposed)
{
    treq *r = &ld->req[ld->n_req++];
    memset(r, 0, sizeof *r);
    if (layer >= 0)
        mi_model_layer_name(r->name, sizeof r->name, layer, t);
    else
        snprintf(r->name, sizeof r->name, "%s", t);
    r->dtype = dtype;
    r->stored_cols = stored_cols;
    r->nc = stored_cols;
    r->transposed = transposed;
    return r;
}

static treq *add_range(treq *r, size_t r0, size_t len)
{
    if (r->n > 0 && r->r0[r->n - 1] + r->len[r->n - 1] == r0) { /* merge runs: a block may span heads */
        r->len[r->n - 1] += len;
    } else {
        r->r0[r->n] = r0;
        r->len[r->n++] = len;
    }
    return r;
}

static size_t total_rows(const treq *r)
{
    size_t n = 0;
    for (int i = 0; i < r->n; i++)
        n += r->len[i];
    return n;
}

/* Transpose a [rows, cols] matrix of es-byte elements into out [cols, rows]. */
static void transpose_bytes(const unsigned char *in, size_t rows, size_t cols, size_t es, unsigned char *out)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            memcpy(out + (j * rows + i) * es, in + (i * cols + j) * es, es);
}

/* Stored bytes per element of the values part (a q4_0 byte holds two). */
static size_t stored_elem_bytes(int dtype)
{
    return dtype == MI_F32 ? 4 : dtype == MI_F16 ? 2 : 1;
}

/* Fetch the stored rows of one part (values or scales) of r into out:
 * rows are scaled by num/den (q4_0 values pack two rows per byte row of a
 * transposed tensor; scales hold one row per 32). */
static void fetch_part(loader *ld, const treq *r, const char *ds, size_t row_bytes, size_t byte0, size_t nbytes,
                       size_t num, size_t den, unsigned char *out)
{
    size_t off = 0;
    for (int i = 0; i < r->n && !ld->rc; i++) {
        size_t a = r->r0[i] * num / den, n = r->len[i] * num / den;
        if (ld->src->fetch(ld->src->ctx, ds, a, n, row_bytes, byte0, nbytes, out ? out + off : NULL, ld->err))
            ld->rc = -1;
        off += n * nbytes;
    }
}

static void load_one(loader *ld, treq *r, unsigned char *stage)
{
    int blocked = mi_dtype_blocked(r->dtype), scales = mi_dtype_split_scales(r->dtype);
    int block = blocked ? mi_dtype_block(r->dtype) : 1;
    char ds[160];
    snprintf(ds, sizeof ds, blocked ? "%s/qs" : "%s", r->name);
    mi_tensor *t = &r->t;
    if (!r->transposed) {
        /* a column slice of a block dtype is whole blocks (the caller covers the columns it needs) */
        size_t qrow = mi_dtype_q_row_bytes(r->dtype, r->stored_cols);
        size_t qa = mi_dtype_q_row_bytes(r->dtype, r->c0), qn = mi_dtype_q_row_bytes(r->dtype, r->nc);
        fetch_part(ld, r, ds, qrow, qa, qn, 1, 1, stage ? stage : t->q);
        if (scales) {
            snprintf(ds, sizeof ds, "%s/d", r->name);
            fetch_part(ld, r, ds, 2 * (r->stored_cols / MI_QK), 2 * (r->c0 / MI_QK), 2 * (r->nc / MI_QK), 1, 1,
                       stage ? stage : (unsigned char *)t->d);
        }
        return;
    }
    /* transposed: fetch whole stored rows, then transpose into the product's layout */
    for (int i = 0; i < r->n && blocked; i++)
        if (r->r0[i] % (size_t)block || r->len[i] % (size_t)block) {
            ld->rc = mi_set_error(ld->err, "%s: columns [%zu, %zu) cut %s blocks of %d (a shard of wo or w2 must be "
                                           "whole blocks)", r->name, r->r0[i], r->r0[i] + r->len[i],
                                  mi_dtype_name(r->dtype), block);
            return;
        }
    size_t n = total_rows(r);
    if (mi_dtype_kquant(r->dtype)) {
        /* stored row k holds super-block k of every product row (model_file.h): the product's
         * columns [r0, r0+len) are stored rows [r0/256, (r0+len)/256), its rows [c0, c0+nc)
         * a byte range of each; transposed back in units of one super-block */
        size_t bb = mi_dtype_q_row_bytes(r->dtype, MI_QK_K);
        fetch_part(ld, r, ds, r->stored_cols * bb, r->c0 * bb, r->nc * bb, 1, MI_QK_K, stage);
        if (!ld->rc && !ld->src->discard)
            transpose_bytes(stage, n / MI_QK_K, r->nc, bb, t->q);
        return;
    }
    /* stored columns [c0, c0+nc) are the product's rows: any range (blocks run along the stored rows) */
    size_t es = stored_elem_bytes(r->dtype), row_bytes = r->stored_cols * es;
    size_t num = 1, den = r->dtype == MI_Q4_0 ? 2 : 1, qrows = n * num / den;
    fetch_part(ld, r, ds, row_bytes, r->c0 * es, r->nc * es, num, den, stage);
    if (!ld->rc && !ld->src->discard)
        transpose_bytes(stage, qrows, r->nc, es, t->q);
    if (scales && !ld->rc) {
        snprintf(ds, sizeof ds, "%s/d", r->name);
        fetch_part(ld, r, ds, 2 * r->stored_cols, 2 * r->c0, 2 * r->nc, 1, MI_QK, stage);
        if (!ld->rc && !ld->src->discard)
            transpose_bytes(stage, n / MI_QK, r->nc, 2, (unsigned char *)t->d);
    }
}

/* Load every requested tensor into one arena (*arena, *bytes); with a
 * discarding source, only fetch. */
static void load_group(loader *ld, void **arena, size_t *arena_bytes)
{
    size_t total = 0, stage_bytes = 0;
    for (int i = 0; i < ld->n_req; i++) {
        treq *r = &ld->req[i];
        size_t n = total_rows(r);
        r->t = r->transposed ? mi_tensor_shape(r->dtype, (int)r->nc, (int)n) : mi_tensor_shape(r->dtype, (int)n, (int)r->nc);
        total += mi_tensor_place_bytes(r->dtype, (size_t)r->t.rows, (size_t)r->t.cols);
        /* the staged stored rows: as many bytes as the tensor in memory */
        size_t need = ld->src->discard || r->transposed
                          ? mi_tensor_place_bytes(r->dtype, (size_t)r->t.rows, (size_t)r->t.cols)
                          : 0;
        if (need > stage_bytes)
            stage_bytes = need;
    }
    unsigned char *stage = stage_bytes ? mi_malloc(stage_bytes, "weight staging") : NULL;
    unsigned char *mem = ld->src->discard ? NULL : arena_alloc(total);
    size_t off = 0;
    for (int i = 0; i < ld->n_req && !ld->rc; i++) {
        treq *r = &ld->req[i];
        if (mem) {
            off += mi_tensor_place(&r->t, mem + off);
            ld->m->weight_bytes += mi_tensor_bytes(r->dtype, (size_t)r->t.rows, (size_t)r->t.cols);
        }
        load_one(ld, r, ld->src->discard || r->transposed ? stage : NULL);
        if (r->dst)
            *r->dst = r->t;
        if (r->vec)
            *r->vec = r->t.q;
    }
    free(stage);
    if (mem) {
        *arena = mem;
        *arena_bytes = total;
    }
    ld->n_req = 0;
}

/* A float vector (a norm, a bias, the positional table): rows [r0, r0+n)
 * of a 1-D dataset, or of a 2-D one with `cols` columns. */
static void want_vec(loader *ld, int layer, const char *name, size_t cols, size_t r0, size_t n, float **dst)
{
    treq *r = want(ld, layer, name, MI_F32, cols, 0);
    add_range(r, r0, n);
    r->vec = dst;
}

/* A float vector when the family has it (has), else nothing. */
static void want_opt(loader *ld, int has, int layer, const char *name, size_t r0, size_t n, float **dst)
{
    if (has)
        want_vec(ld, layer, name, 1, r0, n, dst);
}

/* A language model's embeddings (with learned positions), final norm,
 * classifier rows and RoPE factors: one arena. Returns -1 (m freed, err set)
 * on a bad spec. */
static int load_lm_tables(loader *ld, mi_model *m, const mi_config *c, const mi_shard_spec *spec)
{
    size_t d = (size_t)c->dim, V = (size_t)c->vocab_size;
    int layer_norm = c->norm_type == MI_NORMK_LAYER;
    int cls_view = spec->cls_nv > 0 && whole_table(c, spec) && c->shared_classifier;
    if (spec->embeddings) {
        add_range(want(ld, -1, "tok_embeddings", c->emb_dtype, d, 0), 0, V)->dst = &m->tok_embeddings;
        m->emb_c0 = 0;
        m->emb_nc = (int)d;
    } else if (spec->emb_nc > 0) {
        if (spec->emb_c0 < 0 || (size_t)(spec->emb_c0 + spec->emb_nc) > d) {
            mi_model_free(m);
            return mi_set_error(ld->err, "embedding columns [%d, %d) are outside dim %zu", spec->emb_c0,
                                spec->emb_c0 + spec->emb_nc, d);
        }
        int a, b;
        mi_emb_cover(c, spec->emb_c0, spec->emb_nc, &a, &b);
        treq *r = want(ld, -1, "tok_embeddings", c->emb_dtype, d, 0);
        r->c0 = (size_t)a;
        r->nc = (size_t)(b - a);
        add_range(r, 0, V)->dst = &m->tok_embeddings;
        m->emb_c0 = spec->emb_c0;
        m->emb_nc = spec->emb_nc;
        m->emb_skip = spec->emb_c0 - a;
    } else if (emb_rows(spec)) {
        if (spec->emb_v0 < 0 || (size_t)spec->emb_v0 + (size_t)spec->emb_nv > V) {
            mi_model_free(m);
            return mi_set_error(ld->err, "embedding rows [%d, %d) are outside the vocabulary of %zu", spec->emb_v0,
                                spec->emb_v0 + spec->emb_nv, V);
        }
        add_range(want(ld, -1, "tok_embeddings", c->emb_dtype, d, 0), (size_t)spec->emb_v0, (size_t)spec->emb_nv)
            ->dst = &m->tok_embeddings;
        m->emb_c0 = 0;
        m->emb_nc = (int)d;
        m->emb_v0 = spec->emb_v0;
        m->emb_nv = spec->emb_nv;
    }
    if (c->pos_embed && (spec->embeddings || spec->emb_nc > 0 || emb_rows(spec)))
        want_vec(ld, -1, "pos_embed", d, 0, (size_t)c->seq_len, &m->pos_embed);
    if (spec->embeddings || spec->cls_nv > 0) {
        want_vec(ld, -1, "norm", 1, 0, d, &m->norm);
        want_opt(ld, layer_norm, -1, "norm_b", 0, d, &m->norm_b);
    }
    if (spec->cls_nv > 0 && !cls_view) {
        treq *r = want(ld, -1, c->shared_classifier ? "tok_embeddings" : "classifier", c->cls_dtype, d, 0);
        add_range(r, (size_t)spec->cls_v0, (size_t)spec->cls_nv);
        r->dst = &m->classifier;
    }
    want_opt(ld, c->rope_freqs, -1, "rope_freqs", 0, (size_t)c->head_dim / 2, &m->rope_freqs);
    load_group(ld, &m->arena, &m->arena_bytes);
    if (cls_view && !ld->rc && !ld->src->discard) {
        m->classifier = mi_tensor_rows(&m->tok_embeddings, spec->cls_v0 - m->emb_v0, spec->cls_nv);
        m->cls_alias = 1;
    }
    return 0;
}

/* A mixture-of-experts FFN (config.h): its norm, router, shared expert and
 * gate, and the experts s holds, each a row range of the stacked datasets. */
static void load_moe(loader *ld, const mi_config *c, int l, const mi_layer_spec *s, mi_layer *L)
{
    size_t d = (size_t)c->dim, h = (size_t)c->hidden_dim, sh = (size_t)c->shared_hidden_dim;
    const unsigned char *dt = c->dtype[l], *mt = c->moe_dtype[l];
    want_vec(ld, l, "ffn_norm", 1, 0, d, &L->ffn_norm);
    add_range(want(ld, l, "router", mt[MI_MOE_ROUTER], d, 0), 0, (size_t)c->n_experts)->dst = &L->router;
    treq *w1 = want(ld, l, "experts_w1", dt[MI_W1], d, 0), *w3 = want(ld, l, "experts_w3", dt[MI_W3], d, 0);
    treq *w2 = want(ld, l, "experts_w2", dt[MI_W2], h, 0);
    for (int i = 0; i < s->n_experts; i++) {
        size_t e = s->experts[i];
        add_range(w1, e * h, h);
        add_range(w3, e * h, h);
        add_range(w2, e * d, d);
    }
    w1->dst = &L->ew1, w3->dst = &L->ew3, w2->dst = &L->ew2;
    if (sh > 0 && !s->no_shared) {
        add_range(want(ld, l, "shared_w1", mt[MI_MOE_SW1], d, 0), 0, sh)->dst = &L->sw1;
        add_range(want(ld, l, "shared_w3", mt[MI_MOE_SW3], d, 0), 0, sh)->dst = &L->sw3;
        add_range(want(ld, l, "shared_w2_t", mt[MI_MOE_SW2], d, 1), 0, sh)->dst = &L->sw2;
        want_vec(ld, l, "shared_gate", 1, 0, d, &L->shared_gate);
    }
}

/* Layer l's held parts (spec s) with the family's vectors: one arena. */
static void load_lm_layer(loader *ld, mi_model *m, const mi_config *c, int l, const mi_layer_spec *s)
{
    size_t d = (size_t)c->dim, hd = (size_t)c->head_dim, g = (size_t)mi_kv_group(c);
    size_t nq = (size_t)c->n_heads * hd;
    int ln = c->norm_type == MI_NORMK_LAYER, gate = c->ffn_type == MI_FFNK_SWIGLU || c->ffn_type == MI_FFNK_GEGLU;
    mi_layer *L = &m->layers[l];
    const unsigned char *dt = c->dtype[l];
    L->spec = *s;
    int nk = s->n_kv;
    treq *r;
    if (nk > 0) {
        want_vec(ld, l, "attention_norm", 1, 0, d, &L->attention_norm);
        want_opt(ld, ln, l, "attention_norm_b", 0, d, &L->attention_norm_b);
        treq *q = want(ld, l, "wq", dt[MI_WQ], d, 0), *k = want(ld, l, "wk", dt[MI_WK], d, 0);
        treq *v = want(ld, l, "wv", dt[MI_WV], d, 0);
        treq *bq = NULL, *bk = NULL, *bv = NULL;
        if (c->qkv_bias) {
            bq = want(ld, l, "wq_b", MI_F32, 1, 0), bk = want(ld, l, "wk_b", MI_F32, 1, 0);
            bv = want(ld, l, "wv_b", MI_F32, 1, 0);
            bq->vec = &L->bq, bk->vec = &L->bk, bv->vec = &L->bv;
        }
        for (int i = 0; i < nk; i++) {
            add_range(q, (size_t)s->kv[i] * g * hd, g * hd);
            add_range(k, (size_t)s->kv[i] * hd, hd);
            add_range(v, (size_t)s->kv[i] * hd, hd);
            if (bq) {
                add_range(bq, (size_t)s->kv[i] * g * hd, g * hd);
                add_range(bk, (size_t)s->kv[i] * hd, hd);
                add_range(bv, (size_t)s->kv[i] * hd, hd);
            }
        }
        q->dst = &L->wq, k->dst = &L->wk, v->dst = &L->wv;
        want_opt(ld, c->qk_norm, l, "q_norm", 0, hd, &L->q_norm);
        want_opt(ld, c->qk_norm, l, "k_norm", 0, hd, &L->k_norm);
        if (!ld->src->discard) {
            size_t kvn = (size_t)nk * mi_config_kv_stride(c) * hd;
            L->k_cache = mi_calloc(kvn, sizeof(float), "KV cache");
            L->v_cache = mi_calloc(kvn, sizeof(float), "KV cache");
            m->kv_bytes += 2 * kvn * sizeof(float);
        }
    }
    if (s->proj != MI_PROJ_NONE) {
        r = want(ld, l, "wo_t", dt[MI_WO], d, 1);
        size_t o0 = 0, no = d;
        if (s->proj == MI_PROJ_ROWS) {
            r->c0 = o0 = (size_t)s->o0;
            r->nc = no = (size_t)s->no;
        }
        if (s->proj == MI_PROJ_FULL || s->proj == MI_PROJ_ROWS)
            add_range(r, 0, nq);
        else
            for (int i = 0; i < nk; i++)
                add_range(r, (size_t)s->kv[i] * g * hd, g * hd);
        r->dst = &L->wo;
        want_opt(ld, c->out_bias, l, "wo_b", o0, no, &L->bo);
        want_opt(ld, c->post_norms, l, "post_attention_norm", 0, d, &L->post_attn_norm);
    }
    if (s->nf > 0 && mi_config_is_moe(c)) {
        load_moe(ld, c, l, s, L);
    } else if (s->nf > 0) {
        want_vec(ld, l, "ffn_norm", 1, 0, d, &L->ffn_norm);
        want_opt(ld, ln, l, "ffn_norm_b", 0, d, &L->ffn_norm_b);
        add_range(want(ld, l, "w1", dt[MI_W1], d, 0), (size_t)s->f0, (size_t)s->nf)->dst = &L->w1;
        want_opt(ld, c->out_bias, l, "w1_b", (size_t)s->f0, (size_t)s->nf, &L->b1);
        if (gate)
            add_range(want(ld, l, "w3", dt[MI_W3], d, 0), (size_t)s->f0, (size_t)s->nf)->dst = &L->w3;
        r = want(ld, l, "w2_t", dt[MI_W2], d, 1);
        size_t o0 = 0, no = d;
        if (s->w2_rows) {
            r->c0 = o0 = (size_t)s->o0;
            r->nc = no = (size_t)s->no;
            add_range(r, 0, (size_t)c->hidden_dim);
        } else {
            add_range(r, (size_t)s->f0, (size_t)s->nf);
        }
        r->dst = &L->w2;
        want_opt(ld, c->out_bias, l, "w2_b", o0, no, &L->b2);
        want_opt(ld, c->post_norms, l, "post_ffn_norm", 0, d, &L->post_ffn_norm);
    }
    load_group(ld, &L->arena, &L->arena_bytes);
}

/* CATS's time-series family (docs/patchtst.md): the same shards as a
 * language model's (heads, wo rows or columns, FFN units, w2 rows or
 * columns, head rows), each with the rows of its bias; no tokenizer, no w3,
 * no KV cache beyond the patches. */
static int load_patchtst(loader *ld, mi_model *m, const mi_config *c, const mi_shard_spec *spec)
{
    size_t d = (size_t)c->dim, N = (size_t)c->seq_len;
    if (spec->embeddings || spec->emb_nc > 0) {
        add_range(want(ld, -1, "patch_embed", MI_F32, (size_t)c->patch_len, 0), 0, d)->dst = &m->patch_embed;
        want_vec(ld, -1, "patch_embed_b", 1, 0, d, &m->patch_embed_b);
        want_vec(ld, -1, "pos_embed", d, 0, N, &m->pos_embed);
        m->emb_c0 = spec->embeddings ? 0 : spec->emb_c0;
        m->emb_nc = spec->embeddings ? (int)d : spec->emb_nc;
    }
    if (spec->cls_nv > 0) {
        add_range(want(ld, -1, "head", MI_F32, N * d, 0), (size_t)spec->cls_v0, (size_t)spec->cls_nv)->dst =
            &m->classifier;
        want_vec(ld, -1, "head_b", 1, (size_t)spec->cls_v0, (size_t)spec->cls_nv, &m->cls_b);
    }
    load_group(ld, &m->arena, &m->arena_bytes);
    /* its layers are a language model's with the family's traits (biases, LayerNorm, no w3) */
    for (int l = 0; l < c->n_layers && ld->rc == 0; l++)
        load_lm_layer(ld, m, c, l, &spec->layers[l]);
    return ld->rc;
}

int mi_model_load(mi_model *m, const mi_weight_source *src, const mi_config *c, const mi_shard_spec *spec,
                  char *err)
{
    /* Devices are memory-bound: give staging buffers and KV caches their own
     * mappings, returned to the system on free, instead of glibc's adaptive
     * threshold keeping freed blocks in the heap. */
    mallopt(M_MMAP_THRESHOLD, 32 * 1024);
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->layers = mi_calloc((size_t)c->n_layers, sizeof(mi_layer), "layer table");
    size_t V = (size_t)c->vocab_size;
    loader ld;
    memset(&ld, 0, sizeof ld);
    ld.m = m, ld.src = src, ld.err = err;
    if (spec->cls_v0 < 0 || spec->cls_nv < 0 || (size_t)(spec->cls_v0 + spec->cls_nv) > V) {
        mi_model_free(m);
        return mi_set_error(err, "classifier rows [%d, %d) are outside the vocabulary of %zu", spec->cls_v0,
                            spec->cls_v0 + spec->cls_nv, V);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_spec *s = &spec->layers[l];
        int rows = s->proj == MI_PROJ_ROWS || s->w2_rows;
        int bad = s->n_kv < 0 || s->n_kv > c->n_kv_heads || s->f0 < 0 || s->nf < 0 ||
                  s->f0 + s->nf > c->hidden_dim || s->proj < MI_PROJ_NONE || s->proj > MI_PROJ_ROWS ||
                  (s->proj == MI_PROJ_HEADS && s->n_kv == 0) ||
                  (rows && (s->o0 < 0 || s->no <= 0 || s->o0 + s->no > c->dim));
        for (int i = 0; i < s->n_kv && !bad; i++)
            bad = s->kv[i] >= c->n_kv_heads || (i > 0 && s->kv[i] <= s->kv[i - 1]);
        bad |= s->n_experts < 0 || s->n_experts > c->n_experts;
        for (int i = 0; i < s->n_experts && !bad; i++)
            bad = s->experts[i] >= c->n_experts || (i > 0 && s->experts[i] <= s->experts[i - 1]);
        if (!bad && mi_config_is_moe(c) && s->nf > 0 && (s->f0 != 0 || s->nf != c->hidden_dim || s->w2_rows)) {
            mi_model_free(m);
            return mi_set_error(err, "layer %d: a mixture-of-experts FFN is held whole (its experts chosen), not "
                                     "split into FFN units", l);
        }
        if (bad) {
            mi_model_free(m);
            return mi_set_error(err, "layer %d: shard ranges are outside the model", l);
        }
    }
    m->has_embeddings = spec->embeddings || spec->emb_nc > 0 || emb_rows(spec);
    m->emb_v0 = 0; /* every row, unless a split vocabulary's rows are loaded */
    m->emb_nv = c->vocab_size;
    m->cls_v0 = spec->cls_v0;
    m->cls_nv = spec->cls_nv;
    if (c->family == MI_FAMILY_PATCHTST) {
        int rc = load_patchtst(&ld, m, c, spec);
        if (rc)
            mi_model_free(m);
        return rc;
    }
    if (load_lm_tables(&ld, m, c, spec))
        return -1;
    for (int l = 0; l < c->n_layers && ld.rc == 0; l++)
        load_lm_layer(&ld, m, c, l, &spec->layers[l]);
    if (ld.rc) {
        mi_model_free(m);
        return ld.rc;
    }
    if (c->rope_type != MI_ROPE_NONE) {
        int halves = c->rope_type == MI_ROPE_HALVES;
        mi_rope_init_scaled(&m->rope, c->seq_len, c->head_dim, c->rope_theta, m->rope_freqs, halves);
        if (c->sliding_window > 0)
            mi_rope_init_scaled(&m->rope_local, c->seq_len, c->head_dim,
                                c->rope_theta_local > 0.0f ? c->rope_theta_local : c->rope_theta, NULL, halves);
    }
    return 0;
}

void mi_model_load_path(mi_model *m, const char *path, mi_tokenizer *tok)
{
    char err[MI_ERRLEN];
    mi_config cfg;
    mi_model_file *mf = mi_model_open(path, &cfg, err);
    if (!mf)
        mi_fatal("%s", err);
    if (tok && cfg.family == MI_FAMILY_PATCHTST) {
        mi_model_close(mf);
        mi_fatal("%s is a time-series model (docs/patchtst.md): it has no tokenizer; run it with meshinfer forecast",
                 path);
    }
    mi_layer_spec *layers = mi_malloc((size_t)cfg.n_layers * sizeof *layers, "layer specs");
    mi_shard_spec spec = mi_shard_spec_full(&cfg, layers);
    mi_weight_source src = mi_weight_source_file(mf);
    int rc = mi_model_load(m, &src, &cfg, &spec, err);
    free(layers);
    if (rc == 0 && tok)
        rc = mi_model_read_tokenizer(mf, tok, err);
    mi_model_close(mf);
    if (rc)
        mi_fatal("%s", err);
}

void mi_layer_free(mi_layer *L)
{
    arena_free(L->arena, L->arena_bytes);
    free(L->k_cache);
    free(L->v_cache);
    memset(L, 0, sizeof *L);
}

void mi_model_free(mi_model *m)
{
    if (m->layers) {
        for (int l = 0; l < m->cfg.n_layers; l++)
            mi_layer_free(&m->layers[l]);
        free(m->layers);
    }
    arena_free(m->arena, m->arena_bytes);
    mi_rope_free(&m->rope);
    mi_rope_free(&m->rope_local);
    memset(m, 0, sizeof *m);
}

int mi_layer_convert(mi_layer *L, int dim, const unsigned char *to, char *err)
{
    if (L->router.q)
        return mi_set_error(err, "cannot re-encode a mixture-of-experts layer's weights yet (its experts are "
                                 "held as stored)");
    mi_tensor *w[MI_N_LAYER_MATS] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3};
    float **norm[2] = {&L->attention_norm, &L->ffn_norm};
    size_t nb = ((size_t)dim * sizeof(float) + 63) & ~(size_t)63, total = 0;
    for (int i = 0; i < 2; i++)
        total += *norm[i] ? nb : 0;
    for (int k = 0; k < MI_N_LAYER_MATS; k++) {
        if (!w[k]->q)
            continue;
        if (mi_dtype_blocked(to[k]) && w[k]->cols % MI_QK)
            return mi_set_error(err, "cannot hold %s of this shard in %s: its %d columns are not whole blocks of %d",
                                mi_layer_mat_names[k], mi_dtype_name(to[k]), w[k]->cols, MI_QK);
        total += mi_tensor_place_bytes(to[k], (size_t)w[k]->rows, (size_t)w[k]->cols);
    }
    unsigned char *mem = arena_alloc(total), *p = mem;
    mi_layer n = *L;
    for (int i = 0; i < 2; i++) {
        if (!*norm[i])
            continue;
        float *dst = (float *)p;
        memcpy(dst, *norm[i], (size_t)dim * sizeof(float));
        *(i ? &n.ffn_norm : &n.attention_norm) = dst;
        p += nb;
    }
    mi_tensor *nw[MI_N_LAYER_MATS] = {&n.wq, &n.wk, &n.wv, &n.wo, &n.w1, &n.w2, &n.w3};
    for (int k = 0; k < MI_N_LAYER_MATS; k++) {
        if (!w[k]->q)
            continue;
        if (mi_tensor_convert(w[k], to[k], p, nw[k])) {
            arena_free(mem, total);
            return mi_set_error(err, "out of memory re-encoding %s", mi_layer_mat_names[k]);
        }
        p += mi_tensor_place_bytes(to[k], (size_t)w[k]->rows, (size_t)w[k]->cols);
    }
    arena_free(L->arena, L->arena_bytes);
    n.arena = mem;
    n.arena_bytes = total;
    *L = n;
    return 0;
}

void mi_model_reset(mi_model *m)
{
    const mi_config *c = &m->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer *L = &m->layers[l];
        size_t n = (size_t)L->spec.n_kv * mi_config_kv_stride(c) * (size_t)c->head_dim;
        if (L->k_cache) {
            memset(L->k_cache, 0, n * sizeof(float));
            memset(L->v_cache, 0, n * sizeof(float));
        }
    }
}
