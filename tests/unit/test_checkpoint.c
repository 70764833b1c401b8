/* CUnit tests for the llama2.c checkpoint reader and converter
 * (src/checkpoint.c): legacy v0 and v1 ("ak42") checkpoints written here from
 * the same seeded weights must convert to identical HDF5 models holding the
 * source values, and run the forward pass to identical logits.
 *
 * Usage: test_checkpoint [TOKENIZER_BIN]
 *   TOKENIZER_BIN  optional llama2.c tokenizer.bin (32000 tokens); without it
 *                  a synthetic 512-token vocabulary is written as tokenizer.bin.
 * Scratch files go to a mkdtemp directory under $TMPDIR or /tmp. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/checkpoint.h"
#include "meshinfer/common.h"
#include "test_util.h"
#include "meshinfer/config.h"
#include "meshinfer/forward.h"
#include "meshinfer/model.h"
#include "meshinfer/model_file.h"
#include "meshinfer/synth.h"
#include "meshinfer/tokenizer.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define V1_MAGIC 0x616b3432u

static const char *g_real_tok; /* argv[1] or NULL */
static char g_dir[4096];
static char g_tok_path[4200];  /* tokenizer.bin used for conversion */
static mi_tokenizer g_tok;     /* its content, to compare with the converted model */
static int g_vocab;

/* ------------------------------------------------------------ source model */

typedef struct {
    int dim, hid, L, nh, nkv, V, seq, shared;
    int hd, kv;
    float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
} src_model;

static uint64_t g_rng;
static float rnd(void)
{
    /* splitmix64 -> uniform [-0.5, 0.5) */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) / 16777216.0f - 0.5f;
}

static float *gen(size_t n, float scale, float offset)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = offset + scale * rnd();
    return p;
}

static void src_init(src_model *m, int dim, int hid, int L, int nh, int nkv, int V, int seq, int shared,
                     uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->dim = dim; m->hid = hid; m->L = L; m->nh = nh; m->nkv = nkv; m->V = V; m->seq = seq;
    m->shared = shared;
    m->hd = dim / nh;
    m->kv = nkv * m->hd;
    g_rng = seed;
    size_t d = (size_t)dim, h = (size_t)hid, l = (size_t)L, kv = (size_t)m->kv, v = (size_t)V;
    m->emb = gen(v * d, 1.0f, 0.0f);
    m->rms_att = gen(l * d, 0.2f, 1.0f);
    m->wq = gen(l * d * d, 0.25f, 0.0f);
    m->wk = gen(l * kv * d, 0.25f, 0.0f);
    m->wv = gen(l * kv * d, 0.25f, 0.0f);
    m->wo = gen(l * d * d, 0.25f, 0.0f);
    m->rms_ffn = gen(l * d, 0.2f, 1.0f);
    m->w1 = gen(l * h * d, 0.25f, 0.0f);
    m->w2 = gen(l * d * h, 0.25f, 0.0f);
    m->w3 = gen(l * h * d, 0.25f, 0.0f);
    m->rms_final = gen(d, 0.2f, 1.0f);
    m->wcls = shared ? NULL : gen(v * d, 1.0f, 0.0f);
}

static void src_free(src_model *m)
{
    free(m->emb); free(m->rms_att); free(m->wq); free(m->wk); free(m->wv); free(m->wo);
    free(m->rms_ffn); free(m->w1); free(m->w2); free(m->w3); free(m->rms_final); free(m->wcls);
    memset(m, 0, sizeof *m);
}

/* growable byte buffer */
typedef struct {
    unsigned char *p;
    size_t n, cap;
} buf_t;

static void put(buf_t *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n)
            c *= 2;
        b->p = realloc(b->p, c);
        b->cap = c;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_i32(buf_t *b, int32_t v) { put(b, &v, 4); }
static void put_f(buf_t *b, const float *p, size_t n) { put(b, p, n * sizeof(float)); }

/* legacy v0: 7 int32 header (negative vocab => separate classifier), then weights */
static buf_t build_v0(const src_model *m)
{
    buf_t b = {0};
    size_t d = (size_t)m->dim, h = (size_t)m->hid, l = (size_t)m->L, kv = (size_t)m->kv, v = (size_t)m->V;
    int32_t hdr[7] = {m->dim, m->hid, m->L, m->nh, m->nkv, m->shared ? m->V : -m->V, m->seq};
    put(&b, hdr, sizeof hdr);
    put_f(&b, m->emb, v * d);
    put_f(&b, m->rms_att, l * d);
    put_f(&b, m->wq, l * d * d);
    put_f(&b, m->wk, l * kv * d);
    put_f(&b, m->wv, l * kv * d);
    put_f(&b, m->wo, l * d * d);
    put_f(&b, m->rms_ffn, l * d);
    put_f(&b, m->w1, l * h * d);
    put_f(&b, m->w2, l * d * h);
    put_f(&b, m->w3, l * h * d);
    put_f(&b, m->rms_final, d);
    /* freq_cis_real, freq_cis_imag: distinctive values that must be skipped */
    size_t nf = (size_t)m->seq * (size_t)m->hd / 2;
    float *fc = malloc(2 * nf * sizeof(float));
    for (size_t i = 0; i < 2 * nf; i++)
        fc[i] = 1000.0f + (float)i;
    put_f(&b, fc, 2 * nf);
    free(fc);
    if (!m->shared)
        put_f(&b, m->wcls, v * d);
    return b;
}

/* v1: magic, version, 7 int32, uint8 shared, zero pad to 256, then weights */
static buf_t build_v1(const src_model *m, int32_t version)
{
    buf_t b = {0};
    size_t d = (size_t)m->dim, h = (size_t)m->hid, l = (size_t)m->L, kv = (size_t)m->kv, v = (size_t)m->V;
    unsigned char hdr[256];
    memset(hdr, 0, sizeof hdr);
    uint32_t magic = V1_MAGIC;
    int32_t p[7] = {m->dim, m->hid, m->L, m->nh, m->nkv, m->V, m->seq};
    memcpy(hdr, &magic, 4);
    memcpy(hdr + 4, &version, 4);
    memcpy(hdr + 8, p, sizeof p);
    hdr[36] = (unsigned char)(m->shared ? 1 : 0);
    put(&b, hdr, sizeof hdr);
    put_f(&b, m->rms_att, l * d);
    put_f(&b, m->rms_ffn, l * d);
    put_f(&b, m->rms_final, d);
    put_f(&b, m->emb, v * d);
    put_f(&b, m->wq, l * d * d);
    put_f(&b, m->wk, l * kv * d);
    put_f(&b, m->wv, l * kv * d);
    put_f(&b, m->wo, l * d * d);
    put_f(&b, m->w1, l * h * d);
    put_f(&b, m->w2, l * d * h);
    put_f(&b, m->w3, l * h * d);
    if (!m->shared)
        put_f(&b, m->wcls, v * d);
    return b;
}

static int write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

/* llama2.c tokenizer.bin: int32 max_token_length, then per id f32 score, int32 len, bytes */
static int write_tokenizer_bin(const char *path, const mi_tokenizer *t)
{
    buf_t b = {0};
    put_i32(&b, t->max_token_length);
    for (int i = 0; i < t->vocab_size; i++) {
        put(&b, &t->scores[i], 4);
        put_i32(&b, t->piece_len[i]);
        put(&b, t->pieces[i], (size_t)t->piece_len[i]);
    }
    int rc = write_bytes(path, b.p, b.n);
    free(b.p);
    return rc;
}

/* ------------------------------------------------------------ fs helpers */

static int has(const char *err, const char *key)
{
    if (strstr(err, key))
        return 1;
    fprintf(stderr, "\n  error '%s' lacks '%s'\n", err, key);
    return 0;
}

/* ------------------------------------------------------------ suite setup */

static int suite_init(void)
{
    if (tu_make_scratch(g_dir, sizeof g_dir, "test_checkpoint"))
        return -1;
    char err[MI_ERRLEN];
    if (g_real_tok) {
        g_vocab = 32000;
        snprintf(g_tok_path, sizeof g_tok_path, "%s", g_real_tok);
        if (mi_tokenizer_load_bin(&g_tok, g_tok_path, g_vocab, err) != 0) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
    } else {
        g_vocab = 512;
        if (mi_tokenizer_synthetic(&g_tok, g_vocab, err) != 0) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
        tu_path(g_tok_path, sizeof g_tok_path, g_dir, "tokenizer.bin");
        if (write_tokenizer_bin(g_tok_path, &g_tok) != 0)
            return -1;
        /* the file we wrote reads back as the same vocabulary */
        mi_tokenizer back;
        if (mi_tokenizer_load_bin(&back, g_tok_path, g_vocab, err) != 0) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
        mi_tokenizer_free(&back);
    }
    return 0;
}

static int suite_clean(void)
{
    mi_tokenizer_free(&g_tok);
    return tu_rm_tree(g_dir) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ checks */

/* The tiny test shape: dim 64, hidden 160, 2 layers, 4 heads, kv heads nkv. */
static void tiny(src_model *m, int nkv, int shared, uint64_t seed)
{
    src_init(m, 64, 160, 2, 4, nkv, g_vocab, 32, shared, seed);
}

static void write_ckpt(const char *name, const buf_t *b, char *path, size_t n)
{
    tu_path(path, n, g_dir, name);
    CU_ASSERT_EQUAL_FATAL(write_bytes(path, b->p, b->n), 0);
}

static void check_ck_matches(const mi_checkpoint *ck, const src_model *m, int version)
{
    size_t d = (size_t)m->dim, h = (size_t)m->hid, l = (size_t)m->L, kv = (size_t)m->kv, v = (size_t)m->V;
    const mi_config *c = &ck->cfg;
    CU_ASSERT_EQUAL(ck->version, version);
    CU_ASSERT_EQUAL(c->dim, m->dim);
    CU_ASSERT_EQUAL(c->hidden_dim, m->hid);
    CU_ASSERT_EQUAL(c->n_layers, m->L);
    CU_ASSERT_EQUAL(c->n_heads, m->nh);
    CU_ASSERT_EQUAL(c->n_kv_heads, m->nkv);
    CU_ASSERT_EQUAL(c->head_dim, m->hd);
    CU_ASSERT_EQUAL(c->vocab_size, m->V);
    CU_ASSERT_EQUAL(c->seq_len, m->seq);
    CU_ASSERT_EQUAL(c->shared_classifier, m->shared);
    CU_ASSERT_EQUAL(c->synthetic, 0);
    CU_ASSERT_EQUAL(c->rope_theta, 10000.0f);
    CU_ASSERT_EQUAL(c->norm_eps, 1e-5f);
#define SAME(field, src, n) CU_ASSERT(ck->field && memcmp(ck->field, src, (n) * sizeof(float)) == 0)
    SAME(tok_embeddings, m->emb, v * d);
    SAME(rms_att, m->rms_att, l * d);
    SAME(wq, m->wq, l * d * d);
    SAME(wk, m->wk, l * kv * d);
    SAME(wv, m->wv, l * kv * d);
    SAME(wo, m->wo, l * d * d);
    SAME(rms_ffn, m->rms_ffn, l * d);
    SAME(w1, m->w1, l * h * d);
    SAME(w2, m->w2, l * d * h);
    SAME(w3, m->w3, l * h * d);
    SAME(rms_final, m->rms_final, d);
#undef SAME
    if (m->shared) {
        CU_ASSERT_PTR_EQUAL(ck->wcls, ck->tok_embeddings);
    } else {
        CU_ASSERT(ck->wcls && memcmp(ck->wcls, m->wcls, v * d * sizeof(float)) == 0);
    }
}

static void open_and_check(const buf_t *b, const src_model *m, int version)
{
    char path[4300], err[MI_ERRLEN] = "";
    write_ckpt(version ? "open-v1.bin" : "open-v0.bin", b, path, sizeof path);
    mi_checkpoint ck;
    int rc = mi_checkpoint_open(&ck, path, err);
    if (rc)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(ck.map_size, b->n);
    check_ck_matches(&ck, m, version);
    mi_checkpoint_close(&ck);
    CU_ASSERT_PTR_NULL(ck.map);
    unlink(path);
}

static void test_open_formats(void)
{
    int kvs[2] = {2, 4};
    for (int k = 0; k < 2; k++)
        for (int shared = 0; shared <= 1; shared++) {
            src_model m;
            tiny(&m, kvs[k], shared, 100 + (uint64_t)(k * 2 + shared));
            buf_t b0 = build_v0(&m), b1 = build_v1(&m, 1);
            /* exact sizes of the formats */
            size_t d = 64, h = 160, l = 2, kv = (size_t)m.kv, v = (size_t)m.V;
            size_t w = v * d + 2 * l * d + 2 * l * d * d + 2 * l * kv * d + 3 * l * h * d + d + (shared ? 0 : v * d);
            CU_ASSERT_EQUAL(b0.n, 28 + 4 * (w + 32 * 16));
            CU_ASSERT_EQUAL(b1.n, 256 + 4 * w);
            open_and_check(&b0, &m, 0);
            open_and_check(&b1, &m, 1);
            free(b0.p);
            free(b1.p);
            src_free(&m);
        }
}

/* Read a whole tensor of an open model file (NULL if it cannot be read). */
static float *read_all(mi_model_file *mf, const char *name, size_t rows, size_t cols)
{
    char err[MI_ERRLEN];
    float *p = malloc(rows * cols * sizeof(float));
    if (mi_model_read_rows(mf, name, 0, rows, p, rows * cols, err) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

/* Compare every tensor of two converted files with each other and with m. */
static void check_converted(const char *p0, const char *p1, const src_model *m, const char *name)
{
    char err[MI_ERRLEN] = "";
    mi_config c0, c1;
    mi_model_file *f0 = mi_model_open(p0, &c0, err);
    if (!f0)
        fprintf(stderr, "\n  %s\n", err);
    mi_model_file *f1 = mi_model_open(p1, &c1, err);
    if (!f1)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f1);
    CU_ASSERT_EQUAL(memcmp(&c0, &c1, sizeof c0), 0);
    CU_ASSERT_EQUAL(c0.dim, m->dim);
    CU_ASSERT_EQUAL(c0.hidden_dim, m->hid);
    CU_ASSERT_EQUAL(c0.n_layers, m->L);
    CU_ASSERT_EQUAL(c0.n_heads, m->nh);
    CU_ASSERT_EQUAL(c0.n_kv_heads, m->nkv);
    CU_ASSERT_EQUAL(c0.head_dim, m->hd);
    CU_ASSERT_EQUAL(c0.vocab_size, m->V);
    CU_ASSERT_EQUAL(c0.seq_len, m->seq);
    CU_ASSERT_EQUAL(c0.shared_classifier, m->shared);
    CU_ASSERT_EQUAL(c0.synthetic, 0);
    CU_ASSERT_STRING_EQUAL(c0.name, name);

    size_t d = (size_t)m->dim, h = (size_t)m->hid, kv = (size_t)m->kv, v = (size_t)m->V;
    struct { const char *t; size_t rows, cols; } ts[] = {
        {"attention_norm", d, 1}, {"wq", d, d}, {"wk", kv, d}, {"wv", kv, d}, {"wo_t", d, d},
        {"ffn_norm", d, 1},       {"w1", h, d}, {"w3", h, d},  {"w2_t", h, d},
    };
    /* global tensors */
    float *a = read_all(f0, "tok_embeddings", v, d), *b = read_all(f1, "tok_embeddings", v, d);
    CU_ASSERT(a && b && memcmp(a, b, v * d * sizeof(float)) == 0);
    CU_ASSERT(a && memcmp(a, m->emb, v * d * sizeof(float)) == 0);
    free(a);
    free(b);
    a = read_all(f0, "norm", d, 1);
    b = read_all(f1, "norm", d, 1);
    CU_ASSERT(a && b && memcmp(a, b, d * sizeof(float)) == 0);
    CU_ASSERT(a && memcmp(a, m->rms_final, d * sizeof(float)) == 0);
    free(a);
    free(b);
    a = read_all(f0, "classifier", v, d);
    b = read_all(f1, "classifier", v, d);
    if (m->shared) {
        CU_ASSERT_PTR_NULL(a); /* tied: no separate tensor */
        CU_ASSERT_PTR_NULL(b);
    } else {
        CU_ASSERT(a && b && memcmp(a, b, v * d * sizeof(float)) == 0);
        CU_ASSERT(a && memcmp(a, m->wcls, v * d * sizeof(float)) == 0);
    }
    free(a);
    free(b);

    for (int l = 0; l < m->L; l++) {
        size_t L = (size_t)l;
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            char nm[64];
            mi_model_layer_name(nm, sizeof nm, l, ts[i].t);
            a = read_all(f0, nm, ts[i].rows, ts[i].cols);
            b = read_all(f1, nm, ts[i].rows, ts[i].cols);
            CU_ASSERT_PTR_NOT_NULL(a);
            CU_ASSERT_PTR_NOT_NULL(b);
            if (!a || !b) {
                free(a);
                free(b);
                continue;
            }
            size_t n = ts[i].rows * ts[i].cols;
            CU_ASSERT_EQUAL(memcmp(a, b, n * sizeof(float)), 0);
            const float *src = NULL;
            int transposed = 0;
            size_t src_cols = 0; /* columns of the source [out, in] matrix */
            if (!strcmp(ts[i].t, "attention_norm")) src = m->rms_att + L * d;
            else if (!strcmp(ts[i].t, "ffn_norm")) src = m->rms_ffn + L * d;
            else if (!strcmp(ts[i].t, "wq")) src = m->wq + L * d * d;
            else if (!strcmp(ts[i].t, "wk")) src = m->wk + L * kv * d;
            else if (!strcmp(ts[i].t, "wv")) src = m->wv + L * kv * d;
            else if (!strcmp(ts[i].t, "w1")) src = m->w1 + L * h * d;
            else if (!strcmp(ts[i].t, "w3")) src = m->w3 + L * h * d;
            else if (!strcmp(ts[i].t, "wo_t")) { src = m->wo + L * d * d; transposed = 1; src_cols = d; }
            else if (!strcmp(ts[i].t, "w2_t")) { src = m->w2 + L * d * h; transposed = 1; src_cols = h; }
            if (!transposed) {
                CU_ASSERT_EQUAL(memcmp(a, src, n * sizeof(float)), 0);
            } else {
                /* stored[r][c] (rows = source columns) == source[c][r] */
                size_t bad = 0;
                for (size_t r = 0; r < ts[i].rows; r++)
                    for (size_t cc = 0; cc < ts[i].cols; cc++)
                        if (a[r * ts[i].cols + cc] != src[cc * src_cols + r])
                            bad++;
                CU_ASSERT_EQUAL(bad, 0);
            }
            free(a);
            free(b);
        }
    }
    /* a few elements spelled out: wo_t[l][i][j] == wo[l][j][i], w2_t[l][i][j] == w2[l][j][i] */
    float row[64];
    CU_ASSERT_EQUAL_FATAL(mi_model_read_rows(f1, "layers/001/wo_t", 5, 1, row, 64, err), 0);
    CU_ASSERT_EQUAL(row[7], m->wo[1 * d * d + 7 * d + 5]);
    CU_ASSERT_EQUAL(row[63], m->wo[1 * d * d + 63 * d + 5]);
    CU_ASSERT(row[7] != m->wo[1 * d * d + 5 * d + 7]); /* not the untransposed value */
    CU_ASSERT_EQUAL_FATAL(mi_model_read_rows(f0, "layers/000/w2_t", 159, 1, row, 64, err), 0);
    CU_ASSERT_EQUAL(row[0], m->w2[0 * d * h + 0 * h + 159]);
    CU_ASSERT_EQUAL(row[42], m->w2[42 * h + 159]);
    CU_ASSERT_EQUAL_FATAL(mi_model_read_rows(f0, "layers/001/wk", (size_t)m->kv - 1, 1, row, 64, err), 0);
    CU_ASSERT_EQUAL(row[3], m->wk[1 * kv * d + (kv - 1) * d + 3]);

    /* tokenizer: same pieces and scores as the tokenizer.bin */
    mi_tokenizer t0, t1;
    CU_ASSERT_EQUAL_FATAL(mi_model_read_tokenizer(f0, &t0, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_model_read_tokenizer(f1, &t1, err), 0);
    CU_ASSERT_EQUAL(t0.vocab_size, g_tok.vocab_size);
    int mism = 0;
    for (int i = 0; i < g_tok.vocab_size && i < t0.vocab_size && i < t1.vocab_size; i++) {
        if (t0.piece_len[i] != g_tok.piece_len[i] || t1.piece_len[i] != g_tok.piece_len[i] ||
            memcmp(t0.pieces[i], g_tok.pieces[i], (size_t)g_tok.piece_len[i]) ||
            memcmp(t1.pieces[i], g_tok.pieces[i], (size_t)g_tok.piece_len[i]) || t0.scores[i] != g_tok.scores[i] ||
            t1.scores[i] != g_tok.scores[i])
            mism++;
    }
    CU_ASSERT_EQUAL(mism, 0);
    mi_tokenizer_free(&t0);
    mi_tokenizer_free(&t1);
    mi_model_close(f0);
    mi_model_close(f1);
}

static void load_full(mi_model *m, const char *path)
{
    char err[MI_ERRLEN] = "";
    mi_config c;
    mi_model_file *mf = mi_model_open(path, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    mi_layer_spec *spec = malloc((size_t)c.n_layers * sizeof *spec);
    mi_shard_spec full = mi_shard_spec_full(&c, spec);
    mi_weight_source src = mi_weight_source_file(mf);
    int rc = mi_model_load(m, &src, &c, &full, err);
    if (rc)
        fprintf(stderr, "\n  %s\n", err);
    free(spec);
    mi_model_close(mf);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

/* Run a 4-token prefill and one decode step on both models; logits must be
 * bit-identical. Returns a malloc'd copy of model a's prefill logits. */
static float *forward_compare(const char *pa, const char *pb)
{
    mi_model a, b;
    load_full(&a, pa);
    load_full(&b, pb);
    int V = a.cfg.vocab_size;
    mi_scratch sa, sb;
    mi_scratch_init(&sa, &a.cfg, 4);
    mi_scratch_init(&sb, &b.cfg, 4);
    const int toks[4] = {MI_TOK_BOS, 300, 42, V - 1};
    float *la = mi_forward(&a, &sa, toks, 4, 0, 1);
    float *lb = mi_forward(&b, &sb, toks, 4, 0, 1);
    CU_ASSERT_EQUAL(memcmp(la, lb, (size_t)4 * V * sizeof(float)), 0);
    int finite = 1, distinct = 0;
    for (int i = 0; i < 4 * V; i++) {
        if (!isfinite(la[i]))
            finite = 0;
        if (i > 0 && la[i] != la[0])
            distinct++;
    }
    CU_ASSERT(finite);
    CU_ASSERT(distinct > 4 * V / 2);
    /* positions differ from each other */
    CU_ASSERT(memcmp(la, la + V, (size_t)V * sizeof(float)) != 0);
    float *copy = malloc((size_t)4 * V * sizeof(float));
    memcpy(copy, la, (size_t)4 * V * sizeof(float));
    /* one decode step at position 4 */
    const int next = 7;
    la = mi_forward(&a, &sa, &next, 1, 4, 0);
    lb = mi_forward(&b, &sb, &next, 1, 4, 0);
    CU_ASSERT_EQUAL(memcmp(la, lb, (size_t)V * sizeof(float)), 0);
    mi_scratch_free(&sa);
    mi_scratch_free(&sb);
    mi_model_free(&a);
    mi_model_free(&b);
    return copy;
}

static void convert_pair(int nkv, int shared, uint64_t seed, float **logits_out)
{
    src_model m;
    tiny(&m, nkv, shared, seed);
    buf_t b0 = build_v0(&m), b1 = build_v1(&m, 1);
    char c0[4300], c1[4300], o0[4300], o1[4300], err[MI_ERRLEN] = "";
    write_ckpt("conv-v0.bin", &b0, c0, sizeof c0);
    write_ckpt("conv-v1.bin", &b1, c1, sizeof c1);
    tu_path(o0, sizeof o0, g_dir, "conv-v0.h5");
    tu_path(o1, sizeof o1, g_dir, "conv-v1.h5");
    int r0 = mi_convert(c0, g_tok_path, o0, "tiny-ckpt", err);
    if (r0)
        fprintf(stderr, "\n  %s\n", err);
    int r1 = mi_convert(c1, g_tok_path, o1, "tiny-ckpt", err);
    if (r1)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL(r0, 0);
    CU_ASSERT_EQUAL(r1, 0);
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    if (r0 == 0 && r1 == 0) {
        check_converted(o0, o1, &m, "tiny-ckpt");
        float *lg = forward_compare(o0, o1);
        if (logits_out)
            *logits_out = lg;
        else
            free(lg);
    }
    unlink(c0);
    unlink(c1);
    unlink(o0);
    unlink(o1);
    free(b0.p);
    free(b1.p);
    src_free(&m);
}

static void test_convert_gqa_separate(void) { convert_pair(2, 0, 7, NULL); }
static void test_convert_gqa_shared(void) { convert_pair(2, 1, 8, NULL); }
static void test_convert_mha_separate(void) { convert_pair(4, 0, 9, NULL); }

static void test_classifier_matters(void)
{
    /* same seed: identical weights except the classifier, so logits differ
     * between tied and separate models (the converter keeps them apart) */
    float *sep = NULL, *tied = NULL;
    convert_pair(2, 0, 11, &sep);
    convert_pair(2, 1, 11, &tied);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sep);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tied);
    CU_ASSERT(memcmp(sep, tied, (size_t)4 * g_vocab * sizeof(float)) != 0);
    free(sep);
    free(tied);
}

static void test_convert_overwrites_atomically(void)
{
    /* converting onto an existing file replaces it and leaves no temp file */
    src_model m;
    tiny(&m, 2, 1, 21);
    buf_t b = build_v1(&m, 1);
    char c[4300], o[4300], err[MI_ERRLEN] = "";
    write_ckpt("ow.bin", &b, c, sizeof c);
    tu_path(o, sizeof o, g_dir, "ow.h5");
    CU_ASSERT_EQUAL_FATAL(write_bytes(o, "old", 3), 0);
    CU_ASSERT_EQUAL(mi_convert(c, g_tok_path, o, "ow", err), 0);
    mi_config cfg;
    mi_model_file *mf = mi_model_open(o, &cfg, err);
    CU_ASSERT_PTR_NOT_NULL(mf);
    if (mf) {
        CU_ASSERT_STRING_EQUAL(cfg.name, "ow");
        mi_model_close(mf);
    }
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    unlink(c);
    unlink(o);
    free(b.p);
    src_free(&m);
}

/* ---- bad input ---- */

/* mi_checkpoint_open must fail on bytes b (written as name) with key in err;
 * mi_convert of it must fail too and leave nothing at the output path. */
static void expect_bad_ckpt(const char *name, const void *bytes, size_t n, const char *key1, const char *key2)
{
    char c[4300], o[4400], err[MI_ERRLEN] = "";
    tu_path(c, sizeof c, g_dir, name);
    CU_ASSERT_EQUAL_FATAL(write_bytes(c, bytes, n), 0);
    mi_checkpoint ck;
    memset(&ck, 0x5a, sizeof ck);
    CU_ASSERT_EQUAL(mi_checkpoint_open(&ck, c, err), -1);
    CU_ASSERT_PTR_NULL(ck.map);
    CU_ASSERT(strlen(err) > 0);
    CU_ASSERT_PTR_NULL(strchr(err, '\n'));
    if (key1)
        CU_ASSERT(has(err, key1));
    if (key2)
        CU_ASSERT(has(err, key2));
    mi_checkpoint_close(&ck); /* safe after a failed open */
    snprintf(o, sizeof o, "%s.h5", c);
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_convert(c, g_tok_path, o, "bad", err), -1);
    CU_ASSERT(strlen(err) > 0);
    if (key1)
        CU_ASSERT(has(err, key1));
    CU_ASSERT_FALSE(tu_file_exists(o));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    unlink(c);
}

static void test_bad_truncated(void)
{
    src_model m;
    tiny(&m, 2, 0, 31);
    buf_t b0 = build_v0(&m), b1 = build_v1(&m, 1);
    expect_bad_ckpt("trunc-v0.bin", b0.p, b0.n - 4, "truncated", NULL);
    expect_bad_ckpt("trunc-v1.bin", b1.p, b1.n - 4, "truncated", NULL);
    /* shorter than the header */
    expect_bad_ckpt("hdr-only-v0.bin", b0.p, 20, "truncated", NULL);
    expect_bad_ckpt("hdr-only-v1.bin", b1.p, 200, "truncated", NULL);
    expect_bad_ckpt("empty.bin", b0.p, 0, "truncated", NULL);
    free(b0.p);
    free(b1.p);
    src_free(&m);
}

static void test_bad_trailing(void)
{
    src_model m;
    tiny(&m, 2, 0, 32);
    buf_t b0 = build_v0(&m), b1 = build_v1(&m, 1);
    int32_t extra = 0;
    put(&b0, &extra, 4);
    put(&b1, &extra, 1);
    expect_bad_ckpt("trail-v0.bin", b0.p, b0.n, "trailing", NULL);
    expect_bad_ckpt("trail-v1.bin", b1.p, b1.n, "trailing", NULL);
    free(b0.p);
    free(b1.p);
    /* a separate classifier but the header says shared: also the wrong size */
    m.shared = 1;
    buf_t s0 = build_v0(&m);
    m.shared = 0;
    buf_t full = build_v0(&m);
    memcpy(full.p, s0.p, 28); /* header says shared (vocab positive) */
    expect_bad_ckpt("shared-mismatch.bin", full.p, full.n, "trailing", NULL);
    free(s0.p);
    free(full.p);
    src_free(&m);
}

static void test_bad_header(void)
{
    src_model m;
    tiny(&m, 2, 1, 33);
    buf_t b0 = build_v0(&m), b1 = build_v1(&m, 1);
    int32_t v;
    /* v0: n_heads = 0 */
    unsigned char *p = malloc(b0.n);
    memcpy(p, b0.p, b0.n);
    v = 0;
    memcpy(p + 3 * 4, &v, 4);
    expect_bad_ckpt("nheads0.bin", p, b0.n, "n_heads", "= 0");
    /* v0: dim 66 is not n_heads * head_dim */
    memcpy(p, b0.p, b0.n);
    v = 66;
    memcpy(p + 0 * 4, &v, 4);
    expect_bad_ckpt("dim66.bin", p, b0.n, "dim = 66", NULL);
    /* v0: n_kv_heads = 3 does not divide n_heads = 4 */
    memcpy(p, b0.p, b0.n);
    v = 3;
    memcpy(p + 4 * 4, &v, 4);
    expect_bad_ckpt("kv3.bin", p, b0.n, "n_kv_heads", NULL);
    /* v0: negative layer count */
    memcpy(p, b0.p, b0.n);
    v = -2;
    memcpy(p + 2 * 4, &v, 4);
    expect_bad_ckpt("layers-neg.bin", p, b0.n, "n_layers", NULL);
    /* v0: vocab INT32_MIN cannot be negated into a size */
    memcpy(p, b0.p, b0.n);
    v = INT32_MIN;
    memcpy(p + 5 * 4, &v, 4);
    expect_bad_ckpt("vocab-min.bin", p, b0.n, "vocab_size", NULL);
    free(p);
    /* v1: the same fields sit after magic and version */
    p = malloc(b1.n);
    memcpy(p, b1.p, b1.n);
    v = 0;
    memcpy(p + 8 + 3 * 4, &v, 4);
    expect_bad_ckpt("v1-nheads0.bin", p, b1.n, "n_heads", NULL);
    memcpy(p, b1.p, b1.n);
    v = 66;
    memcpy(p + 8, &v, 4);
    expect_bad_ckpt("v1-dim66.bin", p, b1.n, "dim = 66", NULL);
    /* v1: negative vocab is not a v1 convention */
    memcpy(p, b1.p, b1.n);
    v = -g_vocab;
    memcpy(p + 8 + 5 * 4, &v, 4);
    expect_bad_ckpt("v1-vocabneg.bin", p, b1.n, "vocab_size", NULL);
    /* v1 version 2 */
    memcpy(p, b1.p, b1.n);
    v = 2;
    memcpy(p + 4, &v, 4);
    expect_bad_ckpt("v1-version2.bin", p, b1.n, "version 2", "not supported");
    free(p);
    free(b0.p);
    free(b1.p);
    src_free(&m);
}

static void test_bad_missing(void)
{
    char c[4300], o[4300], err[MI_ERRLEN] = "";
    tu_path(c, sizeof c, g_dir, "no-such-checkpoint.bin");
    tu_path(o, sizeof o, g_dir, "no-such.h5");
    mi_checkpoint ck;
    CU_ASSERT_EQUAL(mi_checkpoint_open(&ck, c, err), -1);
    CU_ASSERT(has(err, "no such file"));
    CU_ASSERT(has(err, "no-such-checkpoint.bin"));
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_convert(c, g_tok_path, o, "x", err), -1);
    CU_ASSERT(has(err, "no-such-checkpoint.bin"));
    CU_ASSERT_FALSE(tu_file_exists(o));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    /* a directory is not a checkpoint */
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_checkpoint_open(&ck, g_dir, err), -1);
    CU_ASSERT(has(err, "not a regular file"));
}

static void test_bad_tokenizer(void)
{
    src_model m;
    tiny(&m, 2, 1, 34);
    buf_t b = build_v1(&m, 1);
    char c[4300], o[4300], t[4300], err[MI_ERRLEN] = "";
    write_ckpt("tokcase.bin", &b, c, sizeof c);
    tu_path(o, sizeof o, g_dir, "tokcase.h5");
    tu_path(t, sizeof t, g_dir, "tok-trunc.bin");
    size_t n = 0;
    unsigned char *tb = read_bytes(g_tok_path, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_FATAL(n > 100);
    /* truncated tokenizer.bin */
    CU_ASSERT_EQUAL_FATAL(write_bytes(t, tb, n - 3), 0);
    CU_ASSERT_EQUAL(mi_convert(c, t, o, "x", err), -1);
    CU_ASSERT(has(err, "truncated"));
    CU_ASSERT_FALSE(tu_file_exists(o));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    /* missing tokenizer.bin */
    tu_path(t, sizeof t, g_dir, "no-tokenizer.bin");
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_convert(c, t, o, "x", err), -1);
    CU_ASSERT(has(err, "no-tokenizer.bin"));
    CU_ASSERT_FALSE(tu_file_exists(o));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    /* a tokenizer with more tokens than the checkpoint's vocabulary */
    tu_path(t, sizeof t, g_dir, "tok-extra.bin");
    unsigned char *big = malloc(n + 9);
    memcpy(big, tb, n);
    float sc = 0.0f;
    int32_t len = 1;
    memcpy(big + n, &sc, 4);
    memcpy(big + n + 4, &len, 4);
    big[n + 8] = 'x';
    CU_ASSERT_EQUAL_FATAL(write_bytes(t, big, n + 9), 0);
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_convert(c, t, o, "x", err), -1);
    CU_ASSERT(has(err, "mismatch"));
    CU_ASSERT_FALSE(tu_file_exists(o));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    /* the good tokenizer converts (control) */
    CU_ASSERT_EQUAL(mi_convert(c, g_tok_path, o, "x", err), 0);
    CU_ASSERT(tu_file_exists(o));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    unlink(o);
    unlink(c);
    free(big);
    free(tb);
    free(b.p);
    src_free(&m);
}

static void test_bad_output(void)
{
    /* failures after the writer has started leave no temporary behind */
    src_model m;
    tiny(&m, 2, 1, 35);
    buf_t b = build_v0(&m);
    char c[4300], o[4300], err[MI_ERRLEN] = "";
    write_ckpt("out.bin", &b, c, sizeof c);
    /* directory does not exist */
    tu_path(o, sizeof o, g_dir, "missing-dir/out.h5");
    CU_ASSERT_EQUAL(mi_convert(c, g_tok_path, o, "x", err), -1);
    CU_ASSERT(has(err, "does not exist"));
    CU_ASSERT_FALSE(tu_file_exists(o));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    /* the output path is a directory: refused before anything is written */
    tu_path(o, sizeof o, g_dir, "out-is-dir");
    CU_ASSERT_EQUAL_FATAL(mkdir(o, 0700), 0);
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_convert(c, g_tok_path, o, "x", err), -1);
    CU_ASSERT(has(err, "is a directory"));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    struct stat st;
    CU_ASSERT(stat(o, &st) == 0 && S_ISDIR(st.st_mode));
    rmdir(o);
    unlink(c);
    free(b.p);
    src_free(&m);
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "usage: %s [TOKENIZER_BIN]\n", argv[0]);
        return 2;
    }
    g_real_tok = argc == 2 ? argv[1] : NULL;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("checkpoint", suite_init, suite_clean);
    if (!s) {
        CU_cleanup_registry();
        return 2;
    }
    struct { const char *name; CU_TestFunc fn; } tests[] = {
        {"open v0 and v1 (GQA/MHA, tied/separate)", test_open_formats},
        {"convert v0 == v1 == source, GQA, separate classifier", test_convert_gqa_separate},
        {"convert v0 == v1 == source, GQA, shared classifier", test_convert_gqa_shared},
        {"convert v0 == v1 == source, MHA, separate classifier", test_convert_mha_separate},
        {"classifier: tied and separate differ", test_classifier_matters},
        {"convert replaces an existing output", test_convert_overwrites_atomically},
        {"bad: truncated checkpoint", test_bad_truncated},
        {"bad: trailing bytes", test_bad_trailing},
        {"bad: header fields / v1 version", test_bad_header},
        {"bad: missing checkpoint", test_bad_missing},
        {"bad: tokenizer.bin", test_bad_tokenizer},
        {"bad: output path", test_bad_output},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!CU_add_test(s, tests[i].name, tests[i].fn)) {
            CU_cleanup_registry();
            return 2;
        }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned fails = CU_get_number_of_failures();
    unsigned suite_fails = CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return fails != 0 || suite_fails != 0;
}
