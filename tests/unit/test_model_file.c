/* CUnit tests for the HDF5 model file (src/model_file.c) and shard loading
 * (mi_model_load).
 *
 * Usage: test_model_file   (no arguments; scratch files go to a mkdtemp
 * directory under $TMPDIR or /tmp and are removed at the end).
 *
 * A "tiny-gqa" synthetic model (dim 128, hidden 320, 4 layers, 8 heads,
 * 2 KV heads, vocab 512, seq 128) written by mi_synth_write is the fixture;
 * broken variants are made with the model writer or the HDF5 C API. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/common.h"
#include "test_util.h"
#include "meshinfer/config.h"
#include "meshinfer/forward.h"
#include "meshinfer/model.h"
#include "meshinfer/model_file.h"
#include "meshinfer/quantize.h"
#include "meshinfer/synth.h"
#include "meshinfer/tokenizer.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <hdf5.h>

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED 20240601ull

static char g_dir[4096];
static char g_model[4200];
static mi_config g_cfg; /* what mi_config_from_shape("tiny-gqa") gives */

/* ------------------------------------------------------------ helpers */

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Copy the first `limit` bytes of src (all of it when limit < 0) to dst. */
static int copy_file(const char *src, const char *dst, long limit)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        return -1;
    FILE *out = fopen(dst, "wb");
    if (!out) {
        fclose(in);
        return -1;
    }
    char buf[65536];
    long left = limit;
    int rc = 0;
    for (;;) {
        size_t want = sizeof buf;
        if (limit >= 0 && (size_t)left < want)
            want = (size_t)left;
        if (want == 0)
            break;
        size_t got = fread(buf, 1, want, in);
        if (got == 0)
            break;
        if (fwrite(buf, 1, got, out) != got) {
            rc = -1;
            break;
        }
        left -= (long)got;
    }
    fclose(in);
    if (fclose(out) != 0)
        rc = -1;
    return rc;
}

/* Overwrite an existing scalar int attribute of the root group. */
static int set_root_int_attr(const char *path, const char *name, int v)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0)
        return -1;
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT, &v);
    if (a >= 0)
        H5Aclose(a);
    H5Fclose(f);
    return r < 0 ? -1 : 0;
}

/* Replace root attribute `name` by a 1-D int array of n elements. */
static int set_root_int_array_attr(const char *path, const char *name, int n)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0)
        return -1;
    int rc = 0;
    if (H5Aexists(f, name) > 0 && H5Adelete(f, name) < 0)
        rc = -1;
    int *v = calloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++)
        v[i] = 1;
    hsize_t dims = (hsize_t)n;
    hid_t s = H5Screate_simple(1, &dims, NULL);
    hid_t a = H5Acreate2(f, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, H5T_NATIVE_INT, v) < 0)
        rc = -1;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    free(v);
    H5Fclose(f);
    return rc;
}

/* Replace dataset `name` by a float64 dataset of the same shape. */
static int make_dataset_double(const char *path, const char *name)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0)
        return -1;
    int rc = -1;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d >= 0) {
        hid_t s = H5Dget_space(d);
        H5Dclose(d);
        if (H5Ldelete(f, name, H5P_DEFAULT) >= 0) {
            hid_t d2 = H5Dcreate2(f, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (d2 >= 0) {
                rc = 0;
                H5Dclose(d2);
            }
        }
        H5Sclose(s);
    }
    H5Fclose(f);
    return rc;
}

/* Write a complete model of config c with the model writer (constant
 * weights), except: tensor `skip` is left out, and tensor `bad` gets
 * bad_rows rows instead of its proper count. Returns 0 or -1. */
static int write_variant(const char *path, const mi_config *c, const char *skip, const char *bad,
                         size_t bad_rows, char *err)
{
    mi_model_writer *w = mi_model_writer_create(path, c, err);
    if (!w)
        return -1;
    size_t d = (size_t)c->dim, V = (size_t)c->vocab_size, kv = (size_t)mi_kv_dim(c), h = (size_t)c->hidden_dim;
    size_t q = (size_t)c->n_heads * (size_t)c->head_dim;
    size_t cap = (V > h ? V : h) + 64;
    float *buf = malloc(cap * d * sizeof(float));
    for (size_t i = 0; i < cap * d; i++)
        buf[i] = 0.01f;
    struct { char name[64]; size_t rows, cols; } t[256];
    int n = 0;
    snprintf(t[n].name, 64, "tok_embeddings"); t[n].rows = V; t[n].cols = d; n++;
    snprintf(t[n].name, 64, "norm"); t[n].rows = d; t[n].cols = 1; n++;
    if (!c->shared_classifier) {
        snprintf(t[n].name, 64, "classifier"); t[n].rows = V; t[n].cols = d; n++;
    }
    static const char *ln[] = {"attention_norm", "wq", "wk", "wv", "wo_t", "ffn_norm", "w1", "w3", "w2_t"};
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < 9; i++) {
            mi_model_layer_name(t[n].name, 64, l, ln[i]);
            size_t rows = i == 0 || i == 5 ? d : i == 1 || i == 4 ? q : i == 2 || i == 3 ? kv : h;
            t[n].rows = rows;
            t[n].cols = i == 0 || i == 5 ? 1 : d;
            n++;
        }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (skip && strcmp(t[i].name, skip) == 0)
            continue;
        size_t rows = bad && strcmp(t[i].name, bad) == 0 ? bad_rows : t[i].rows;
        rc = mi_model_writer_put(w, t[i].name, buf, rows, t[i].cols, 0, err);
    }
    free(buf);
    mi_tokenizer tok;
    if (rc == 0 && (rc = mi_tokenizer_synthetic(&tok, c->vocab_size, err)) == 0) {
        rc = mi_model_writer_put_tokenizer(w, &tok, err);
        mi_tokenizer_free(&tok);
    }
    if (rc) {
        mi_model_writer_abort(w);
        return -1;
    }
    return mi_model_writer_commit(w, err);
}

static float *read_full(mi_model_file *mf, const char *name, size_t rows, size_t cols)
{
    char err[MI_ERRLEN];
    float *p = malloc(rows * cols * sizeof(float));
    if (mi_model_read_rows(mf, name, 0, rows, p, rows * cols, err) != 0) {
        fprintf(stderr, "read_full(%s): %s\n", name, err);
        free(p);
        return NULL;
    }
    return p;
}

/* Expect mi_model_open(path) to fail with an error containing both keys. */
static void expect_open_fails(const char *path, const char *key1, const char *key2)
{
    char err[MI_ERRLEN] = "";
    mi_config cfg;
    mi_model_file *mf = mi_model_open(path, &cfg, err);
    CU_ASSERT_PTR_NULL(mf);
    if (mf)
        mi_model_close(mf);
    CU_ASSERT(strlen(err) > 0);
    if (key1 && !strstr(err, key1)) {
        fprintf(stderr, "\n  error '%s' lacks '%s'\n", err, key1);
        CU_FAIL("error message lacks the expected key word");
    }
    if (key2 && !strstr(err, key2)) {
        fprintf(stderr, "\n  error '%s' lacks '%s'\n", err, key2);
        CU_FAIL("error message lacks the expected key word");
    }
    /* one line */
    CU_ASSERT_PTR_NULL(strchr(err, '\n'));
}

/* ------------------------------------------------------------ suite setup */

static int suite_init(void)
{
    if (tu_make_scratch(g_dir, sizeof g_dir, "test_model_file"))
        return -1;
    if (mi_config_from_shape("tiny-gqa", &g_cfg) != 0)
        return -1;
    tu_path(g_model, sizeof g_model, g_dir, "tiny.h5");
    char err[MI_ERRLEN];
    if (mi_synth_write(&g_cfg, SEED, g_model, 0, err) != 0) {
        fprintf(stderr, "synth: %s\n", err);
        return -1;
    }
    return 0;
}

static int suite_clean(void)
{
    return tu_rm_tree(g_dir) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ tests */

static void test_shape_is_tiny_gqa(void)
{
    /* the fixture's shape as documented, so the expectations below hold */
    CU_ASSERT_EQUAL(g_cfg.dim, 128);
    CU_ASSERT_EQUAL(g_cfg.hidden_dim, 320);
    CU_ASSERT_EQUAL(g_cfg.n_layers, 4);
    CU_ASSERT_EQUAL(g_cfg.n_heads, 8);
    CU_ASSERT_EQUAL(g_cfg.n_kv_heads, 2);
    CU_ASSERT_EQUAL(g_cfg.head_dim, 16);
    CU_ASSERT_EQUAL(g_cfg.vocab_size, 512);
    CU_ASSERT_EQUAL(g_cfg.seq_len, 128);
    CU_ASSERT_EQUAL(g_cfg.shared_classifier, 0);
    CU_ASSERT_EQUAL(g_cfg.synthetic, 1);
    CU_ASSERT_STRING_EQUAL(g_cfg.name, "tiny-gqa");
    CU_ASSERT(tu_file_exists(g_model));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
}

static void test_layer_name(void)
{
    char b[64];
    mi_model_layer_name(b, sizeof b, 3, "wq");
    CU_ASSERT_STRING_EQUAL(b, "layers/003/wq");
    mi_model_layer_name(b, sizeof b, 121, "w2_t");
    CU_ASSERT_STRING_EQUAL(b, "layers/121/w2_t");
}

static void test_open_config(void)
{
    char err[MI_ERRLEN] = "";
    mi_config c;
    memset(&c, 0xAB, sizeof c);
    mi_model_file *mf = mi_model_open(g_model, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    CU_ASSERT_EQUAL(c.dim, g_cfg.dim);
    CU_ASSERT_EQUAL(c.hidden_dim, g_cfg.hidden_dim);
    CU_ASSERT_EQUAL(c.n_layers, g_cfg.n_layers);
    CU_ASSERT_EQUAL(c.n_heads, g_cfg.n_heads);
    CU_ASSERT_EQUAL(c.n_kv_heads, g_cfg.n_kv_heads);
    CU_ASSERT_EQUAL(c.head_dim, g_cfg.head_dim);
    CU_ASSERT_EQUAL(c.vocab_size, g_cfg.vocab_size);
    CU_ASSERT_EQUAL(c.seq_len, g_cfg.seq_len);
    CU_ASSERT_EQUAL(c.rope_theta, g_cfg.rope_theta);
    CU_ASSERT_EQUAL(c.norm_eps, g_cfg.norm_eps);
    CU_ASSERT_EQUAL(c.shared_classifier, 0);
    CU_ASSERT_EQUAL(c.synthetic, 1);
    CU_ASSERT_STRING_EQUAL(c.name, "tiny-gqa");
    mi_model_close(mf);
    mi_model_close(NULL); /* safe */
}

static void test_read_rows(void)
{
    char err[MI_ERRLEN] = "";
    mi_config c;
    mi_model_file *mf = mi_model_open(g_model, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    size_t d = (size_t)c.dim, q = (size_t)c.n_heads * (size_t)c.head_dim;
    float *full = read_full(mf, "layers/001/wq", q, d);
    float *full0 = read_full(mf, "layers/000/wq", q, d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(full);
    CU_ASSERT_PTR_NOT_NULL_FATAL(full0);
    /* synthetic weights: uniform(-a, a), a = 0.02*sqrt(3); seeded per tensor name */
    const float a = 0.02f * 1.7320508f;
    int in_range = 1, nonzero = 0, differs = 0;
    for (size_t i = 0; i < q * d; i++) {
        if (!(fabsf(full[i]) <= a))
            in_range = 0;
        if (full[i] != 0.0f)
            nonzero++;
        if (full[i] != full0[i])
            differs++;
    }
    CU_ASSERT(in_range);
    CU_ASSERT(nonzero > (int)(q * d) - 10);
    CU_ASSERT(differs > (int)(q * d) / 2);

    const size_t r0 = 37, n = 21;
    float *part = malloc((n + 1) * d * sizeof(float));
    part[n * d] = -777.0f; /* sentinel after the requested rows */
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "layers/001/wq", r0, n, part, (n + 1) * d, err), 0);
    CU_ASSERT_EQUAL(memcmp(part, full + r0 * d, n * d * sizeof(float)), 0);
    CU_ASSERT_EQUAL(part[n * d], -777.0f);

    /* last row, and a zero-row read that must not touch out */
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "layers/001/wq", q - 1, 1, part, (n + 1) * d, err), 0);
    CU_ASSERT_EQUAL(memcmp(part, full + (q - 1) * d, d * sizeof(float)), 0);
    part[0] = 5.0f;
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "layers/001/wq", 3, 0, part, (n + 1) * d, err), 0);
    CU_ASSERT_EQUAL(part[0], 5.0f);

    /* out of range: error names the tensor, out untouched */
    err[0] = '\0';
    part[0] = 6.0f;
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "layers/001/wq", q - 2, 3, part, (n + 1) * d, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "outside"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layers/001/wq"));
    CU_ASSERT_EQUAL(part[0], 6.0f);

    /* missing tensor */
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "layers/001/nope", 0, 1, part, (n + 1) * d, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "missing"));

    /* 1-D: norm is all 1.0, also a sub-range */
    float *norm = malloc((d + 1) * sizeof(float));
    norm[d] = -5.0f;
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "norm", 0, d, norm, d + 1, err), 0);
    int ones = 0;
    for (size_t i = 0; i < d; i++)
        ones += norm[i] == 1.0f;
    CU_ASSERT_EQUAL(ones, (int)d);
    CU_ASSERT_EQUAL(norm[d], -5.0f);
    for (size_t i = 0; i < d; i++)
        norm[i] = 0.0f;
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "layers/002/ffn_norm", 10, 5, norm, d + 1, err), 0);
    CU_ASSERT(norm[0] == 1.0f && norm[4] == 1.0f);
    CU_ASSERT_EQUAL(norm[5], 0.0f);
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "norm", d - 1, 2, norm, d + 1, err), -1);

    free(norm);
    free(part);
    free(full);
    free(full0);
    mi_model_close(mf);
}

static void test_read_t(void)
{
    char err[MI_ERRLEN] = "";
    mi_config c;
    mi_model_file *mf = mi_model_open(g_model, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    size_t d = (size_t)c.dim, q = (size_t)c.n_heads * (size_t)c.head_dim, h = (size_t)c.hidden_dim;

    /* wo_t: [q, d]; rows [r0, r0+n) come back as out[d][n] */
    float *full = read_full(mf, "layers/002/wo_t", q, d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(full);
    size_t r0 = 32, n = 48;
    float *out = malloc(n * d * sizeof(float));
    CU_ASSERT_EQUAL(mi_model_read_t(mf, "layers/002/wo_t", r0, n, out, err), 0);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            if (out[j * n + i] != full[(r0 + i) * d + j])
                bad++;
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(out[0 * n + 1], full[(r0 + 1) * d + 0]);
    CU_ASSERT_EQUAL(out[5 * n + 0], full[r0 * d + 5]);
    free(out);
    free(full);

    /* w2_t: [h, d]; FFN units [100, 160) */
    full = read_full(mf, "layers/003/w2_t", h, d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(full);
    r0 = 100;
    n = 60;
    out = malloc(n * d * sizeof(float));
    CU_ASSERT_EQUAL(mi_model_read_t(mf, "layers/003/w2_t", r0, n, out, err), 0);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            if (out[j * n + i] != full[(r0 + i) * d + j])
                bad++;
    CU_ASSERT_EQUAL(bad, 0);

    /* out of range and missing tensor fail */
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_read_t(mf, "layers/003/w2_t", h - 10, 11, out, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "outside"));
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_read_t(mf, "layers/009/w2_t", 0, 1, out, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "missing"));
    free(out);
    free(full);
    mi_model_close(mf);
}

static void test_read_tokenizer(void)
{
    char err[MI_ERRLEN] = "";
    mi_config c;
    mi_model_file *mf = mi_model_open(g_model, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    mi_tokenizer tok, ref;
    int rc = mi_model_read_tokenizer(mf, &tok, err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL_FATAL(mi_tokenizer_synthetic(&ref, c.vocab_size, err), 0);
    CU_ASSERT_EQUAL(tok.vocab_size, 512);
    CU_ASSERT_EQUAL(tok.max_token_length, ref.max_token_length);
    int mism = 0;
    for (int i = 0; i < tok.vocab_size; i++) {
        if (tok.piece_len[i] != ref.piece_len[i] ||
            memcmp(tok.pieces[i], ref.pieces[i], (size_t)ref.piece_len[i]) != 0 || tok.scores[i] != ref.scores[i])
            mism++;
    }
    CU_ASSERT_EQUAL(mism, 0);
    CU_ASSERT_STRING_EQUAL(tok.pieces[0], "<unk>");
    CU_ASSERT_EQUAL(tok.piece_len[MI_TOK_BYTE0 + 'A'], 1);
    CU_ASSERT_EQUAL(tok.pieces[MI_TOK_BYTE0 + 'A'][0], 'A');
    /* the stored tokenizer encodes like the reference */
    int ids1[64], ids2[64];
    int n1 = mi_tokenizer_encode(&tok, "ab ba zz", 1, ids1, err);
    int n2 = mi_tokenizer_encode(&ref, "ab ba zz", 1, ids2, err);
    CU_ASSERT(n1 > 1);
    CU_ASSERT_EQUAL(n1, n2);
    if (n1 == n2 && n1 > 0)
        CU_ASSERT_EQUAL(memcmp(ids1, ids2, (size_t)n1 * sizeof(int)), 0);
    CU_ASSERT_EQUAL(ids1[0], MI_TOK_BOS);
    mi_tokenizer_free(&tok);
    mi_tokenizer_free(&ref);
    mi_model_close(mf);
}

static size_t spec_floats(const mi_config *c, const mi_layer_spec *s)
{
    size_t d = (size_t)c->dim, hd = (size_t)c->head_dim, g = (size_t)mi_kv_group(c);
    size_t n = 0;
    if (s->n_kv > 0)
        n += d + (size_t)s->n_kv * g * hd * d + 2 * (size_t)s->n_kv * hd * d;
    if (s->proj == MI_PROJ_HEADS)
        n += (size_t)s->n_kv * g * hd * d;
    if (s->nf > 0)
        n += d + 3 * (size_t)s->nf * d;
    return n;
}

static void test_partial_load(void)
{
    char err[MI_ERRLEN] = "";
    mi_config c;
    mi_model_file *mf = mi_model_open(g_model, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    const int L = c.n_layers;
    size_t d = (size_t)c.dim, hd = (size_t)c.head_dim, g = (size_t)mi_kv_group(&c), h = (size_t)c.hidden_dim;
    size_t q = (size_t)c.n_heads * hd;

    mi_layer_spec *full_spec = malloc((size_t)L * sizeof *full_spec);
    mi_layer_spec *part_spec = malloc((size_t)L * sizeof *part_spec);
    /* KV head 1 (query heads 4..7) with its wo columns, FFN units [100, 160) */
    mi_layer_spec one = {.n_kv = 1, .kv = {1}, .proj = MI_PROJ_HEADS, .f0 = 100, .nf = 60};
    mi_shard_spec full_shard = mi_shard_spec_full(&c, full_spec);
    for (int l = 0; l < L; l++)
        part_spec[l] = one;
    mi_shard_spec part_shard = {.layers = part_spec};
    CU_ASSERT_EQUAL(full_spec[0].n_kv, 2);
    CU_ASSERT_EQUAL(full_spec[0].proj, MI_PROJ_FULL);
    CU_ASSERT_EQUAL(full_spec[0].nf, 320);

    mi_model full, part;
    mi_weight_source src = mi_weight_source_file(mf);
    int rc_full = mi_model_load(&full, &src, &c, &full_shard, err);
    CU_ASSERT_EQUAL_FATAL(rc_full, 0);
    int rc_part = mi_model_load(&part, &src, &c, &part_shard, err);
    CU_ASSERT_EQUAL_FATAL(rc_part, 0);

    /* full: every parameter once (classifier separate in tiny-gqa) */
    CU_ASSERT_EQUAL(full.weight_bytes, mi_model_params(&c) * sizeof(float));
    CU_ASSERT_EQUAL(full.kv_bytes, mi_kv_cache_bytes(&c, c.seq_len));
    CU_ASSERT_PTR_NOT_NULL(full.tok_embeddings.q);
    CU_ASSERT_PTR_NOT_NULL(full.classifier.q);
    CU_ASSERT(full.classifier.q != full.tok_embeddings.q);

    /* partial: exactly the shard bytes, no embeddings */
    size_t per_layer = d                      /* attention_norm */
                       + 1 * g * hd * d       /* wq rows of KV head 1's 4 query heads */
                       + 2 * 1 * hd * d       /* wk, wv of KV head 1 */
                       + 4 * hd * d           /* wo columns of query heads 4..7 */
                       + d                    /* ffn_norm */
                       + 3 * 60 * d;          /* w1, w3, w2 of 60 units */
    CU_ASSERT_EQUAL(per_layer, spec_floats(&c, &part_spec[0]));
    CU_ASSERT_EQUAL(per_layer * (size_t)L * sizeof(float), (size_t)700416);
    CU_ASSERT_EQUAL(part.weight_bytes, per_layer * (size_t)L * sizeof(float));
    CU_ASSERT_EQUAL(part.weight_bytes, mi_shard_weight_bytes(&c, &part_shard));
    CU_ASSERT_EQUAL(full.weight_bytes, mi_shard_weight_bytes(&c, &full_shard));
    CU_ASSERT_EQUAL(part.kv_bytes, mi_shard_kv_bytes(&c, &part_shard));
    CU_ASSERT_EQUAL(part.kv_bytes, (size_t)L * 2 * 1 * (size_t)c.seq_len * hd * sizeof(float));
    CU_ASSERT_EQUAL(part.has_embeddings, 0);
    CU_ASSERT_PTR_NULL(part.tok_embeddings.q);
    CU_ASSERT_PTR_NULL(part.norm);
    CU_ASSERT_PTR_NULL(part.classifier.q);

    for (int l = 0; l < L; l++) {
        const mi_layer *F = &full.layers[l], *P = &part.layers[l];
        CU_ASSERT_EQUAL(P->spec.kv[0], 1);
        CU_ASSERT_EQUAL(P->spec.nf, 60);
        /* wq: rows [kv0*g*hd, +n_kv*g*hd) = [64, 128) */
        CU_ASSERT_EQUAL(memcmp(P->wq.q, (float *)F->wq.q + 1 * g * hd * d, g * hd * d * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(P->wk.q, (float *)F->wk.q + 1 * hd * d, hd * d * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(P->wv.q, (float *)F->wv.q + 1 * hd * d, hd * d * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(P->attention_norm, F->attention_norm, d * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(P->w1.q, (float *)F->w1.q + 100 * d, 60 * d * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(P->w3.q, (float *)F->w3.q + 100 * d, 60 * d * sizeof(float)), 0);
        /* wo: [d, n_q*hd] column block of the full [d, q] */
        int bad = 0;
        size_t nq = 4 * hd;
        for (size_t j = 0; j < d; j++)
            for (size_t i = 0; i < nq; i++)
                if (((float *)P->wo.q)[j * nq + i] != ((float *)F->wo.q)[j * q + 4 * hd + i])
                    bad++;
        /* w2: [d, nf] column block of the full [d, h] */
        for (size_t j = 0; j < d; j++)
            for (size_t i = 0; i < 60; i++)
                if (((float *)P->w2.q)[j * 60 + i] != ((float *)F->w2.q)[j * h + 100 + i])
                    bad++;
        CU_ASSERT_EQUAL(bad, 0);
    }
    /* full wq of layer 1 equals the file's rows */
    float *wq = read_full(mf, "layers/001/wq", q, d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wq);
    CU_ASSERT_EQUAL(memcmp(full.layers[1].wq.q, wq, q * d * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(part.layers[1].wq.q, wq + 64 * d, 64 * d * sizeof(float)), 0);
    free(wq);

    /* a layer holding nothing has no weights and no cache */
    mi_model empty;
    for (int l = 0; l < L; l++)
        part_spec[l] = (mi_layer_spec){.n_kv = 0};
    part_spec[2] = (mi_layer_spec){.n_kv = 0, .proj = MI_PROJ_NONE, .f0 = 0, .nf = 1};
    CU_ASSERT_EQUAL_FATAL(mi_model_load(&empty, &src, &c, &part_shard, err), 0);
    CU_ASSERT_EQUAL(empty.weight_bytes, (d + 3 * d) * sizeof(float));
    CU_ASSERT_EQUAL(empty.kv_bytes, 0);
    CU_ASSERT_PTR_NULL(empty.layers[0].wq.q);
    CU_ASSERT_PTR_NULL(empty.layers[0].k_cache);
    CU_ASSERT_PTR_NOT_NULL(empty.layers[2].w1.q);
    mi_model_free(&empty);

    mi_model_free(&full);
    mi_model_free(&part);
    free(full_spec);
    free(part_spec);
    mi_model_close(mf);
}

static void test_bad_spec(void)
{
    char err[MI_ERRLEN] = "";
    mi_config c;
    mi_model_file *mf = mi_model_open(g_model, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    mi_layer_spec *spec = malloc((size_t)c.n_layers * sizeof *spec);
    mi_shard_spec shard = mi_shard_spec_full(&c, spec);
    spec[0].kv[1] = 2; /* KV head 2 does not exist: n_kv_heads = 2 */
    mi_model m;
    err[0] = '\0';
    mi_weight_source src = mi_weight_source_file(mf);
    CU_ASSERT_EQUAL(mi_model_load(&m, &src, &c, &shard, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layer 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "outside"));
    free(spec);
    mi_model_close(mf);
}

/* A fault while libhdf5 reads a model file (a damaged file) ends the process
 * with one line naming the file, status 1, the temporary output removed;
 * between reads, with the file open, a fault is a crash as before. Run in a
 * child per case: mode 0 faults inside the guard, 1 with the model open
 * between reads, 2 inside ten nested guards (past the eight kept lines) an
 * arithmetic fault, 3 overflows its stack inside the guard (the handler
 * runs on its own), 4 aborts. Off
 * under AddressSanitizer, which reports such faults itself. */
static int overflow(volatile char *up, long n)
{
    volatile char pad[4096];
    pad[0] = up ? up[0] : 1;
    return n > 0 ? overflow(pad, n - 1) + pad[0] : pad[0]; /* not a tail call: every frame stays */
}

static int fault_child(int mode, const char *temp, char *out, size_t n)
{
    int fd[2];
    if (pipe(fd))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        if (temp)
            mi_temp_file_set(temp);
        if (mode == 1) {
            char err[MI_ERRLEN];
            mi_config c;
            if (!mi_model_open(g_model, &c, err))
                _exit(3);
            raise(SIGSEGV);
        }
        for (int i = 0; i < (mode == 2 ? 10 : 1); i++)
            mi_fault_file_enter(g_model);
        if (mode == 3)
            _exit(overflow(NULL, 1L << 40) & 0 ? 6 : 7);
        if (mode == 4)
            abort(); /* glibc's way out of a heap libhdf5 overran */
        raise(mode == 2 ? SIGFPE : SIGBUS);
        _exit(5);
    }
    close(fd[1]);
    ssize_t k, got = 0;
    while ((k = read(fd[0], out + got, n - 1 - (size_t)got)) > 0)
        got += k;
    out[got > 0 ? got : 0] = 0;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    return st;
}

static void test_fault_named(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return;
#endif
#endif
    char out[8192], temp[4300];
    tu_path(temp, sizeof temp, g_dir, "partial.h5.tmp");
    for (int mode = 0; mode <= 4; mode += 1 + (mode == 0)) {
        CU_ASSERT_EQUAL_FATAL(tu_write_text(temp, "half written"), 0);
        int st = fault_child(mode, temp, out, sizeof out);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "meshinfer: error: "));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, g_model));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "HDF5 library crashed"));
        CU_ASSERT_PTR_NOT_NULL(strchr(out, '\n'));
        CU_ASSERT_PTR_NULL(strchr(out, '\n') ? strchr(strchr(out, '\n') + 1, '\n') : NULL); /* one line */
        CU_ASSERT_FALSE(tu_file_exists(temp));
    }
    int st = fault_child(1, NULL, out, sizeof out);
    CU_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    CU_ASSERT_PTR_NULL(strstr(out, "HDF5 library crashed"));
}

/* ---- bad files ---- */

static void test_missing_file(void)
{
    char p[4300];
    tu_path(p, sizeof p, g_dir, "does-not-exist.h5");
    expect_open_fails(p, "no such file", "does-not-exist.h5");
}

static void test_random_bytes(void)
{
    char p[4300];
    tu_path(p, sizeof p, g_dir, "random.h5");
    FILE *f = fopen(p, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 100000; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        fputc((int)(s & 0xff), f);
    }
    fclose(f);
    expect_open_fails(p, "not an HDF5 file", "corrupt");
    /* an empty file too */
    tu_path(p, sizeof p, g_dir, "empty.h5");
    f = fopen(p, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    expect_open_fails(p, "not an HDF5 file", NULL);
}

static void test_truncated(void)
{
    char p[4300];
    tu_path(p, sizeof p, g_dir, "half.h5");
    long full = file_size(g_model);
    CU_ASSERT_FATAL(full > 100000);
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, full / 2), 0);
    CU_ASSERT_EQUAL(file_size(p), full / 2);
    expect_open_fails(p, "truncated", NULL);
    /* only the last few bytes missing */
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, full - 16), 0);
    expect_open_fails(p, "truncated", NULL);
}

static void test_wrong_format_version(void)
{
    char p[4300];
    tu_path(p, sizeof p, g_dir, "v2.h5");
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
    /* the unmodified copy opens */
    char err[MI_ERRLEN];
    mi_config c;
    mi_model_file *mf = mi_model_open(p, &c, err);
    CU_ASSERT_PTR_NOT_NULL(mf);
    mi_model_close(mf);
    CU_ASSERT_EQUAL_FATAL(set_root_int_attr(p, "format_version", 5), 0);
    expect_open_fails(p, "format_version 5", "not supported");
    CU_ASSERT_EQUAL_FATAL(set_root_int_attr(p, "format_version", 4), 0);
    expect_open_fails(p, "format_version 4 needs the attribute family", "qwen2");
    /* 3 is the time-series family's (docs/patchtst.md): a language model's attributes are not one */
    CU_ASSERT_EQUAL_FATAL(set_root_int_attr(p, "format_version", 3), 0);
    expect_open_fails(p, "format_version 3 needs the attribute family", "patchtst");
}

static void test_attr_not_scalar(void)
{
    /* a corrupt file whose format_version / dim attribute is an array must be
     * rejected, not read past the int it is stored into */
    char p[4300];
    tu_path(p, sizeof p, g_dir, "arr.h5");
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(set_root_int_array_attr(p, "format_version", 64), 0);
    expect_open_fails(p, "format_version", NULL);
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(set_root_int_array_attr(p, "dim", 64), 0);
    expect_open_fails(p, "'dim'", NULL);
}

static void test_missing_attr(void)
{
    char p[4300];
    tu_path(p, sizeof p, g_dir, "noattr.h5");
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    CU_ASSERT(H5Adelete(f, "seq_len") >= 0);
    H5Fclose(f);
    expect_open_fails(p, "missing", "seq_len");
}

static void test_layer_count_mismatch(void)
{
    /* n_layers smaller or larger than the layers stored: named at open, never a truncated model */
    char p[4300];
    mi_config c0;
    mi_model_file *mf = mi_model_open(g_model, &c0, (char[MI_ERRLEN]){0});
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    mi_model_close(mf);
    tu_path(p, sizeof p, g_dir, "layers.h5");
    char want[64];
    for (int d = -1; d <= 1; d += 2) {
        CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
        CU_ASSERT_EQUAL_FATAL(set_root_int_attr(p, "n_layers", c0.n_layers + d), 0);
        snprintf(want, sizeof want, "stores %d layers", c0.n_layers);
        expect_open_fails(p, d < 0 ? "n_layers = 3" : "n_layers = 5", want);
    }
}

static void test_bad_heads(void)
{
    char p[4300];
    tu_path(p, sizeof p, g_dir, "heads.h5");
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(set_root_int_attr(p, "n_kv_heads", 3), 0);
    expect_open_fails(p, "n_kv_heads", "multiple");
    /* n_heads * head_dim != dim */
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(set_root_int_attr(p, "head_dim", 8), 0);
    expect_open_fails(p, "head_dim", "dim = 128");
    /* zero layers */
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(set_root_int_attr(p, "n_layers", 0), 0);
    expect_open_fails(p, "n_layers", NULL);
}

static void test_writer_variant_ok(void)
{
    /* control: the helper's unmodified output opens, so the failures below
     * come from the one change each makes */
    char p[4300], err[MI_ERRLEN] = "";
    tu_path(p, sizeof p, g_dir, "variant-ok.h5");
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, NULL, NULL, 0, err), 0);
    mi_config c;
    mi_model_file *mf = mi_model_open(p, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    /* a row is dim values: a 3-float buffer is refused, not overrun */
    float v[3];
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "layers/003/w3", 319, 1, v, 3, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "do not fit the 3 floats given"));
    float *row = malloc((size_t)c.dim * sizeof(float));
    CU_ASSERT_EQUAL(mi_model_read_rows(mf, "layers/003/w3", 319, 1, row, (size_t)c.dim, err), 0);
    CU_ASSERT_EQUAL(row[0], 0.01f);
    free(row);
    mi_model_close(mf);
}

static void test_wrong_shape(void)
{
    char p[4300], err[MI_ERRLEN] = "";
    tu_path(p, sizeof p, g_dir, "shape.h5");
    /* wk of layer 2 with 3 head rows (48) instead of 2*16 = 32 */
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, NULL, "layers/002/wk", 48, err), 0);
    expect_open_fails(p, "shape", "layers/002/wk");
    expect_open_fails(p, "[48, 128]", "expected [32, 128]");
    /* a 1-D tensor of the wrong length */
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, NULL, "norm", 127, err), 0);
    expect_open_fails(p, "shape [127]", "expected [128]");
    /* classifier with one row too many */
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, NULL, "classifier", 513, err), 0);
    expect_open_fails(p, "shape", "classifier");
}

static void test_wrong_dtype(void)
{
    char p[4300];
    tu_path(p, sizeof p, g_dir, "f64.h5");
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(make_dataset_double(p, "layers/001/w1"), 0);
    expect_open_fails(p, "float32", "layers/001/w1");
}

static void test_missing_tensor(void)
{
    char p[4300], err[MI_ERRLEN] = "";
    tu_path(p, sizeof p, g_dir, "missing.h5");
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, "layers/003/w3", NULL, 0, err), 0);
    expect_open_fails(p, "missing", "layers/003/w3");
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, "classifier", NULL, 0, err), 0);
    expect_open_fails(p, "missing", "classifier");
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, "tok_embeddings", NULL, 0, err), 0);
    expect_open_fails(p, "missing", "tok_embeddings");
    /* a shared-classifier model does not need /classifier */
    mi_config c = g_cfg;
    c.shared_classifier = 1;
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &c, "classifier", NULL, 0, err), 0);
    mi_config got;
    mi_model_file *mf = mi_model_open(p, &got, err);
    CU_ASSERT_PTR_NOT_NULL(mf);
    CU_ASSERT_EQUAL(got.shared_classifier, 1);
    mi_model_close(mf);
}

static void test_no_tokenizer(void)
{
    /* a model without /tokenizer opens, but reading the tokenizer fails */
    char p[4300], err[MI_ERRLEN] = "";
    tu_path(p, sizeof p, g_dir, "notok.h5");
    CU_ASSERT_EQUAL_FATAL(copy_file(g_model, p, -1), 0);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    CU_ASSERT(H5Ldelete(f, "tokenizer", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    mi_config c;
    mi_model_file *mf = mi_model_open(p, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    mi_tokenizer tok;
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_read_tokenizer(mf, &tok, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tokenizer"));
    mi_model_close(mf);
}

/* ---- writer ---- */

static void test_nonfinite_weights(void)
{
    char p[4300], err[MI_ERRLEN] = "";
    /* the writer refuses a non-finite weight (convert took an all-NaN tensor before) */
    tu_path(p, sizeof p, g_dir, "nan.h5");
    mi_model_writer *w = mi_model_writer_create(p, &g_cfg, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    float x[128];
    for (int i = 0; i < 128; i++)
        x[i] = i == 77 ? NAN : 1.0f;
    CU_ASSERT_EQUAL(mi_model_writer_put(w, "norm", x, 128, 1, 0, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "'norm' holds a non-finite value"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "row 77"));
    mi_model_writer_abort(w);
    CU_ASSERT_FALSE(tu_file_exists(p));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));

    /* `meshinfer check`: every loaded weight finite, the first bad one named */
    mi_model m;
    mi_model_load_path(&m, g_model, NULL);
    size_t n = 0;
    CU_ASSERT_EQUAL(mi_model_check_finite(&m, g_model, &n, err), 0);
    CU_ASSERT_EQUAL(n, mi_model_params(&g_cfg));
    CU_ASSERT_EQUAL_FATAL(m.layers[1].w1.dtype, MI_F32);
    float *w1 = m.layers[1].w1.q;
    w1[3 * m.layers[1].w1.cols + 5] = INFINITY;
    CU_ASSERT_EQUAL(mi_model_check_finite(&m, g_model, &n, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "'layers/001/w1'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "row 3, column 5"));
    w1[3 * m.layers[1].w1.cols + 5] = 0.0f;
    /* each matrix of a layer named as the file names it (w2 is stored as w2_t) */
    {
        mi_layer *L = &m.layers[1];
        mi_tensor *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3};
        const char *want[] = {"'layers/001/wq'", "'layers/001/wk'", "'layers/001/wv'", "'layers/001/wo_t'",
                              "'layers/001/w1'", "'layers/001/w2_t'", "'layers/001/w3'"};
        for (int k = 0; k < 7; k++) {
            CU_ASSERT_EQUAL_FATAL(mats[k]->dtype, MI_F32);
            float *v = mats[k]->q;
            v[1] = NAN;
            CU_ASSERT_EQUAL(mi_model_check_finite(&m, g_model, &n, err), -1);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, want[k]));
            v[1] = 0.0f;
        }
    }
    m.layers[2].ffn_norm[9] = NAN;
    CU_ASSERT_EQUAL(mi_model_check_finite(&m, g_model, &n, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "'layers/002/ffn_norm'"));
    mi_model_free(&m);
}

static void test_writer_abort(void)
{
    char p[4300], err[MI_ERRLEN] = "";
    tu_path(p, sizeof p, g_dir, "aborted.h5");
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    mi_model_writer *w = mi_model_writer_create(p, &g_cfg, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    /* the temporary exists while writing, the target does not */
    CU_ASSERT(tu_dir_has_partial(g_dir));
    CU_ASSERT_FALSE(tu_file_exists(p));
    float x[128];
    for (int i = 0; i < 128; i++)
        x[i] = 1.0f;
    CU_ASSERT_EQUAL(mi_model_writer_put(w, "norm", x, 128, 1, 0, err), 0);
    mi_model_writer_abort(w);
    CU_ASSERT_FALSE(tu_file_exists(p));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    mi_model_writer_abort(NULL); /* safe */

    /* a process killed while its writer is open leaves no temporary file
     * and dies of the signal */
    for (int k = 0; k < 2; k++) {
        int sig = k ? SIGINT : SIGTERM;
        fflush(NULL);
        pid_t pid = fork();
        CU_ASSERT_FATAL(pid >= 0);
        if (pid == 0) {
            mi_model_writer *cw = mi_model_writer_create(p, &g_cfg, err);
            if (!cw || !tu_dir_has_partial(g_dir))
                _exit(3);
            raise(sig);
            _exit(4); /* not reached */
        }
        int st = 0;
        CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
        CU_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == sig);
        CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
        CU_ASSERT_FALSE(tu_file_exists(p));
    }
}

static void test_writer_commit(void)
{
    char p[4300], err[MI_ERRLEN] = "";
    tu_path(p, sizeof p, g_dir, "committed.h5");
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, NULL, NULL, 0, err), 0);
    CU_ASSERT(tu_file_exists(p));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    /* transpose flag: [rows, cols] data stored as [cols, rows] */
    char p2[4300];
    tu_path(p2, sizeof p2, g_dir, "transposed.h5");
    mi_model_writer *w = mi_model_writer_create(p2, &g_cfg, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    float a[6] = {1, 2, 3, 4, 5, 6}; /* [2, 3] */
    CU_ASSERT_EQUAL(mi_model_writer_put(w, "t", a, 2, 3, 1, err), 0);
    CU_ASSERT_EQUAL(mi_model_writer_commit(w, err), 0);
    hid_t f = H5Fopen(p2, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    hid_t d = H5Dopen2(f, "t", H5P_DEFAULT);
    hid_t s = H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    CU_ASSERT_EQUAL(H5Sget_simple_extent_ndims(s), 2);
    H5Sget_simple_extent_dims(s, dims, NULL);
    CU_ASSERT(dims[0] == 3 && dims[1] == 2);
    float b[6] = {0};
    CU_ASSERT(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
    const float want[6] = {1, 4, 2, 5, 3, 6};
    CU_ASSERT_EQUAL(memcmp(b, want, sizeof want), 0);
    H5Sclose(s);
    H5Dclose(d);
    H5Fclose(f);
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
}

static void test_writer_bad_dir(void)
{
    char p[4300], err[MI_ERRLEN] = "";
    tu_path(p, sizeof p, g_dir, "no/such/dir/model.h5");
    mi_model_writer *w = mi_model_writer_create(p, &g_cfg, err);
    CU_ASSERT_PTR_NULL(w);
    if (w)
        mi_model_writer_abort(w);
    CU_ASSERT(strlen(err) > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "does not exist"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "model.h5"));
    CU_ASSERT_FALSE(tu_file_exists(p));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
}

static void test_writer_bad_config(void)
{
    char p[4300], err[MI_ERRLEN] = "";
    tu_path(p, sizeof p, g_dir, "badcfg.h5");
    mi_config c = g_cfg;
    c.n_kv_heads = 3;
    mi_model_writer *w = mi_model_writer_create(p, &c, err);
    CU_ASSERT_PTR_NULL(w);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "n_kv_heads"));
    CU_ASSERT_FALSE(tu_file_exists(p));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
}

/* ------------------------------------------------------------ dtypes */

/* Load every weight of path (all layers, embeddings, classifier). */
static int load_full(const char *path, mi_model *m)
{
    char err[MI_ERRLEN];
    mi_config c;
    mi_model_file *mf = mi_model_open(path, &c, err);
    if (!mf) {
        printf("\n  %s\n", err);
        return -1;
    }
    mi_layer_spec *ls = malloc((size_t)c.n_layers * sizeof *ls);
    mi_shard_spec spec = mi_shard_spec_full(&c, ls);
    mi_weight_source src = mi_weight_source_file(mf);
    int rc = mi_model_load(m, &src, &c, &spec, err);
    free(ls);
    mi_model_close(mf);
    return rc;
}

/* Every row of a (quantized) equals b's (fp32) within the format's bound:
 * half a step for q8_0, a step for q4_0 (a step = the row's block maximum
 * / 127 or / 8 rounded up), 2^-10 relative for fp16. Checks the layout too:
 * a transposed or misplaced block would be off by the values' own size. */
static int rows_close(const mi_tensor *a, const mi_tensor *b)
{
    if (a->rows != b->rows || a->cols != b->cols || b->dtype != MI_F32)
        return 0;
    float *x = malloc((size_t)a->cols * sizeof(float));
    int ok = 1;
    for (int r = 0; r < a->rows && ok; r++) {
        mi_tensor_row_f32(a, r, x);
        const float *y = (const float *)b->q + (size_t)r * b->cols;
        for (int i = 0; i < a->cols && ok; i++) {
            double amax = 0;
            for (int j = i / 32 * 32; j < i / 32 * 32 + 32 && j < a->cols; j++)
                amax = fabs(y[j]) > amax ? fabs(y[j]) : amax;
            double tol = a->dtype == MI_F16 ? fabs(y[i]) * 0x1p-10 + 1e-7 : a->dtype == MI_Q8_0 ? amax / 127 * 0.57 + 1e-7
                         : a->dtype == MI_Q4_0 ? amax / 8 * 1.01 + 1e-7 : 0;
            ok = fabs((double)x[i] - y[i]) <= tol;
            if (!ok)
                printf("\n  row %d col %d: %g vs %g (tol %g)", r, i, x[i], y[i], tol);
        }
    }
    free(x);
    return ok;
}

static void check_quantized(const char *dtype, const char *layer_spec, const char *emb)
{
    char out[4300], err[MI_ERRLEN] = "";
    tu_path(out, sizeof out, g_dir, "quantized.h5");
    mi_config t;
    mi_model_file *mf = mi_model_open(g_model, &t, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    mi_model_close(mf);
    CU_ASSERT_EQUAL_FATAL(mi_dtypes_apply(&t, dtype, layer_spec, emb, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_model_quantize(g_model, out, &t, 0, err), 0);
    mi_config c;
    mf = mi_model_open(out, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    mi_model_close(mf);
    /* the file holds the dtypes asked for */
    CU_ASSERT_EQUAL(memcmp(c.dtype, t.dtype, sizeof c.dtype), 0);
    CU_ASSERT_EQUAL(c.emb_dtype, t.emb_dtype);
    CU_ASSERT_EQUAL(c.cls_dtype, t.cls_dtype);
    mi_model q, f;
    CU_ASSERT_EQUAL_FATAL(load_full(out, &q), 0);
    CU_ASSERT_EQUAL_FATAL(load_full(g_model, &f), 0);
    CU_ASSERT_EQUAL(q.weight_bytes, mi_decode_weight_bytes(&c) + mi_embedding_bytes(&c) +
                                        (size_t)(2 * c.n_layers + 1) * c.dim * sizeof(float));
    int bad = !rows_close(&q.tok_embeddings, &f.tok_embeddings) + !rows_close(&q.classifier, &f.classifier);
    for (int l = 0; l < c.n_layers; l++) {
        const mi_layer *a = &q.layers[l], *b = &f.layers[l];
        bad += !rows_close(&a->wq, &b->wq) + !rows_close(&a->wk, &b->wk) + !rows_close(&a->wv, &b->wv) +
               !rows_close(&a->wo, &b->wo) + !rows_close(&a->w1, &b->w1) + !rows_close(&a->w2, &b->w2) +
               !rows_close(&a->w3, &b->w3);
        bad += memcmp(a->attention_norm, b->attention_norm, (size_t)c.dim * sizeof(float)) != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    mi_model_free(&q);
    mi_model_free(&f);
    unlink(out);
}

static void test_quantize_fp16(void) { check_quantized("fp16", NULL, NULL); }
static void test_quantize_q8_0(void) { check_quantized("q8_0", NULL, NULL); }
static void test_quantize_q4_0(void) { check_quantized("q4_0", NULL, NULL); }
static void test_quantize_mixed(void) { check_quantized(NULL, "0-1:q8_0,2:q4_0,3:fp16", "q8_0"); }

/* Voltron's shard-wise pruning: each layer loses its k least important FFN
 * shards (ranked per layer), the written model holds exactly the kept rows of
 * w1 and w3 and columns of w2, and it computes what the full model does with
 * the pruned channels' w3 rows zeroed (their outputs zero). */
static void test_prune_ffn(void)
{
    char out[4300], err[MI_ERRLEN] = "";
    tu_path(out, sizeof out, g_dir, "pruned.h5");
    /* per layer, the 3 shards of 32 channels whose (7j + 3l) mod 10 is under 3 go (layer 0: 0, 3, 6),
     * as planner.h mi_prune_keep would choose them for those importances */
    int k = 3, H = g_cfg.hidden_dim, kept = H - k * 32;
    int *keep = malloc((size_t)g_cfg.n_layers * (size_t)kept * sizeof(int));
    for (int l = 0; l < g_cfg.n_layers; l++)
        for (int j = 0, o = 0; j < H / 32; j++)
            for (int u = 0; u < 32 && (j * 7 + l * 3) % 10 >= 3; u++)
                keep[(size_t)l * kept + o++] = j * 32 + u;
    CU_ASSERT_EQUAL(keep[0], 32);
    CU_ASSERT_EQUAL(keep[64], 4 * 32);
    mi_config t = g_cfg;
    t.hidden_dim = kept;
    CU_ASSERT_EQUAL_FATAL(mi_model_quantize_pruned(g_model, out, &t, keep, 0, err), 0);
    mi_model p, f;
    CU_ASSERT_EQUAL_FATAL(load_full(out, &p), 0);
    CU_ASSERT_EQUAL_FATAL(load_full(g_model, &f), 0);
    CU_ASSERT_EQUAL(p.cfg.hidden_dim, kept);
    int bad = 0, D = g_cfg.dim;
    for (int l = 0; l < g_cfg.n_layers; l++) {
        const mi_layer *a = &p.layers[l], *b = &f.layers[l];
        const int *kl = keep + (size_t)l * kept;
        for (int i = 0; i < kept; i++) {
            bad += memcmp((float *)a->w1.q + (size_t)i * D, (float *)b->w1.q + (size_t)kl[i] * D, D * sizeof(float)) != 0;
            bad += memcmp((float *)a->w3.q + (size_t)i * D, (float *)b->w3.q + (size_t)kl[i] * D, D * sizeof(float)) != 0;
            for (int r = 0; r < D; r++)
                bad += ((float *)a->w2.q)[(size_t)r * kept + i] != ((float *)b->w2.q)[(size_t)r * H + kl[i]];
        }
        /* the full model's pruned channels: w3 rows zero */
        unsigned char *gone = calloc((size_t)H, 1);
        memset(gone, 1, (size_t)H);
        for (int i = 0; i < kept; i++)
            gone[kl[i]] = 0;
        for (int u = 0; u < H; u++)
            if (gone[u])
                memset((float *)b->w3.q + (size_t)u * D, 0, D * sizeof(float));
        free(gone);
    }
    CU_ASSERT_EQUAL(bad, 0);
    mi_scratch sp, sf;
    mi_scratch_init(&sp, &p.cfg, 8);
    mi_scratch_init(&sf, &f.cfg, 8);
    int toks[5] = {1, 7, 42, 3, 99};
    const float *lp = mi_forward(&p, &sp, toks, 5, 0, 0), *lf = mi_forward(&f, &sf, toks, 5, 0, 0);
    double worst = 0;
    for (int v = 0; v < g_cfg.vocab_size; v++)
        worst = fmax(worst, fabs((double)lp[v] - lf[v]));
    /* the sums over hidden channels skip exact zeros: only the order of additions differs */
    CU_ASSERT(worst < 1e-4);
    /* kept channels that do not ascend are refused */
    keep[1] = keep[0];
    CU_ASSERT_EQUAL(mi_model_quantize_pruned(g_model, out, &t, keep, 0, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "must ascend"));
    mi_scratch_free(&sp);
    mi_scratch_free(&sf);
    mi_model_free(&p);
    mi_model_free(&f);
    free(keep);
    unlink(out);
}

/* A shard of a q4_0 model (one KV head's rows and wo columns, a block-aligned
 * FFN slice) holds exactly the full model's bytes for those rows and
 * columns; a slice that cuts a block is refused. */
static void test_quantized_shards(void)
{
    char out[4300], err[MI_ERRLEN] = "";
    tu_path(out, sizeof out, g_dir, "q4.h5");
    mi_config t = g_cfg;
    CU_ASSERT_EQUAL_FATAL(mi_dtypes_apply(&t, "q4_0", NULL, NULL, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_model_quantize(g_model, out, &t, 0, err), 0);
    mi_config c;
    mi_model_file *mf = mi_model_open(out, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    int L = c.n_layers;
    mi_layer_spec *ls = malloc((size_t)L * sizeof *ls);
    mi_layer_spec one = {.n_kv = 1, .kv = {1}, .proj = MI_PROJ_HEADS, .f0 = 96, .nf = 64};
    for (int l = 0; l < L; l++)
        ls[l] = one;
    mi_shard_spec spec = {.layers = ls};
    mi_weight_source src = mi_weight_source_file(mf);
    mi_model part, full;
    CU_ASSERT_EQUAL_FATAL(mi_model_load(&part, &src, &c, &spec, err), 0);
    CU_ASSERT_EQUAL(part.weight_bytes, mi_shard_weight_bytes(&c, &spec));
    CU_ASSERT_EQUAL_FATAL(load_full(out, &full), 0);
    int w = mi_kv_group(&c) * c.head_dim, bad = 0; /* 64 wo columns per KV head: 2 blocks */
    for (int l = 0; l < L; l++) {
        const mi_layer *P = &part.layers[l], *F = &full.layers[l];
        mi_tensor fw1 = mi_tensor_rows(&F->w1, 96, 64);
        bad += memcmp(P->w1.q, fw1.q, (size_t)64 * c.dim / 2) != 0 || memcmp(P->w1.d, fw1.d, (size_t)64 * c.dim / 16);
        for (int r = 0; r < c.dim; r++) {
            /* w2 columns [96, 160) and wo columns of KV head 1 are whole blocks of each row */
            bad += memcmp((char *)P->w2.q + (size_t)r * 32, (char *)F->w2.q + (size_t)r * (c.hidden_dim / 2) + 48, 32);
            bad += memcmp(P->w2.d + (size_t)r * 2, F->w2.d + (size_t)r * (c.hidden_dim / 32) + 3, 4);
            bad += memcmp((char *)P->wo.q + (size_t)r * (w / 2), (char *)F->wo.q + (size_t)r * (c.dim / 2) + w / 2,
                          (size_t)w / 2);
            bad += memcmp(P->wo.d + (size_t)r * (w / 32), F->wo.d + (size_t)r * (c.dim / 32) + w / 32, (size_t)w / 16);
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    mi_model_free(&full);
    mi_model_free(&part);
    /* FFN units [100, 160): w2's columns would cut a block */
    one.f0 = 100;
    one.nf = 60;
    for (int l = 0; l < L; l++)
        ls[l] = one;
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_load(&part, &src, &c, &spec, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cut q4_0 blocks"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "w2_t"));
    free(ls);
    mi_model_close(mf);
    unlink(out);
}


/* The k-quants through the file: a model 256 wide (tiny-gqa's layout at
 * dim 256, hidden 512) quantized to q4_K, q5_K and q6_K (embeddings) holds,
 * for every matrix and row, exactly the bytes mi_quantize_row gives for the
 * fp32 row (wo_t and w2_t through their super-block transposes); a shard
 * with whole super-blocks of w2 columns holds the full model's bytes; a
 * slice that cuts a super-block is refused naming the tensor and dtype; a
 * writer asked for q4_K on rows of 288 refuses in one line. */
static void test_kquant_file(void)
{
    char fp[4300], out[4300], err[MI_ERRLEN] = "";
    tu_path(fp, sizeof fp, g_dir, "wide.h5");
    tu_path(out, sizeof out, g_dir, "wide-k.h5");
    mi_config w = g_cfg;
    w.dim = 256, w.hidden_dim = 512, w.n_heads = 4, w.n_kv_heads = 2, w.head_dim = 64, w.n_layers = 3;
    w.seq_len = 64;
    CU_ASSERT_EQUAL_FATAL(mi_synth_write(&w, SEED, fp, 0, err), 0);
    mi_config t = w;
    CU_ASSERT_EQUAL_FATAL(mi_dtypes_apply(&t, NULL, "0:q4_K,1:q5_K,2:q6_K", "q6_K", err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_model_quantize(fp, out, &t, 0, err), 0);
    mi_config c;
    mi_model_file *mf = mi_model_open(out, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    CU_ASSERT_EQUAL(c.dtype[1][MI_W2], MI_Q5_K);
    CU_ASSERT_EQUAL(c.emb_dtype, MI_Q6_K);
    CU_ASSERT_EQUAL(mi_ffn_align(&c, 0), 256);
    CU_ASSERT_EQUAL(mi_kv_align(&c, 0), 2); /* a KV head's wo columns are 128: two make a super-block */
    mi_model q, f;
    CU_ASSERT_EQUAL_FATAL(load_full(out, &q), 0);
    CU_ASSERT_EQUAL_FATAL(load_full(fp, &f), 0);
    CU_ASSERT_EQUAL(q.weight_bytes, mi_decode_weight_bytes(&c) + mi_embedding_bytes(&c) +
                                        (size_t)(2 * c.n_layers + 1) * c.dim * sizeof(float));
    int bad = 0;
    unsigned char *row = malloc(4096);
    for (int l = 0; l < c.n_layers; l++) {
        const mi_tensor *a[7] = {&q.layers[l].wq, &q.layers[l].wk, &q.layers[l].wv, &q.layers[l].wo,
                                 &q.layers[l].w1, &q.layers[l].w2, &q.layers[l].w3};
        const mi_tensor *b[7] = {&f.layers[l].wq, &f.layers[l].wk, &f.layers[l].wv, &f.layers[l].wo,
                                 &f.layers[l].w1, &f.layers[l].w2, &f.layers[l].w3};
        for (int m = 0; m < 7; m++) {
            size_t rb = mi_dtype_q_row_bytes(a[m]->dtype, (size_t)a[m]->cols);
            bad += a[m]->dtype != t.dtype[l][m] || a[m]->d != NULL;
            for (int r = 0; r < a[m]->rows; r++) {
                mi_quantize_row(a[m]->dtype, (const float *)b[m]->q + (size_t)r * b[m]->cols, b[m]->cols, row, NULL);
                bad += memcmp(row, (char *)a[m]->q + (size_t)r * rb, rb) != 0;
            }
        }
    }
    for (int r = 0; r < c.vocab_size; r++) {
        mi_quantize_row(MI_Q6_K, (const float *)f.tok_embeddings.q + (size_t)r * c.dim, c.dim, row, NULL);
        bad += memcmp(row, (char *)q.tok_embeddings.q + (size_t)r * 210, 210) != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* a shard: KV heads 0-1 (wo split by heads: 256 columns), FFN units [256, 512) */
    mi_layer_spec *ls = malloc((size_t)c.n_layers * sizeof *ls);
    mi_layer_spec one = {.n_kv = 2, .kv = {0, 1}, .proj = MI_PROJ_HEADS, .f0 = 256, .nf = 256};
    for (int l = 0; l < c.n_layers; l++)
        ls[l] = one;
    mi_shard_spec spec = {.layers = ls};
    mi_weight_source src = mi_weight_source_file(mf);
    mi_model part;
    CU_ASSERT_EQUAL_FATAL(mi_model_load(&part, &src, &c, &spec, err), 0);
    CU_ASSERT_EQUAL(part.weight_bytes, mi_shard_weight_bytes(&c, &spec));
    bad = 0;
    for (int l = 0; l < c.n_layers; l++) {
        const mi_layer *P = &part.layers[l], *F = &q.layers[l];
        size_t bb = mi_dtype_q_row_bytes(F->w2.dtype, 256);
        for (int r = 0; r < c.dim; r++)
            bad += memcmp((char *)P->w2.q + (size_t)r * bb, (char *)F->w2.q + (size_t)r * 2 * bb + bb, bb) != 0;
        mi_tensor fw1 = mi_tensor_rows(&F->w1, 256, 256);
        bad += memcmp(P->w1.q, fw1.q, 256 * mi_dtype_q_row_bytes(F->w1.dtype, 256)) != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    mi_model_free(&part);
    /* FFN units [128, 384): w2's columns would cut a super-block */
    one.f0 = 128;
    for (int l = 0; l < c.n_layers; l++)
        ls[l] = one;
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_load(&part, &src, &c, &spec, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cut q4_K blocks of 256"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "w2_t"));
    free(ls);
    free(row);
    mi_model_close(mf);
    mi_model_free(&q);
    mi_model_free(&f);
    /* rows of 128 values (tiny-gqa) are no whole super-blocks: refused by the dtypes' check, one line */
    mi_config g = g_cfg;
    CU_ASSERT_EQUAL(mi_dtypes_apply(&g, "q5_K", NULL, NULL, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a multiple of 256"));
    CU_ASSERT_PTR_NULL(strchr(err, '\n'));
    unlink(out);
    unlink(fp);
}

static void test_quantize_refusals(void)
{
    char p[4300], out[4300], out2[4300], err[MI_ERRLEN] = "";
    tu_path(p, sizeof p, g_dir, "nan.h5");
    tu_path(out, sizeof out, g_dir, "nan-q8.h5");
    tu_path(out2, sizeof out2, g_dir, "q8-again.h5");
    /* a NaN in one weight: refused, naming the tensor, and nothing written */
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, NULL, NULL, 0, err), 0);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "layers/002/w3", H5P_DEFAULT), fs = H5Dget_space(d);
    hsize_t start[2] = {7, 9}, one[2] = {1, 1};
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL);
    hid_t ms = H5Screate_simple(2, one, NULL);
    float nan = NAN;
    CU_ASSERT(H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &nan) >= 0);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(d);
    H5Fclose(f);
    mi_config t = g_cfg;
    CU_ASSERT_EQUAL_FATAL(mi_dtypes_apply(&t, "q8_0", NULL, NULL, err), 0);
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_quantize(p, out, &t, 0, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layers/002/w3"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "non-finite"));
    CU_ASSERT_FALSE(tu_file_exists(out));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
    /* a finite value beyond what the dtype holds: refused, naming it */
    CU_ASSERT_EQUAL_FATAL(write_variant(p, &g_cfg, NULL, NULL, 0, err), 0);
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    d = H5Dopen2(f, "layers/001/wk", H5P_DEFAULT);
    fs = H5Dget_space(d);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL);
    ms = H5Screate_simple(2, one, NULL);
    float big = 1e5f;
    CU_ASSERT(H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &big) >= 0);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(d);
    H5Fclose(f);
    mi_config h = g_cfg;
    CU_ASSERT_EQUAL_FATAL(mi_dtypes_apply(&h, "fp16", NULL, NULL, err), 0);
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_quantize(p, out, &h, 0, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layers/001/wk"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "beyond what fp16 can hold"));
    CU_ASSERT_EQUAL(mi_model_quantize(p, out, &t, 0, err), 0); /* q8_0's scale holds it */
    unlink(out);
    /* a quantized input is refused; so is an output over the input */
    CU_ASSERT_EQUAL_FATAL(mi_model_quantize(g_model, out, &t, 0, err), 0);
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_quantize(out, out2, &t, 0, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "already quantized"));
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_model_quantize(g_model, g_model, &t, 0, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "same file"));
    /* spec errors */
    mi_config u = g_cfg;
    CU_ASSERT_EQUAL(mi_dtypes_apply(&u, NULL, "0-4:q8_0", NULL, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layer 4 does not exist"));
    CU_ASSERT_EQUAL(mi_dtypes_apply(&u, NULL, "1,2:q8_0", NULL, err), -1);
    CU_ASSERT_EQUAL(mi_dtypes_apply(&u, NULL, "0:q8_0,", NULL, err), -1);
    CU_ASSERT_EQUAL(mi_dtypes_apply(&u, NULL, "99999999999:q8_0", NULL, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "does not exist"));
    CU_ASSERT_EQUAL(mi_dtypes_apply(&u, NULL, "0:q8_0_with_a_long_name", NULL, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown dtype"));
    CU_ASSERT_EQUAL(mi_dtypes_apply(&u, "q5_1", NULL, NULL, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown dtype 'q5_1'"));
    unlink(p);
    unlink(out);
}

/* Replace dataset `name` of a file by an empty dataset of rows x cols of `type`. */
static int replace_dataset(const char *path, const char *name, hsize_t rows, hsize_t cols, hid_t type)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0)
        return -1;
    int rc = H5Ldelete(f, name, H5P_DEFAULT) < 0 ? -1 : 0;
    hsize_t dims[2] = {rows, cols};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0)
        rc = -1;
    else
        H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
    return rc;
}

/* A block-format tensor whose parts do not fit its shape or dtype is
 * rejected at open, naming the part. */
static void test_damaged_blocks(void)
{
    char q[4300], p[4300], err[MI_ERRLEN] = "";
    tu_path(q, sizeof q, g_dir, "q4-ok.h5");
    tu_path(p, sizeof p, g_dir, "q4-bad.h5");
    mi_config t = g_cfg;
    CU_ASSERT_EQUAL_FATAL(mi_dtypes_apply(&t, "q4_0", NULL, NULL, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_model_quantize(g_model, q, &t, 0, err), 0);
    /* values cut short (a row missing) */
    CU_ASSERT_EQUAL_FATAL(copy_file(q, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(replace_dataset(p, "layers/001/w1/qs", 319, 64, H5T_STD_U8LE), 0);
    expect_open_fails(p, "layers/001/w1/qs", "expected [320, 64]");
    /* scales cut short, in a transposed tensor (blocks down the rows) */
    CU_ASSERT_EQUAL_FATAL(copy_file(q, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(replace_dataset(p, "layers/002/w2_t/d", 9, 128, H5T_IEEE_F32LE), 0);
    expect_open_fails(p, "layers/002/w2_t/d", "expected [10, 128]");
    /* scales of the right shape but float32 */
    CU_ASSERT_EQUAL_FATAL(copy_file(q, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(replace_dataset(p, "layers/003/wq/d", 128, 4, H5T_IEEE_F32LE), 0);
    expect_open_fails(p, "layers/003/wq/d", "not float16");
    /* a group without its dtype attribute */
    CU_ASSERT_EQUAL_FATAL(copy_file(q, p, -1), 0);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CU_ASSERT(H5Adelete_by_name(f, "layers/000/wk", "dtype", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_open_fails(p, "layers/000/wk", "dtype attribute");
    /* a block size this build does not read */
    CU_ASSERT_EQUAL_FATAL(copy_file(q, p, -1), 0);
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "layers/001/wv", H5P_DEFAULT), a = H5Aopen(g, "block_size", H5P_DEFAULT);
    int sixteen = 16;
    CU_ASSERT(H5Awrite(a, H5T_NATIVE_INT, &sixteen) >= 0);
    H5Aclose(a);
    H5Gclose(g);
    H5Fclose(f);
    expect_open_fails(p, "layers/001/wv", "block_size 32");
    /* q4_0 values stored as signed bytes */
    CU_ASSERT_EQUAL_FATAL(copy_file(q, p, -1), 0);
    CU_ASSERT_EQUAL_FATAL(replace_dataset(p, "layers/002/w3/qs", 320, 64, H5T_STD_I8LE), 0);
    expect_open_fails(p, "layers/002/w3/qs", "not unsigned 8-bit");
    unlink(p);
    unlink(q);
}

/* ------------------------------------------------------------ main */

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("model_file", suite_init, suite_clean);
    if (!s) {
        CU_cleanup_registry();
        return 2;
    }
    struct { const char *name; CU_TestFunc fn; } tests[] = {
        {"fixture shape is tiny-gqa", test_shape_is_tiny_gqa},
        {"layer dataset names", test_layer_name},
        {"open returns the written config", test_open_config},
        {"read_rows: row range equals full read; norm is 1", test_read_rows},
        {"read_t: transposed row block", test_read_t},
        {"read_tokenizer equals the synthetic vocabulary", test_read_tokenizer},
        {"partial load: exact shard bytes and rows", test_partial_load},
        {"load rejects shard ranges outside the model", test_bad_spec},
        {"bad file: missing path", test_missing_file},
        {"bad file: random bytes / empty", test_random_bytes},
        {"bad file: truncated", test_truncated},
        {"bad file: wrong format_version", test_wrong_format_version},
        {"bad file: non-scalar attribute", test_attr_not_scalar},
        {"bad file: missing attribute", test_missing_attr},
        {"bad file: invalid head config", test_bad_heads},
        {"bad file: n_layers differs from the layers stored", test_layer_count_mismatch},
        {"writer helper control model opens", test_writer_variant_ok},
        {"bad file: tensor of wrong shape", test_wrong_shape},
        {"bad file: tensor not float32", test_wrong_dtype},
        {"bad file: missing tensor", test_missing_tensor},
        {"model without tokenizer", test_no_tokenizer},
        {"writer abort leaves nothing", test_writer_abort},
        {"non-finite weights: refused by the writer, named by check", test_nonfinite_weights},
        {"writer commit and transpose", test_writer_commit},
        {"writer in missing directory fails", test_writer_bad_dir},
        {"writer rejects invalid config", test_writer_bad_config},
        {"quantize fp16: every matrix within fp16 rounding", test_quantize_fp16},
        {"quantize q8_0: every matrix within half a step, layouts right", test_quantize_q8_0},
        {"quantize q4_0: every matrix within a step, layouts right", test_quantize_q4_0},
        {"quantize per layer (q8_0, q4_0, fp16) with q8_0 embeddings", test_quantize_mixed},
        {"q4_0 shards: exact bytes of whole blocks; a cut block refused", test_quantized_shards},
        {"k-quants: exact super-block bytes stored and loaded, shards of whole super-blocks, cuts refused",
         test_kquant_file},
        {"pruning FFN shards: kept rows and columns exact, same logits as zeroed channels", test_prune_ffn},
        {"quantize refuses NaN weights, quantized input, output over input, bad specs", test_quantize_refusals},
        {"bad file: damaged block-format parts named at open", test_damaged_blocks},
        {"a fault inside libhdf5's reads: one line naming the file, status 1, temp removed; between reads a crash",
         test_fault_named},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!CU_add_test(s, tests[i].name, tests[i].fn)) {
            CU_cleanup_registry();
            return 2;
        }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned fails = CU_get_number_of_failures();
    /* a failed suite init/cleanup is a failure too */
    unsigned suite_fails = CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return fails != 0 || suite_fails != 0;
}
