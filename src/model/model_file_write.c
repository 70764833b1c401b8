/* HDF5 model file writing (see model_file.h): a temporary file renamed into
 * place at commit, the config as attributes, tensors in their dtype's
 * layout, the tokenizer. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/model_file.h"

#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/tensor.h"
#include "model_file_internal.h"

struct mi_model_writer {
    hid_t file;
    mi_output out; /* the destination and the temporary name it is written under */
};

/* IEEE binary16 as an HDF5 type (HDF5 1.10 predefines none): h5dump shows
 * its bit fields, and HDF5 converts it to float on reads that ask for one. */
/* IEEE half precision, made once per process; made again when its id no
 * longer names a datatype (whoever closes every open HDF5 object, as the
 * command-line fuzzer does between commands, closes it too). */
static hid_t f16_type(void)
{
    static hid_t t = -1;
    if (t < 0 || H5Iis_valid(t) <= 0) {
        t = H5Tcopy(H5T_IEEE_F32LE);
        H5Tset_fields(t, 15, 10, 5, 0, 10);
        H5Tset_precision(t, 16);
        H5Tset_size(t, 2);
        H5Tset_ebias(t, 15);
    }
    return t;
}

/* The output checks every output gets (output.h), and room for `bytes`. */
static int check_output(const char *path, double bytes, char *err)
{
    if (mi_output_check(path, "model file", NULL, 0, err))
        return -1;
    char dir[4096];
    mi_output_dir(path, dir, sizeof dir);
    struct statvfs vfs;
    if (statvfs(dir, &vfs) == 0) {
        double free_b = (double)vfs.f_bavail * (double)vfs.f_frsize;
        if (free_b < bytes)
            return mi_set_error(err, "%s: not enough disk space: the model needs about %.0f bytes, %.0f are free",
                                path, bytes, free_b);
    }
    return 0;
}

static int write_int_attr(hid_t loc, const char *name, int v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT, &v);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    return r < 0 ? -1 : 0;
}

static int write_float_attr(hid_t loc, const char *name, float v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_FLOAT, &v);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    return r < 0 ? -1 : 0;
}

static int write_str_attr(hid_t loc, const char *name, const char *v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    hid_t a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, t, v);
    if (a >= 0)
        H5Aclose(a);
    H5Tclose(t);
    H5Sclose(s);
    return r < 0 ? -1 : 0;
}

mi_model_writer *mi_model_writer_create(const char *path, const mi_config *c, char *err)
{
    mf_quiet_hdf5();
    char cerr[MI_ERRLEN];
    if (mi_config_validate(c, cerr)) {
        mi_set_error(err, "%s", cerr);
        return NULL;
    }
    /* the layers and classifier, the embeddings unless they are the
     * classifier, norms, tokenizer */
    double bytes = (double)mi_decode_weight_bytes(c) + (c->shared_classifier ? 0.0 : (double)mi_embedding_bytes(c)) +
                   4.0 * (2.0 * c->n_layers + 1) * c->dim + 64.0 * c->vocab_size + (1 << 20);
    int any_lower = c->emb_dtype != MI_F32 || c->cls_dtype != MI_F32;
    for (int l = 0; l < c->n_layers; l++)
        for (int m = 0; m < MI_N_LAYER_MATS; m++)
            any_lower |= c->dtype[l][m] != MI_F32;
    if (check_output(path, bytes, err))
        return NULL;
    mi_model_writer *w = mi_calloc(1, sizeof *w, "model writer");
    if (mi_output_begin(&w->out, path, err)) {
        free(w);
        return NULL;
    }
    w->file = H5Fcreate(w->out.tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) {
        mi_output_abort(&w->out);
        mi_set_error(err, "%s: cannot create output file (directory missing or not writable)", path);
        free(w);
        return NULL;
    }
    hid_t f = w->file;
    /* all-fp32 files stay version 1, so earlier builds still read them */
    int bad = c->family == MI_FAMILY_PATCHTST
                  ? write_int_attr(f, "format_version", MI_FORMAT_VERSION_SERIES) |
                        write_str_attr(f, "family", "patchtst") | write_int_attr(f, "dim", c->dim) |
                        write_int_attr(f, "hidden_dim", c->hidden_dim) | write_int_attr(f, "n_layers", c->n_layers) |
                        write_int_attr(f, "n_heads", c->n_heads) | write_int_attr(f, "n_kv_heads", c->n_kv_heads) |
                        write_int_attr(f, "head_dim", c->head_dim) | write_float_attr(f, "norm_eps", c->norm_eps) |
                        write_int_attr(f, "patch_len", c->patch_len) |
                        write_int_attr(f, "patch_stride", c->patch_stride) |
                        write_int_attr(f, "lookback", c->lookback) | write_int_attr(f, "horizon", c->horizon) |
                        write_int_attr(f, "n_channels", c->n_channels) |
                        write_int_attr(f, "synthetic", c->synthetic) | write_str_attr(f, "name", c->name)
                  : write_int_attr(f, "format_version", mf_needs_traits(c) ? MI_FORMAT_VERSION_FAMILY
                                                        : any_lower      ? MI_FORMAT_VERSION
                                                                         : 1) | write_int_attr(f, "dim", c->dim) |
              write_int_attr(f, "hidden_dim", c->hidden_dim) | write_int_attr(f, "n_layers", c->n_layers) |
              write_int_attr(f, "n_heads", c->n_heads) | write_int_attr(f, "n_kv_heads", c->n_kv_heads) |
              write_int_attr(f, "head_dim", c->head_dim) | write_int_attr(f, "vocab_size", c->vocab_size) |
              write_int_attr(f, "seq_len", c->seq_len) | write_float_attr(f, "rope_theta", c->rope_theta) |
              write_float_attr(f, "norm_eps", c->norm_eps) |
              write_int_attr(f, "shared_classifier", c->shared_classifier) |
              write_int_attr(f, "synthetic", c->synthetic) | write_str_attr(f, "name", c->name);
    if (c->family != MI_FAMILY_PATCHTST && mf_needs_traits(c)) {
        mf_trait t[MF_N_TRAITS];
        mf_traits((mi_config *)c, t);
        bad |= write_str_attr(f, "family", mi_family_name(c->family));
        for (int i = 0; i < MF_N_TRAITS; i++)
            bad |= t[i].f ? write_float_attr(f, t[i].name, *t[i].f)
                          : write_int_attr(f, t[i].name, t[i].i ? *t[i].i : (int)*t[i].u);
    }
    if (mi_config_is_moe(c)) {
        mf_moe_attr m[MF_N_MOE_ATTRS];
        mf_moe_attrs((mi_config *)c, m);
        for (int i = 0; i < MF_N_MOE_ATTRS; i++)
            bad |= write_int_attr(f, m[i].name, *m[i].v);
        bad |= write_int_attr(f, "norm_topk_prob", c->norm_topk_prob);
    }
    hid_t g = H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        bad = 1;
    for (int l = 0; l < c->n_layers && !bad; l++) {
        char name[64];
        snprintf(name, sizeof name, "%03d", l);
        hid_t lg = H5Gcreate2(g, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (lg < 0)
            bad = 1;
        else
            H5Gclose(lg);
    }
    if (g >= 0)
        H5Gclose(g);
    if (bad) {
        mi_set_error(err, "%s: writing the model header failed", path);
        mi_model_writer_abort(w);
        return NULL;
    }
    return w;
}

/* Transpose a [rows, cols] matrix of es-byte elements into out [cols, rows]. */
static void transpose_bytes(const void *in, size_t rows, size_t cols, size_t es, void *out)
{
    const unsigned char *a = in;
    unsigned char *b = out;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            memcpy(b + (j * rows + i) * es, a + (i * cols + j) * es, es);
}

static int write_dataset(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, int rank, const hsize_t *dims,
                         const void *data)
{
    hid_t s = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(loc, name, file_type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = d < 0 ? -1 : H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (d >= 0)
        H5Dclose(d);
    H5Sclose(s);
    return r < 0 ? -1 : 0;
}

static int write_i64_pair_attr(hid_t loc, const char *name, long long a, long long b)
{
    hsize_t two = 2;
    long long v[2] = {a, b};
    hid_t s = H5Screate_simple(1, &two, NULL);
    hid_t at = H5Acreate2(loc, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = at < 0 ? -1 : H5Awrite(at, H5T_NATIVE_LLONG, v);
    if (at >= 0)
        H5Aclose(at);
    H5Sclose(s);
    return r < 0 ? -1 : 0;
}

/* Store values already in dtype's in-memory layout (tensor.h): q holds the
 * rows (fp32/fp16 values, or block values), d the block scales. */
static int put_encoded(mi_model_writer *w, const char *name, int dtype, const void *q, const uint16_t *d,
                       size_t rows, size_t cols, int transpose, char *err)
{
    int rank = cols == 1 && !transpose ? 1 : 2;
    hsize_t dims[2] = {transpose ? cols : rows, transpose ? rows : cols};
    int bad = 0;
    if (dtype == MI_F32 || dtype == MI_F16) {
        size_t n = rows * cols, es = dtype == MI_F32 ? 4 : 2;
        const void *out = q;
        void *tr = NULL;
        if (transpose) {
            out = tr = mi_malloc(n * es, "transpose buffer");
            transpose_bytes(q, rows, cols, es, tr);
        }
        hid_t ft = dtype == MI_F32 ? H5T_IEEE_F32LE : f16_type();
        bad = write_dataset(w->file, name, ft, ft, rank, dims, out);
        if (!bad && dtype == MI_F16) {
            hid_t ds = H5Dopen2(w->file, name, H5P_DEFAULT);
            bad = ds < 0 || write_str_attr(ds, "dtype", "fp16");
            if (ds >= 0)
                H5Dclose(ds);
        }
        free(tr);
    } else if (mi_dtype_kquant(dtype)) {
        /* super-blocks as they are, uint8 [rows, row bytes]; transposed, stored row k holds
         * super-block k of every row ([cols/256, rows * block bytes]; see model_file.h) */
        size_t qrow = mi_dtype_q_row_bytes(dtype, cols), nsb = cols / MI_QK_K, bb = mi_dtype_q_row_bytes(dtype, MI_QK_K);
        hsize_t qd[2] = {rows, qrow};
        const void *qo = q;
        void *qt = NULL;
        if (transpose) {
            qo = qt = mi_malloc(rows * qrow + 1, "transpose buffer");
            transpose_bytes(q, rows, nsb, bb, qt);
            qd[0] = nsb, qd[1] = rows * bb;
        }
        hid_t g = H5Gcreate2(w->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad = g < 0;
        if (!bad) {
            bad = write_str_attr(g, "dtype", mi_dtype_name(dtype)) ||
                  write_i64_pair_attr(g, "shape", (long long)dims[0], (long long)dims[1]) ||
                  write_int_attr(g, "block_size", MI_QK_K) || write_int_attr(g, "blocked_axis", transpose ? 0 : 1) ||
                  write_dataset(g, "qs", H5T_STD_U8LE, H5T_NATIVE_UCHAR, 2, qd, qo);
            H5Gclose(g);
        }
        free(qt);
    } else {
        size_t qrow = mi_dtype_q_row_bytes(dtype, cols), nb = cols / MI_QK;
        hsize_t qd[2] = {rows, qrow}, sd[2] = {rows, nb};
        const void *qo = q, *so = d;
        void *qt = NULL, *st = NULL;
        if (transpose) { /* blocks run down the stored rows; see model_file.h */
            qo = qt = mi_malloc(rows * qrow, "transpose buffer");
            so = st = mi_malloc(rows * nb * 2, "transpose buffer");
            transpose_bytes(q, rows, qrow, 1, qt);
            transpose_bytes(d, rows, nb, 2, st);
            qd[0] = qrow, qd[1] = rows, sd[0] = nb, sd[1] = rows;
        }
        hid_t g = H5Gcreate2(w->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad = g < 0;
        if (!bad) {
            bad = write_str_attr(g, "dtype", mi_dtype_name(dtype)) ||
                  write_i64_pair_attr(g, "shape", (long long)dims[0], (long long)dims[1]) ||
                  write_int_attr(g, "block_size", MI_QK) || write_int_attr(g, "blocked_axis", transpose ? 0 : 1) ||
                  write_dataset(g, "qs", dtype == MI_Q8_0 ? H5T_STD_I8LE : H5T_STD_U8LE,
                                dtype == MI_Q8_0 ? H5T_NATIVE_SCHAR : H5T_NATIVE_UCHAR, 2, qd, qo) ||
                  write_dataset(g, "d", f16_type(), f16_type(), 2, sd, so);
            H5Gclose(g);
        }
        free(qt);
        free(st);
    }
    if (bad)
        return mi_set_error(err, "%s: writing tensor '%s' failed (disk full?)", w->out.path, name);
    return 0;
}

/* A blocked dtype's rows must be whole blocks (32 values, or a k-quant's
 * super-blocks of 256): one line naming the tensor, else 0. */
static int whole_blocks(const mi_model_writer *w, const char *name, int dtype, size_t cols, char *err)
{
    int b = mi_dtype_block(dtype);
    if (b <= 0)
        return mi_set_error(err, "%s: tensor '%s' has unknown dtype %d", w->out.path, name, dtype);
    if (cols % (size_t)b != 0)
        return mi_set_error(err, "%s: tensor '%s' has rows of %zu values, not whole %s of %d for %s", w->out.path,
                            name, cols, mi_dtype_kquant(dtype) ? "super-blocks" : "blocks", b, mi_dtype_name(dtype));
    return 0;
}

int mi_model_writer_put_tensor(mi_model_writer *w, const char *name, int dtype, const float *data, size_t rows,
                               size_t cols, int transpose, char *err)
{
    /* a non-finite weight turns every logit it reaches into NaN: refuse to store one */
    for (size_t i = 0; i < rows * cols; i++)
        if (!isfinite(data[i]))
            return mi_set_error(err, "%s: tensor '%s' holds a non-finite value (%g at row %zu, column %zu); refusing "
                                     "to write it", w->out.path, name, (double)data[i], i / cols, i % cols);
    if (whole_blocks(w, name, dtype, cols, err))
        return -1;
    size_t qrow = mi_dtype_q_row_bytes(dtype, cols), nb = mi_dtype_split_scales(dtype) ? cols / MI_QK : 0;
    unsigned char *q = mi_malloc(rows * qrow + 1, "tensor buffer");
    uint16_t *d = mi_malloc(rows * nb * 2 + 2, "block scales");
    for (size_t r = 0; r < rows; r++)
        mi_quantize_row(dtype, data + r * cols, (int)cols, q + r * qrow, d + r * nb);
    int rc = put_encoded(w, name, dtype, q, d, rows, cols, transpose, err);
    free(q);
    free(d);
    return rc;
}

int mi_model_writer_put_encoded(mi_model_writer *w, const char *name, int dtype, const void *q, const uint16_t *d,
                                size_t rows, size_t cols, int transpose, char *err)
{
    if (whole_blocks(w, name, dtype, cols, err))
        return -1;
    /* every value finite, decoded row by row (a NaN scale or value would reach every logit) */
    float *row = mi_malloc(cols * sizeof(float), "row buffer");
    size_t qrow = mi_dtype_q_row_bytes(dtype, cols), nb = mi_dtype_split_scales(dtype) ? cols / MI_QK : 0;
    int rc = 0;
    for (size_t r = 0; r < rows && !rc; r++) {
        mi_dequantize_row(dtype, (const unsigned char *)q + r * qrow, d ? d + r * nb : NULL, (int)cols, row);
        for (size_t i = 0; i < cols && !rc; i++)
            if (!isfinite(row[i]))
                rc = mi_set_error(err, "%s: tensor '%s' holds a non-finite value (%g at row %zu, column %zu); "
                                       "refusing to write it", w->out.path, name, (double)row[i], r, i);
    }
    free(row);
    return rc ? rc : put_encoded(w, name, dtype, q, d, rows, cols, transpose, err);
}

int mi_model_writer_put(mi_model_writer *w, const char *name, const float *data, size_t rows, size_t cols,
                        int transpose, char *err)
{
    return mi_model_writer_put_tensor(w, name, MI_F32, data, rows, cols, transpose, err);
}

/* A BPE-kind tokenizer: its stored form in /tokenizer/spec (u8 JSON bytes),
 * ids of BOS and EOS as attributes for h5dump's reader. */
static int put_tokenizer_spec(mi_model_writer *w, const mi_tokenizer *tok, char *err)
{
    size_t n = 0;
    char *text = mi_tokenizer_serialize(tok, &n, err);
    if (!text)
        return -1;
    hid_t g = H5Gcreate2(w->file, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int bad = g < 0;
    if (!bad) {
        bad |= write_int_attr(g, "bos_id", tok->bos_id) || write_int_attr(g, "eos_id", tok->eos_id);
        hsize_t dim = n;
        hid_t s = H5Screate_simple(1, &dim, NULL);
        hid_t d = H5Dcreate2(g, "spec", H5T_STD_U8LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad |= d < 0 || H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) < 0;
        if (d >= 0)
            H5Dclose(d);
        H5Sclose(s);
        H5Gclose(g);
    }
    free(text);
    return bad ? mi_set_error(err, "%s: writing the tokenizer failed", w->out.path) : 0;
}

int mi_model_writer_put_tokenizer(mi_model_writer *w, const mi_tokenizer *tok, char *err)
{
    if (tok->kind != MI_TOK_LLAMA2C)
        return put_tokenizer_spec(w, tok, err);
    size_t V = (size_t)tok->vocab_size;
    int64_t *off = mi_malloc((V + 1) * sizeof(int64_t), "tokenizer offsets");
    off[0] = 0;
    for (size_t i = 0; i < V; i++)
        off[i + 1] = off[i] + tok->piece_len[i];
    unsigned char *bytes = mi_malloc((size_t)off[V] + 1, "tokenizer bytes");
    for (size_t i = 0; i < V; i++)
        memcpy(bytes + off[i], tok->pieces[i], (size_t)tok->piece_len[i]);
    int bad = 0;
    hid_t g = H5Gcreate2(w->file, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bad |= g < 0;
    if (!bad) {
        bad |= write_int_attr(g, "max_token_length", tok->max_token_length);
        bad |= write_int_attr(g, "bos_id", tok->bos_id);
        bad |= write_int_attr(g, "eos_id", tok->eos_id);
        bad |= write_int_attr(g, "byte_fallback_first_id", MI_TOK_BYTE0);
        hsize_t n = V;
        hid_t s = H5Screate_simple(1, &n, NULL);
        hid_t d = H5Dcreate2(g, "scores", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad |= d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok->scores) < 0;
        if (d >= 0) H5Dclose(d);
        H5Sclose(s);
        n = V + 1;
        s = H5Screate_simple(1, &n, NULL);
        d = H5Dcreate2(g, "offsets", H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad |= d < 0 || H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off) < 0;
        if (d >= 0) H5Dclose(d);
        H5Sclose(s);
        n = (hsize_t)off[V];
        s = H5Screate_simple(1, &n, NULL);
        d = H5Dcreate2(g, "bytes", H5T_STD_U8LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad |= d < 0 || H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes) < 0;
        if (d >= 0) H5Dclose(d);
        H5Sclose(s);
        H5Gclose(g);
    }
    free(off);
    free(bytes);
    return bad ? mi_set_error(err, "%s: writing the tokenizer failed", w->out.path) : 0;
}

int mi_model_writer_commit(mi_model_writer *w, char *err)
{
    int rc = 0;
    if (H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0 || H5Fclose(w->file) < 0) {
        rc = mi_set_error(err, "%s: finishing the output file failed (disk full?)", w->out.path);
        mi_output_abort(&w->out);
    } else {
        rc = mi_output_commit(&w->out, err);
    }
    free(w);
    return rc;
}

void mi_model_writer_abort(mi_model_writer *w)
{
    if (!w)
        return;
    H5Fclose(w->file);
    mi_output_abort(&w->out);
    free(w);
}

int mi_model_writer_put_text(mi_model_writer *w, const char *name, const char *text, char *err)
{
    hsize_t n = strlen(text);
    int bad = write_dataset(w->file, name, H5T_STD_U8LE, H5T_NATIVE_UCHAR, 1, &n, text);
    return bad ? mi_set_error(err, "%s: writing '%s' failed (disk full?)", w->out.path, name) : 0;
}
