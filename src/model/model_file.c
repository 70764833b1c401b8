/* HDF5 model file reading (see model_file.h): opening and its config,
 * rows and hyperslabs of tensors, pruning masks and the tokenizer. The
 * checks at open are in model_file_check.c, writing in model_file_write.c. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/model_file.h"

#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "model_file_internal.h"

/* ---------------------------------------------------------------- opening */

/* H5Ewalk2 callback: did HDF5 fail to take its file lock? */
static herr_t find_lock(unsigned n, const H5E_error2_t *e, void *found)
{
    (void)n;
    /* "unable to lock file, errno = 11" (held by another process), ENOLCK or
     * ENOSYS (a file system without locks); not "sblock" of a truncated file */
    if (e->desc && strstr(e->desc, "unable to lock"))
        *(int *)found = 1;
    return 0;
}

/* Why H5Fopen failed, from HDF5's error stack: a lock it could not take is
 * an environment fault (another process writing the file, or a file system
 * without locks such as some NFS mounts), not a damaged file. */
static void open_failed(const char *path, char *err)
{
    int locked = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, find_lock, &locked);
    if (locked)
        mi_set_error(err, "%s: HDF5 cannot lock the file: another process holds it open for writing, or the file "
                          "system has no file locks (NFS); if nothing is writing it, set HDF5_USE_FILE_LOCKING=FALSE",
                     path);
    else
        mi_set_error(err, "%s: cannot open HDF5 file (truncated or corrupt)", path);
}

/* Version 3: the time-series family's attributes (docs/patchtst.md). Its
 * head and patches fill the vocabulary and context fields, so the plans,
 * programs and runtime size their buffers as for a language model. */
static int read_patchtst_config(hid_t f, mi_config *c, const char *path, char *err)
{
    char fam[32] = "";
    if (mf_read_str_attr(f, "family", fam, sizeof fam) || strcmp(fam, "patchtst") != 0)
        return mi_set_error(err, "%s: format_version 3 needs the attribute family = \"patchtst\"%s%s", path,
                            fam[0] ? ", not " : " (missing)", fam);
    mi_config_set_family(c, MI_FAMILY_PATCHTST);
    if (mf_read_int_attr(f, "dim", &c->dim, path, err) || mf_read_int_attr(f, "hidden_dim", &c->hidden_dim, path, err) ||
        mf_read_int_attr(f, "n_layers", &c->n_layers, path, err) ||
        mf_read_int_attr(f, "n_heads", &c->n_heads, path, err) ||
        mf_read_int_attr(f, "n_kv_heads", &c->n_kv_heads, path, err) ||
        mf_read_int_attr(f, "head_dim", &c->head_dim, path, err) ||
        mf_read_float_attr(f, "norm_eps", &c->norm_eps, path, err) ||
        mf_read_int_attr(f, "patch_len", &c->patch_len, path, err) ||
        mf_read_int_attr(f, "patch_stride", &c->patch_stride, path, err) ||
        mf_read_int_attr(f, "lookback", &c->lookback, path, err) ||
        mf_read_int_attr(f, "horizon", &c->horizon, path, err) ||
        mf_read_int_attr(f, "n_channels", &c->n_channels, path, err) ||
        mf_read_int_attr(f, "synthetic", &c->synthetic, path, err))
        return -1;
    c->vocab_size = c->horizon;
    c->seq_len = c->patch_len > 0 && c->patch_stride > 0 && c->lookback >= c->patch_len
                     ? (c->lookback - c->patch_len) / c->patch_stride + 1
                     : 0;
    c->rope_theta = 10000.0f;
    return 0;
}

/* Version 4: the family by name and its traits (model_file.h). */
static int read_family(hid_t f, mi_config *c, const char *path, char *err)
{
    char fam[32] = "";
    int family = mf_read_str_attr(f, "family", fam, sizeof fam) ? -1 : mi_family_parse(fam);
    if (family < 0 || family == MI_FAMILY_PATCHTST)
        return mi_set_error(err, "%s: format_version 4 needs the attribute family, one of %s%s%s", path,
                            mi_family_names(), fam[0] ? "; it says " : " (missing)", fam);
    mi_config_set_family(c, family);
    mf_trait t[MF_N_TRAITS];
    mf_traits(c, t);
    for (int i = 0; i < MF_N_TRAITS; i++) {
        int v = 0;
        if (t[i].f ? mf_read_float_attr(f, t[i].name, t[i].f, path, err)
                   : mf_read_int_attr(f, t[i].name, t[i].i ? t[i].i : &v, path, err))
            return -1;
        if (t[i].u) {
            if (v < 0 || v > 255)
                return mi_set_error(err, "%s: attribute %s = %d is out of range", path, t[i].name, v);
            *t[i].u = (unsigned char)v;
        }
    }
    if (family != MI_FAMILY_QWEN2MOE && family != MI_FAMILY_QWEN3MOE)
        return 0;
    mf_moe_attr m[MF_N_MOE_ATTRS];
    mf_moe_attrs(c, m);
    for (int i = 0; i < MF_N_MOE_ATTRS; i++)
        if (mf_read_int_attr(f, m[i].name, m[i].v, path, err))
            return -1;
    int norm = 0;
    if (mf_read_int_attr(f, "norm_topk_prob", &norm, path, err))
        return -1;
    if (norm != 0 && norm != 1)
        return mi_set_error(err, "%s: attribute norm_topk_prob = %d is not 0 or 1", path, norm);
    c->norm_topk_prob = (unsigned char)norm;
    return 0;
}

static mi_model_file *model_open(const char *path, mi_config *cfg, char *err)
{
    mf_quiet_hdf5();
    if (mi_foreign_format(path, err) || mi_check_input_file(path, "model file", err))
        return NULL;
    if (H5Fis_hdf5(path) <= 0) {
        mi_set_error(err, "%s: not an HDF5 file, or truncated/corrupt (use `meshinfer convert` to make one)",
                     path);
        return NULL;
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        open_failed(path, err);
        return NULL;
    }
    mi_model_file *mf = mi_calloc(1, sizeof *mf, "model file");
    mf->file = f;
    snprintf(mf->path, sizeof mf->path, "%s", path);
    mi_config *c = &mf->cfg;
    int version = 0;
    if (mf_read_int_attr(f, "format_version", &version, path, err))
        goto fail;
    if (version < 1 || version > MI_FORMAT_VERSION_FAMILY) {
        mi_set_error(err, "%s: format_version %d is not supported (this build reads 1 to %d)", path, version,
                     MI_FORMAT_VERSION_FAMILY);
        goto fail;
    }
    if (version == MI_FORMAT_VERSION_FAMILY && read_family(f, c, path, err))
        goto fail;
    if (version == MI_FORMAT_VERSION_SERIES) {
        if (read_patchtst_config(f, c, path, err))
            goto fail;
    } else if (mf_read_int_attr(f, "dim", &c->dim, path, err) || mf_read_int_attr(f, "hidden_dim", &c->hidden_dim, path, err) ||
        mf_read_int_attr(f, "n_layers", &c->n_layers, path, err) ||
        mf_read_int_attr(f, "n_heads", &c->n_heads, path, err) ||
        mf_read_int_attr(f, "n_kv_heads", &c->n_kv_heads, path, err) ||
        mf_read_int_attr(f, "head_dim", &c->head_dim, path, err) ||
        mf_read_int_attr(f, "vocab_size", &c->vocab_size, path, err) ||
        mf_read_int_attr(f, "seq_len", &c->seq_len, path, err) ||
        mf_read_float_attr(f, "rope_theta", &c->rope_theta, path, err) ||
        mf_read_float_attr(f, "norm_eps", &c->norm_eps, path, err) ||
        mf_read_int_attr(f, "shared_classifier", &c->shared_classifier, path, err) ||
        mf_read_int_attr(f, "synthetic", &c->synthetic, path, err))
        goto fail;
    if (H5Aexists(f, "name") > 0 && mf_read_str_attr(f, "name", c->name, sizeof c->name) < 0) {
        /* longer than the field: keep its start */
        hid_t a = H5Aopen(f, "name", H5P_DEFAULT);
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, sizeof c->name);
        hid_t at = a >= 0 ? H5Aget_type(a) : -1;
        if (a >= 0 && mf_attr_is_single(a) && at >= 0 && H5Tis_variable_str(at) <= 0)
            H5Aread(a, t, c->name);
        c->name[sizeof c->name - 1] = '\0';
        if (at >= 0)
            H5Tclose(at);
        H5Tclose(t);
        H5Aclose(a);
    }
    /* a name is printed (info, generate's summary, serve's model id): control characters in a
     * damaged or hand-made file become '?', so none reaches a terminal as an escape sequence */
    for (char *q = c->name; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7F)
            *q = '?';
    char cerr[MI_ERRLEN];
    if (mi_config_validate(c, cerr)) {
        mi_set_error(err, "%s: %s", path, cerr);
        goto fail;
    }
    if (mf_check_all_tensors(mf, err))
        goto fail;
    if (mi_config_validate(c, cerr)) { /* now with the dtypes found */
        mi_set_error(err, "%s: %s", path, cerr);
        goto fail;
    }
    *cfg = *c;
    return mf;
fail:
    H5Fclose(f);
    free(mf);
    return NULL;
}

/* Each public function that has libhdf5 read the file runs inside the fault
 * guard (mi_fault_file_enter): libhdf5 reads lazily (headers at open, chunks
 * and attributes at each read), and any of them can be where a damaged file
 * makes it fault. Only those calls: a fault in the callers' own work between
 * reads (quantizing, converting, sending) is not the file's. */
mi_model_file *mi_model_open(const char *path, mi_config *cfg, char *err)
{
    mi_fault_file_enter(path);
    mi_model_file *mf = model_open(path, cfg, err);
    mi_fault_file_leave();
    return mf;
}

void mi_model_close(mi_model_file *mf)
{
    if (!mf)
        return;
    mi_fault_file_enter(mf->path);
    H5Fclose(mf->file);
    mi_fault_file_leave();
    free(mf);
}

/* ---------------------------------------------------------------- reading */

/* Stored rows [row0, row0+nrows) of dataset `name` into out, as floats
 * (as_float: HDF5 converts any float type) or as the file's own bytes, whose
 * row size must then be row_bytes. */
static int read_rows_in(mi_model_file *mf, const char *name, size_t row0, size_t nrows, int as_float, size_t row_bytes,
                        size_t byte0, size_t nbytes, void *out, size_t out_bytes, char *err)
{
    hid_t d = H5Lexists(mf->file, name, H5P_DEFAULT) > 0 ? H5Dopen2(mf->file, name, H5P_DEFAULT) : -1;
    if (d < 0)
        return mi_set_error(err, "%s: tensor '%s' is missing", mf->path, name);
    hid_t fs = H5Dget_space(d), ft = H5Dget_type(d);
    int rank = H5Sget_simple_extent_ndims(fs);
    hsize_t dims[2] = {0, 1};
    if (rank >= 1 && rank <= 2)
        H5Sget_simple_extent_dims(fs, dims, NULL);
    size_t es = H5Tget_size(ft), have = (size_t)(rank == 2 ? dims[1] : 1) * es;
    if (as_float) /* whole rows, converted */
        byte0 = 0, nbytes = have;
    int rc = 0;
    if (rank < 1 || rank > 2 || (!as_float && have != row_bytes)) {
        rc = mi_set_error(err, "%s: tensor '%s' has rows of %zu bytes, expected %zu", mf->path, name, have, row_bytes);
    } else if (row0 + nrows > dims[0]) {
        rc = mi_set_error(err, "%s: rows [%zu, %zu) of '%s' are outside its %llu rows", mf->path, row0, row0 + nrows,
                          name, (unsigned long long)dims[0]);
    } else if (as_float && nrows * (nbytes / es) * sizeof(float) > out_bytes) {
        /* the file decides a row's length: never more than the caller's buffer holds */
        rc = mi_set_error(err, "%s: rows of '%s' hold %zu values each; %zu rows do not fit the %zu floats given",
                          mf->path, name, nbytes / es, nrows, out_bytes / sizeof(float));
    } else if (byte0 % es || nbytes % es || byte0 + nbytes > have || (rank == 1 && nbytes != have)) {
        rc = mi_set_error(err, "%s: bytes [%zu, %zu) of the rows of '%s' are not whole elements inside them", mf->path,
                          byte0, byte0 + nbytes, name);
    } else if (nrows > 0 && nbytes > 0) {
        hsize_t start[2] = {row0, byte0 / es}, count[2] = {nrows, rank == 2 ? nbytes / es : 1};
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        hid_t ms = H5Screate_simple(rank, count, NULL);
        /* raw: the file's own type as the memory type, so bytes arrive unconverted */
        if (H5Dread(d, as_float ? H5T_NATIVE_FLOAT : ft, ms, fs, H5P_DEFAULT, out) < 0)
            rc = mi_set_error(err, "%s: reading tensor '%s' failed (file truncated or corrupt)", mf->path, name);
        H5Sclose(ms);
    }
    H5Tclose(ft);
    H5Sclose(fs);
    H5Dclose(d);
    return rc;
}

static int read_rows(mi_model_file *mf, const char *name, size_t row0, size_t nrows, int as_float, size_t row_bytes,
                     size_t byte0, size_t nbytes, void *out, size_t out_bytes, char *err)
{
    mi_fault_file_enter(mf->path);
    int rc = read_rows_in(mf, name, row0, nrows, as_float, row_bytes, byte0, nbytes, out, out_bytes, err);
    mi_fault_file_leave();
    return rc;
}

int mi_model_read_rows(mi_model_file *mf, const char *name, size_t row0, size_t nrows, float *out, size_t out_cap,
                       char *err)
{
    return read_rows(mf, name, row0, nrows, 1, 0, 0, 0, out, out_cap * sizeof(float), err);
}

int mi_model_read_raw(mi_model_file *mf, const char *name, size_t row0, size_t nrows, size_t row_bytes, void *out,
                      char *err)
{
    return read_rows(mf, name, row0, nrows, 0, row_bytes, 0, row_bytes, out, (size_t)-1, err);
}

int mi_model_read_raw_cols(mi_model_file *mf, const char *name, size_t row0, size_t nrows, size_t row_bytes,
                           size_t byte0, size_t nbytes, void *out, char *err)
{
    return read_rows(mf, name, row0, nrows, 0, row_bytes, byte0, nbytes, out, (size_t)-1, err);
}

static int read_masks(mi_model_file *mf, unsigned char *mask[4], double *ratio, int *magnitude, int *ranks,
                      char *err)
{
    const mi_config *c = &mf->cfg;
    if (H5Lexists(mf->file, "somegather", H5P_DEFAULT) <= 0)
        return 0;
    hid_t o = H5Oopen(mf->file, "somegather", H5P_DEFAULT);
    H5I_type_t kind = o >= 0 ? H5Iget_type(o) : H5I_BADID;
    if (o >= 0)
        H5Oclose(o);
    if (kind != H5I_GROUP)
        return mi_set_error(err, "%s: /somegather is not a group (the pruning masks, docs/patchtst.md)", mf->path);
    hid_t g = H5Gopen2(mf->file, "somegather", H5P_DEFAULT);
    if (g < 0)
        return mi_set_error(err, "%s: cannot open the group /somegather", mf->path);
    float r = 0;
    char mode[32] = "";
    int rc = 0;
    if (H5Aexists(g, "ranks") <= 0 || H5Aexists(g, "prune") <= 0)
        rc = mi_set_error(err, "%s: /somegather needs the attributes ranks and prune (docs/patchtst.md)", mf->path);
    if (!rc)
        rc = mf_read_int_attr(g, "ranks", ranks, mf->path, err) || mf_read_float_attr(g, "prune", &r, mf->path, err);
    if (!rc && (mf_read_str_attr(g, "prune_mode", mode, sizeof mode) || (strcmp(mode, "aware") && strcmp(mode, "magnitude"))))
        rc = mi_set_error(err, "%s: /somegather needs prune_mode \"aware\" or \"magnitude\"", mf->path);
    H5Gclose(g);
    if (rc)
        return -1;
    if (!(r >= 0 && r < 1) || *ranks < 1)
        return mi_set_error(err, "%s: /somegather has prune = %g and ranks = %d (needs [0, 1) and >= 1)", mf->path,
                            (double)r, *ranks);
    *ratio = r;
    *magnitude = !strcmp(mode, "magnitude");
    static const char *names[4] = {"keep_attn_in", "keep_heads", "keep_ffn_in", "keep_hidden"};
    for (int x = 0; x < 4; x++) {
        size_t w = (size_t)(x == 3 ? c->hidden_dim : c->dim);
        char nm[64];
        snprintf(nm, sizeof nm, "somegather/%s", names[x]);
        if (mf_check_dataset(mf->file, nm, 2, (hsize_t)c->n_layers, (hsize_t)w, H5T_NATIVE_UCHAR, mf->path, err) ||
            mi_model_read_raw(mf, nm, 0, (size_t)c->n_layers, w, mask[x], err))
            return -1;
        for (size_t i = 0; i < (size_t)c->n_layers * w; i++)
            if (mask[x][i] > 1)
                return mi_set_error(err, "%s: %s holds %d; a mask holds 0 or 1", mf->path, nm, mask[x][i]);
    }
    return 1;
}

int mi_model_read_masks(mi_model_file *mf, unsigned char *mask[4], double *ratio, int *magnitude, int *ranks,
                        char *err)
{
    mi_fault_file_enter(mf->path);
    int rc = read_masks(mf, mask, ratio, magnitude, ranks, err);
    mi_fault_file_leave();
    return rc;
}

static int read_t(mi_model_file *mf, const char *name, size_t row0, size_t nrows, float *out, char *err)
{
    hid_t d = H5Dopen2(mf->file, name, H5P_DEFAULT);
    if (d < 0)
        return mi_set_error(err, "%s: tensor '%s' is missing", mf->path, name);
    hid_t fs = H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    H5Sget_simple_extent_dims(fs, dims, NULL);
    H5Sclose(fs);
    H5Dclose(d);
    size_t n = (size_t)dims[1];
    float *tmp = mi_malloc(nrows * n * sizeof(float), "transposed tensor staging");
    int rc = mi_model_read_rows(mf, name, row0, nrows, tmp, nrows * n, err);
    if (rc == 0)
        for (size_t i = 0; i < nrows; i++)
            for (size_t j = 0; j < n; j++)
                out[j * nrows + i] = tmp[i * n + j];
    free(tmp);
    return rc;
}

int mi_model_read_t(mi_model_file *mf, const char *name, size_t row0, size_t nrows, float *out, char *err)
{
    mi_fault_file_enter(mf->path);
    int rc = read_t(mf, name, row0, nrows, out, err);
    mi_fault_file_leave();
    return rc;
}

/* /tokenizer/spec: a BPE-kind tokenizer's stored form (tokenizer.h), UTF-8
 * JSON bytes. Its vocabulary may be smaller than the embedding's rows
 * (Qwen pads vocab_size), never larger. */
static int read_tokenizer_spec(mi_model_file *mf, mi_tokenizer *tok, char *err)
{
    hid_t d = H5Dopen2(mf->file, "tokenizer/spec", H5P_DEFAULT);
    hid_t s = d < 0 ? -1 : H5Dget_space(d), t = d < 0 ? -1 : H5Dget_type(d);
    hsize_t n = 0;
    int ok = s >= 0 && H5Sget_simple_extent_ndims(s) == 1 && H5Sget_simple_extent_dims(s, &n, NULL) == 1 &&
             n > 0 && n < ((hsize_t)1 << 30) && H5Tget_class(t) == H5T_INTEGER && mf_type_is_number(t);
    if (t >= 0)
        H5Tclose(t);
    char *text = ok ? mi_malloc((size_t)n + 1, "stored tokenizer") : NULL;
    ok = ok && H5Dread(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) >= 0;
    if (s >= 0)
        H5Sclose(s);
    if (d >= 0)
        H5Dclose(d);
    int rc = -1;
    if (!ok) {
        mi_set_error(err, "%s: /tokenizer/spec is not a readable 1-D byte dataset (corrupt file)", mf->path);
    } else {
        text[n] = '\0';
        char name[4200];
        snprintf(name, sizeof name, "%s: /tokenizer/spec", mf->path);
        rc = mi_tokenizer_deserialize(tok, text, (size_t)n, name, err);
        if (rc == 0 && mi_tokenizer_check_rows(tok, mf->cfg.vocab_size, mf->path, err)) {
            rc = -1;
            mi_tokenizer_free(tok);
        }
    }
    free(text);
    return rc;
}

static int model_read_tokenizer(mi_model_file *mf, mi_tokenizer *tok, char *err);

/* /tokenizer's id attributes (bos_id, eos_id, byte_fallback_first_id): the
 * reader takes the ids from the tokenizer itself (the llama2.c format fixes
 * them; a spec stores its own), so an attribute that says otherwise is a
 * damaged or hand-edited file, refused rather than silently ignored. */
static int check_tokenizer_ids(mi_model_file *mf, const mi_tokenizer *tok, char *err)
{
    int llama2c = tok->kind == MI_TOK_LLAMA2C;
    const char *names[] = {"bos_id", "eos_id", "byte_fallback_first_id"};
    int want[] = {tok->bos_id, tok->eos_id, MI_TOK_BYTE0}, rc = 0;
    hid_t g = H5Gopen2(mf->file, "tokenizer", H5P_DEFAULT);
    if (g < 0)
        return mi_set_error(err, "%s: cannot open the /tokenizer group (corrupt file)", mf->path);
    for (int i = 0; i < (llama2c ? 3 : 2) && !rc; i++) {
        int v;
        if (H5Aexists(g, names[i]) <= 0)
            continue;
        char where[64];
        snprintf(where, sizeof where, "tokenizer/%s", names[i]);
        if (mf_read_int_attr(g, names[i], &v, mf->path, err))
            rc = -1;
        else if (v != want[i])
            rc = mi_set_error(err, "%s: attribute '%s' is %d but the tokenizer's %s is %d (%s)", mf->path, where, v,
                              i == 0 ? "BOS" : i == 1 ? "EOS" : "first byte-fallback id", want[i],
                              llama2c ? "a llama2.c tokenizer has BOS 1, EOS 2 and byte pieces from id 3"
                                      : "the stored spec gives it; -1 is none");
    }
    H5Gclose(g);
    return rc;
}

int mi_model_read_tokenizer(mi_model_file *mf, mi_tokenizer *tok, char *err)
{
    mi_fault_file_enter(mf->path);
    int rc = model_read_tokenizer(mf, tok, err);
    if (!rc && check_tokenizer_ids(mf, tok, err)) {
        mi_tokenizer_free(tok);
        rc = -1;
    }
    mi_fault_file_leave();
    return rc;
}

static int model_read_tokenizer(mi_model_file *mf, mi_tokenizer *tok, char *err)
{
    const mi_config *c = &mf->cfg;
    if (H5Lexists(mf->file, "tokenizer", H5P_DEFAULT) <= 0)
        return mi_set_error(err, "%s: the model has no /tokenizer group", mf->path);
    if (H5Lexists(mf->file, "tokenizer/spec", H5P_DEFAULT) > 0)
        return read_tokenizer_spec(mf, tok, err);
    size_t V = (size_t)c->vocab_size;
    if (mf_check_dataset(mf->file, "tokenizer/scores", 1, V, 0, H5T_NATIVE_FLOAT, mf->path, err) ||
        mf_check_dataset(mf->file, "tokenizer/offsets", 1, V + 1, 0, 0, mf->path, err))
        return -1;
    float *scores = mi_malloc(V * sizeof(float), "tokenizer scores");
    int64_t *off = mi_malloc((V + 1) * sizeof(int64_t), "tokenizer offsets");
    unsigned char *bytes = NULL;
    const char **pieces = NULL;
    int *lens = NULL;
    int rc = -1;
    hid_t d = H5Dopen2(mf->file, "tokenizer/scores", H5P_DEFAULT);
    herr_t r1 = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, scores);
    H5Dclose(d);
    d = H5Dopen2(mf->file, "tokenizer/offsets", H5P_DEFAULT);
    herr_t r2 = H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off);
    H5Dclose(d);
    if (r1 < 0 || r2 < 0) {
        mi_set_error(err, "%s: reading the tokenizer failed (file truncated or corrupt)", mf->path);
        goto out;
    }
    if (off[0] != 0 || off[V] < 0 || off[V] > (int64_t)1 << 30) {
        mi_set_error(err, "%s: tokenizer offsets are corrupt", mf->path);
        goto out;
    }
    if (mf_check_dataset(mf->file, "tokenizer/bytes", 1, (hsize_t)off[V], 0, 0, mf->path, err))
        goto out;
    bytes = mi_malloc((size_t)off[V] + 1, "tokenizer bytes");
    d = H5Dopen2(mf->file, "tokenizer/bytes", H5P_DEFAULT);
    r1 = H5Dread(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes);
    H5Dclose(d);
    if (r1 < 0) {
        mi_set_error(err, "%s: reading the tokenizer failed (file truncated or corrupt)", mf->path);
        goto out;
    }
    pieces = mi_malloc(V * sizeof *pieces, "tokenizer pieces");
    lens = mi_malloc(V * sizeof *lens, "tokenizer lengths");
    for (size_t i = 0; i < V; i++) {
        if (off[i + 1] < off[i] || off[i + 1] - off[i] > 4096) {
            mi_set_error(err, "%s: tokenizer offsets are corrupt at id %zu", mf->path, i);
            goto out;
        }
        pieces[i] = (const char *)bytes + off[i];
        lens[i] = (int)(off[i + 1] - off[i]);
    }
    char terr[MI_ERRLEN];
    if (mi_tokenizer_init(tok, (int)V, pieces, lens, scores, terr)) {
        mi_set_error(err, "%s: %s", mf->path, terr);
        goto out;
    }
    rc = 0;
out:
    free(scores);
    free(off);
    free(bytes);
    free(pieces);
    free(lens);
    return rc;
}

static int read_text(mi_model_file *mf, const char *name, char **out, char *err)
{
    *out = NULL;
    if (H5Lexists(mf->file, name, H5P_DEFAULT) <= 0)
        return 1;
    hid_t d = H5Dopen2(mf->file, name, H5P_DEFAULT);
    hid_t s = d >= 0 ? H5Dget_space(d) : -1, t = d >= 0 ? H5Dget_type(d) : -1;
    hssize_t n = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
    int ok = d >= 0 && s >= 0 && H5Sget_simple_extent_ndims(s) == 1 && H5Tget_class(t) == H5T_INTEGER &&
             H5Tget_size(t) == 1 && mf_type_is_number(t) && n >= 0 && n < (1 << 26);
    char *buf = ok ? mi_malloc((size_t)n + 1, "text") : NULL;
    if (ok && n > 0 && H5Dread(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        ok = 0;
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    if (d >= 0)
        H5Dclose(d);
    if (!ok) {
        free(buf);
        return mi_set_error(err, "%s: '%s' is not a byte string of at most 64 MB", mf->path, name);
    }
    buf[n] = 0;
    if (strlen(buf) != (size_t)n) {
        free(buf);
        return mi_set_error(err, "%s: '%s' holds a NUL byte", mf->path, name);
    }
    *out = buf;
    return 0;
}

int mi_model_read_text(mi_model_file *mf, const char *name, char **out, char *err)
{
    mi_fault_file_enter(mf->path);
    int rc = read_text(mf, name, out, err);
    mi_fault_file_leave();
    return rc;
}
