/* HDF5 model file reading and writing (see model_file.h). */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/model_file.h"

#include <hdf5.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/tensor.h"

struct mi_model_file {
    hid_t file;
    mi_config cfg;
    char path[4096];
};

struct mi_model_writer {
    hid_t file;
    mi_output out; /* the destination and the temporary name it is written under */
};

static void quiet_hdf5(void)
{
    static int done = 0;
    if (done)
        return;
    done = 1;
    /* No library clean-up at exit: after a failed write (disk full) HDF5
     * would close the broken file a second time and crash; every file we
     * write is closed explicitly, and the temporary one removed. */
    H5dont_atexit();
    /* HDF5 prints a multi-line error stack by default; we report one line. */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* IEEE binary16 as an HDF5 type (HDF5 1.10 predefines none): h5dump shows
 * its bit fields, and HDF5 converts it to float on reads that ask for one. */
static hid_t f16_type(void)
{
    static hid_t t = -1;
    if (t < 0) {
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

void mi_model_layer_name(char *buf, size_t n, int layer, const char *tensor)
{
    snprintf(buf, n, "layers/%03d/%s", layer, tensor);
}

/* ---------------------------------------------------------------- reading */

/* 1 if attribute a holds exactly one element: H5Aread writes every element,
 * so reading an array attribute into one int would overrun it. */
static int attr_is_single(hid_t a)
{
    hid_t s = H5Aget_space(a);
    hssize_t n = s < 0 ? -1 : H5Sget_simple_extent_npoints(s);
    if (s >= 0)
        H5Sclose(s);
    return n == 1;
}

static int read_int_attr(hid_t loc, const char *name, int *v, const char *path, char *err)
{
    if (H5Aexists(loc, name) <= 0)
        return mi_set_error(err, "%s: not a meshinfer model (attribute '%s' missing)", path, name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a >= 0 && !attr_is_single(a)) {
        H5Aclose(a);
        return mi_set_error(err, "%s: attribute '%s' is not a single value (corrupt file)", path, name);
    }
    herr_t r = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_INT, v);
    if (a >= 0)
        H5Aclose(a);
    return r < 0 ? mi_set_error(err, "%s: cannot read attribute '%s'", path, name) : 0;
}

static int read_float_attr(hid_t loc, const char *name, float *v, const char *path, char *err)
{
    if (H5Aexists(loc, name) <= 0)
        return mi_set_error(err, "%s: not a meshinfer model (attribute '%s' missing)", path, name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a >= 0 && !attr_is_single(a)) {
        H5Aclose(a);
        return mi_set_error(err, "%s: attribute '%s' is not a single value (corrupt file)", path, name);
    }
    herr_t r = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_FLOAT, v);
    if (a >= 0)
        H5Aclose(a);
    return r < 0 ? mi_set_error(err, "%s: cannot read attribute '%s'", path, name) : 0;
}

/* Check that dataset `name` exists with the given dims; returns 0 or -1. */
static int check_dataset(hid_t file, const char *name, int rank, hsize_t d0, hsize_t d1,
                         hid_t want_class, const char *path, char *err)
{
    if (H5Lexists(file, "layers", H5P_DEFAULT) < 0)
        return mi_set_error(err, "%s: cannot read file structure", path);
    /* H5Lexists on "a/b/c" fails if "a/b" is missing, so test each prefix. */
    char part[256];
    const char *p = name;
    while ((p = strchr(p, '/')) != NULL) {
        size_t n = (size_t)(p - name);
        memcpy(part, name, n);
        part[n] = '\0';
        if (H5Lexists(file, part, H5P_DEFAULT) <= 0)
            return mi_set_error(err, "%s: tensor '%s' is missing", path, name);
        p++;
    }
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
        return mi_set_error(err, "%s: tensor '%s' is missing", path, name);
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0)
        return mi_set_error(err, "%s: cannot open tensor '%s'", path, name);
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    int r = H5Sget_simple_extent_ndims(s);
    hsize_t dims[2] = {0, 0};
    if (r >= 1 && r <= 2)
        H5Sget_simple_extent_dims(s, dims, NULL);
    H5T_class_t cls = H5Tget_class(t);
    size_t tsize = H5Tget_size(t);
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(d);
    if (r != rank || dims[0] != d0 || (rank == 2 && dims[1] != d1)) {
        char got[64];
        if (r == 2)
            snprintf(got, sizeof got, "[%llu, %llu]", (unsigned long long)dims[0], (unsigned long long)dims[1]);
        else if (r == 1)
            snprintf(got, sizeof got, "[%llu]", (unsigned long long)dims[0]);
        else
            snprintf(got, sizeof got, "rank %d", r);
        if (rank == 1)
            return mi_set_error(err, "%s: tensor '%s' has shape %s, expected [%llu]", path, name, got,
                                (unsigned long long)d0);
        return mi_set_error(err, "%s: tensor '%s' has shape %s, expected [%llu, %llu]", path, name, got,
                            (unsigned long long)d0, (unsigned long long)d1);
    }
    if (want_class == H5T_NATIVE_FLOAT && (cls != H5T_FLOAT || tsize != 4))
        return mi_set_error(err, "%s: tensor '%s' is not float32", path, name);
    if (want_class == H5T_NATIVE_UCHAR && (cls != H5T_INTEGER || tsize != 1))
        return mi_set_error(err, "%s: '%s' is not a mask of 8-bit integers", path, name);
    return 0;
}

/* A string attribute of up to n-1 bytes into buf; 0 if present. */
static int read_str_attr(hid_t loc, const char *name, char *buf, size_t n)
{
    buf[0] = '\0';
    if (H5Aexists(loc, name) <= 0)
        return -1;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t at = a >= 0 ? H5Aget_type(a) : -1;
    int rc = -1;
    if (a >= 0 && at >= 0 && H5Tget_class(at) == H5T_STRING && attr_is_single(a) && H5Tis_variable_str(at) > 0) {
        /* h5py and PyTorch tools write variable-length strings by default;
         * HDF5 converts them only to variable-length memory strings */
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, H5T_VARIABLE);
        H5Tset_cset(t, H5Tget_cset(at)); /* h5py writes UTF-8; HDF5 converts no character set into another */
        char *v = NULL;
        if (H5Aread(a, t, &v) >= 0 && v) {
            snprintf(buf, n, "%s", v);
            rc = 0;
        }
        if (v)
            H5free_memory(v);
        H5Tclose(t);
    } else if (a >= 0 && at >= 0 && H5Tget_class(at) == H5T_STRING && attr_is_single(a) && H5Tget_size(at) < n) {
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, n);
        H5Tset_cset(t, H5Tget_cset(at));
        rc = H5Aread(a, t, buf) < 0 ? -1 : 0;
        H5Tclose(t);
    }
    buf[n - 1] = '\0';
    if (at >= 0)
        H5Tclose(at);
    if (a >= 0)
        H5Aclose(a);
    return rc;
}

/* Check a weight matrix stored as [d0, d1] (transposed: blocked along d0,
 * otherwise along d1) and return its dtype: a float32 or float16 dataset,
 * or a group holding the block format's values `qs` and fp16 scales `d`. */
static int check_matrix(mi_model_file *mf, const char *name, hsize_t d0, hsize_t d1, int transposed, int *dtype,
                        char *err)
{
    *dtype = MI_F32;
    if (check_dataset(mf->file, name, 2, d0, d1, 0, mf->path, err) == 0) {
        hid_t d = H5Dopen2(mf->file, name, H5P_DEFAULT), t = H5Dget_type(d);
        int cls = H5Tget_class(t);
        size_t sz = H5Tget_size(t);
        H5Tclose(t);
        H5Dclose(d);
        if (cls == H5T_FLOAT && sz == 4)
            return 0;
        if (cls == H5T_FLOAT && sz == 2) {
            *dtype = MI_F16;
            return 0;
        }
        return mi_set_error(err, "%s: tensor '%s' is neither float32 nor float16", mf->path, name);
    }
    /* not a dataset of that shape: a block-format group? */
    hid_t o = H5Lexists(mf->file, name, H5P_DEFAULT) > 0 ? H5Oopen(mf->file, name, H5P_DEFAULT) : -1;
    if (o < 0 || H5Iget_type(o) != H5I_GROUP) {
        if (o >= 0)
            H5Oclose(o);
        return -1; /* err already says what is wrong with the dataset */
    }
    char dt[16];
    int rc = read_str_attr(o, "dtype", dt, sizeof dt);
    mi_dtype t;
    if (rc) {
        H5Oclose(o);
        return mi_set_error(err, "%s: tensor '%s' is a group without a dtype attribute (q8_0 or q4_0)", mf->path,
                            name);
    }
    if (mi_dtype_parse(dt, &t) || !mi_dtype_blocked(t)) {
        H5Oclose(o);
        return mi_set_error(err, "%s: tensor '%s' is a block group with dtype '%s', not q8_0 or q4_0", mf->path, name,
                            dt);
    }
    /* the attributes that describe the layout must say what this build reads */
    int bs = 0, axis_attr = -1;
    long long shp[2] = {0, 0};
    int ok = H5Aexists(o, "block_size") > 0 && H5Aexists(o, "blocked_axis") > 0 && H5Aexists(o, "shape") > 0;
    if (ok) {
        hid_t a = H5Aopen(o, "block_size", H5P_DEFAULT);
        ok = attr_is_single(a) && H5Aread(a, H5T_NATIVE_INT, &bs) >= 0;
        H5Aclose(a);
        a = H5Aopen(o, "blocked_axis", H5P_DEFAULT);
        ok = ok && attr_is_single(a) && H5Aread(a, H5T_NATIVE_INT, &axis_attr) >= 0;
        H5Aclose(a);
        a = H5Aopen(o, "shape", H5P_DEFAULT);
        hid_t sp = H5Aget_space(a);
        ok = ok && H5Sget_simple_extent_npoints(sp) == 2 && H5Aread(a, H5T_NATIVE_LLONG, shp) >= 0;
        H5Sclose(sp);
        H5Aclose(a);
    }
    H5Oclose(o);
    if (!ok || bs != MI_QK || axis_attr != (transposed ? 0 : 1) || shp[0] != (long long)d0 || shp[1] != (long long)d1)
        return mi_set_error(err, "%s: tensor '%s' (%s) must have block_size %d, blocked_axis %d and shape [%llu, "
                                 "%llu]; its attributes say otherwise or are missing", mf->path, name, dt, MI_QK,
                            transposed ? 0 : 1, (unsigned long long)d0, (unsigned long long)d1);
    hsize_t axis = transposed ? d0 : d1;
    if (axis % MI_QK)
        return mi_set_error(err, "%s: tensor '%s' is %s but its blocked axis of %llu is not a multiple of %d",
                            mf->path, name, dt, (unsigned long long)axis, MI_QK);
    char part[160];
    hsize_t q0 = d0, q1 = d1, s0 = d0, s1 = d1;
    if (transposed) {
        q0 = t == MI_Q4_0 ? d0 / 2 : d0;
        s0 = d0 / MI_QK;
    } else {
        q1 = t == MI_Q4_0 ? d1 / 2 : d1;
        s1 = d1 / MI_QK;
    }
    snprintf(part, sizeof part, "%s/qs", name);
    if (check_dataset(mf->file, part, 2, q0, q1, 0, mf->path, err))
        return -1;
    hid_t d = H5Dopen2(mf->file, part, H5P_DEFAULT), ty = H5Dget_type(d);
    /* q8_0 values are signed bytes, q4_0's two unsigned nibbles */
    H5T_sign_t want = t == MI_Q8_0 ? H5T_SGN_2 : H5T_SGN_NONE;
    ok = H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 1 && H5Tget_sign(ty) == want;
    H5Tclose(ty);
    H5Dclose(d);
    if (!ok)
        return mi_set_error(err, "%s: tensor '%s' is not %s 8-bit integers", mf->path, part,
                            t == MI_Q8_0 ? "signed" : "unsigned");
    snprintf(part, sizeof part, "%s/d", name);
    if (check_dataset(mf->file, part, 2, s0, s1, 0, mf->path, err))
        return -1;
    d = H5Dopen2(mf->file, part, H5P_DEFAULT);
    ty = H5Dget_type(d);
    ok = H5Tget_class(ty) == H5T_FLOAT && H5Tget_size(ty) == 2;
    H5Tclose(ty);
    H5Dclose(d);
    if (!ok)
        return mi_set_error(err, "%s: tensor '%s' (block scales) is not float16", mf->path, part);
    *dtype = t;
    return 0;
}

/* The stored layers must be exactly the config's: an n_layers attribute
 * smaller than what is stored would silently run a truncated model. */
static int check_layer_count(mi_model_file *mf, char *err)
{
    hsize_t stored = 0;
    hid_t lg = H5Lexists(mf->file, "layers", H5P_DEFAULT) > 0 ? H5Gopen2(mf->file, "layers", H5P_DEFAULT) : -1;
    if (lg >= 0) {
        H5G_info_t info;
        if (H5Gget_info(lg, &info) >= 0)
            stored = info.nlinks;
        H5Gclose(lg);
    }
    if (stored != (hsize_t)mf->cfg.n_layers)
        return mi_set_error(err, "%s: the config says n_layers = %d but the file stores %llu layers under /layers",
                            mf->path, mf->cfg.n_layers, (unsigned long long)stored);
    return 0;
}

/* The time-series family's tensors (docs/patchtst.md), all float32. */
static int check_patchtst_tensors(mi_model_file *mf, char *err)
{
    mi_config *c = &mf->cfg;
    hsize_t d = (hsize_t)c->dim, h = (hsize_t)c->hidden_dim;
    hid_t F = H5T_NATIVE_FLOAT;
    if (check_dataset(mf->file, "patch_embed", 2, d, (hsize_t)c->patch_len, F, mf->path, err) ||
        check_dataset(mf->file, "patch_embed_b", 1, d, 0, F, mf->path, err) ||
        check_dataset(mf->file, "pos_embed", 2, (hsize_t)c->seq_len, d, F, mf->path, err) ||
        check_dataset(mf->file, "head", 2, (hsize_t)c->horizon, (hsize_t)c->seq_len * d, F, mf->path, err) ||
        check_dataset(mf->file, "head_b", 1, (hsize_t)c->horizon, 0, F, mf->path, err))
        return -1;
    static const struct { const char *name; int rank; int r, k; } t[] = {
        /* r, k: 0 = dim, 1 = hidden_dim */
        {"attention_norm", 1, 0, 0}, {"attention_norm_b", 1, 0, 0}, {"wq", 2, 0, 0}, {"wk", 2, 0, 0},
        {"wv", 2, 0, 0}, {"wq_b", 1, 0, 0}, {"wk_b", 1, 0, 0}, {"wv_b", 1, 0, 0}, {"wo_t", 2, 0, 0},
        {"wo_b", 1, 0, 0}, {"ffn_norm", 1, 0, 0}, {"ffn_norm_b", 1, 0, 0}, {"w1", 2, 1, 0}, {"w1_b", 1, 1, 0},
        {"w2_t", 2, 1, 0}, {"w2_b", 1, 0, 0},
    };
    char name[128];
    for (int l = 0; l < c->n_layers; l++)
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            mi_model_layer_name(name, sizeof name, l, t[i].name);
            if (check_dataset(mf->file, name, t[i].rank, t[i].r ? h : d, t[i].rank == 2 ? (t[i].k ? h : d) : 0, F,
                              mf->path, err))
                return -1;
        }
    return 0;
}

static int check_all_tensors(mi_model_file *mf, char *err)
{
    mi_config *c = &mf->cfg;
    hsize_t d = (hsize_t)c->dim, v = (hsize_t)c->vocab_size, h = (hsize_t)c->hidden_dim;
    hsize_t q = (hsize_t)c->n_heads * (hsize_t)c->head_dim, kv = (hsize_t)mi_kv_dim(c);
    hid_t F = H5T_NATIVE_FLOAT;
    int t;
    if (c->family == MI_FAMILY_PATCHTST)
        return check_layer_count(mf, err) || check_patchtst_tensors(mf, err) ? -1 : 0;
    if (check_matrix(mf, "tok_embeddings", v, d, 0, &t, err) ||
        check_dataset(mf->file, "norm", 1, d, 0, F, mf->path, err))
        return -1;
    c->emb_dtype = c->cls_dtype = (unsigned char)t;
    if (!c->shared_classifier) {
        if (check_matrix(mf, "classifier", v, d, 0, &t, err))
            return -1;
        c->cls_dtype = (unsigned char)t;
    }
    if (check_layer_count(mf, err))
        return -1;
    /* the layer matrices, in the order of the dtype table (MI_WQ ...) */
    const hsize_t rows[MI_N_LAYER_MATS] = {q, kv, kv, q, h, h, h};
    char name[128];
    for (int l = 0; l < c->n_layers; l++) {
        mi_model_layer_name(name, sizeof name, l, "attention_norm");
        if (check_dataset(mf->file, name, 1, d, 0, F, mf->path, err))
            return -1;
        mi_model_layer_name(name, sizeof name, l, "ffn_norm");
        if (check_dataset(mf->file, name, 1, d, 0, F, mf->path, err))
            return -1;
        for (int m = 0; m < MI_N_LAYER_MATS; m++) {
            mi_model_layer_name(name, sizeof name, l, mi_layer_mat_names[m]);
            if (check_matrix(mf, name, rows[m], d, m == MI_WO || m == MI_W2, &t, err))
                return -1;
            c->dtype[l][m] = (unsigned char)t;
        }
    }
    return 0;
}

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
    if (read_str_attr(f, "family", fam, sizeof fam) || strcmp(fam, "patchtst") != 0)
        return mi_set_error(err, "%s: format_version 3 needs the attribute family = \"patchtst\"%s%s", path,
                            fam[0] ? ", not " : " (missing)", fam);
    c->family = MI_FAMILY_PATCHTST;
    if (read_int_attr(f, "dim", &c->dim, path, err) || read_int_attr(f, "hidden_dim", &c->hidden_dim, path, err) ||
        read_int_attr(f, "n_layers", &c->n_layers, path, err) ||
        read_int_attr(f, "n_heads", &c->n_heads, path, err) ||
        read_int_attr(f, "n_kv_heads", &c->n_kv_heads, path, err) ||
        read_int_attr(f, "head_dim", &c->head_dim, path, err) ||
        read_float_attr(f, "norm_eps", &c->norm_eps, path, err) ||
        read_int_attr(f, "patch_len", &c->patch_len, path, err) ||
        read_int_attr(f, "patch_stride", &c->patch_stride, path, err) ||
        read_int_attr(f, "lookback", &c->lookback, path, err) ||
        read_int_attr(f, "horizon", &c->horizon, path, err) ||
        read_int_attr(f, "n_channels", &c->n_channels, path, err) ||
        read_int_attr(f, "synthetic", &c->synthetic, path, err))
        return -1;
    c->vocab_size = c->horizon;
    c->seq_len = c->patch_len > 0 && c->patch_stride > 0 && c->lookback >= c->patch_len
                     ? (c->lookback - c->patch_len) / c->patch_stride + 1
                     : 0;
    c->rope_theta = 10000.0f;
    return 0;
}

mi_model_file *mi_model_open(const char *path, mi_config *cfg, char *err)
{
    quiet_hdf5();
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
    if (read_int_attr(f, "format_version", &version, path, err))
        goto fail;
    if (version != 1 && version != MI_FORMAT_VERSION && version != MI_FORMAT_VERSION_SERIES) {
        mi_set_error(err, "%s: format_version %d is not supported (this build reads 1, %d and %d)", path, version,
                     MI_FORMAT_VERSION, MI_FORMAT_VERSION_SERIES);
        goto fail;
    }
    if (version == MI_FORMAT_VERSION_SERIES) {
        if (read_patchtst_config(f, c, path, err))
            goto fail;
    } else if (read_int_attr(f, "dim", &c->dim, path, err) || read_int_attr(f, "hidden_dim", &c->hidden_dim, path, err) ||
        read_int_attr(f, "n_layers", &c->n_layers, path, err) ||
        read_int_attr(f, "n_heads", &c->n_heads, path, err) ||
        read_int_attr(f, "n_kv_heads", &c->n_kv_heads, path, err) ||
        read_int_attr(f, "head_dim", &c->head_dim, path, err) ||
        read_int_attr(f, "vocab_size", &c->vocab_size, path, err) ||
        read_int_attr(f, "seq_len", &c->seq_len, path, err) ||
        read_float_attr(f, "rope_theta", &c->rope_theta, path, err) ||
        read_float_attr(f, "norm_eps", &c->norm_eps, path, err) ||
        read_int_attr(f, "shared_classifier", &c->shared_classifier, path, err) ||
        read_int_attr(f, "synthetic", &c->synthetic, path, err))
        goto fail;
    if (H5Aexists(f, "name") > 0 && read_str_attr(f, "name", c->name, sizeof c->name) < 0) {
        /* longer than the field: keep its start */
        hid_t a = H5Aopen(f, "name", H5P_DEFAULT);
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, sizeof c->name);
        hid_t at = a >= 0 ? H5Aget_type(a) : -1;
        if (a >= 0 && attr_is_single(a) && at >= 0 && H5Tis_variable_str(at) <= 0)
            H5Aread(a, t, c->name);
        c->name[sizeof c->name - 1] = '\0';
        if (at >= 0)
            H5Tclose(at);
        H5Tclose(t);
        H5Aclose(a);
    }
    char cerr[MI_ERRLEN];
    if (mi_config_validate(c, cerr)) {
        mi_set_error(err, "%s: %s", path, cerr);
        goto fail;
    }
    if (check_all_tensors(mf, err))
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

void mi_model_close(mi_model_file *mf)
{
    if (!mf)
        return;
    H5Fclose(mf->file);
    free(mf);
}

/* Stored rows [row0, row0+nrows) of dataset `name` into out, as floats
 * (as_float: HDF5 converts any float type) or as the file's own bytes, whose
 * row size must then be row_bytes. */
static int read_rows(mi_model_file *mf, const char *name, size_t row0, size_t nrows, int as_float, size_t row_bytes,
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

int mi_model_read_masks(mi_model_file *mf, unsigned char *mask[4], double *ratio, int *magnitude, int *ranks,
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
        rc = read_int_attr(g, "ranks", ranks, mf->path, err) || read_float_attr(g, "prune", &r, mf->path, err);
    if (!rc && (read_str_attr(g, "prune_mode", mode, sizeof mode) || (strcmp(mode, "aware") && strcmp(mode, "magnitude"))))
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
        if (check_dataset(mf->file, nm, 2, (hsize_t)c->n_layers, (hsize_t)w, H5T_NATIVE_UCHAR, mf->path, err) ||
            mi_model_read_raw(mf, nm, 0, (size_t)c->n_layers, w, mask[x], err))
            return -1;
        for (size_t i = 0; i < (size_t)c->n_layers * w; i++)
            if (mask[x][i] > 1)
                return mi_set_error(err, "%s: %s holds %d; a mask holds 0 or 1", mf->path, nm, mask[x][i]);
    }
    return 1;
}

int mi_model_read_t(mi_model_file *mf, const char *name, size_t row0, size_t nrows, float *out, char *err)
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

int mi_model_read_tokenizer(mi_model_file *mf, mi_tokenizer *tok, char *err)
{
    const mi_config *c = &mf->cfg;
    if (H5Lexists(mf->file, "tokenizer", H5P_DEFAULT) <= 0)
        return mi_set_error(err, "%s: the model has no /tokenizer group", mf->path);
    size_t V = (size_t)c->vocab_size;
    if (check_dataset(mf->file, "tokenizer/scores", 1, V, 0, H5T_NATIVE_FLOAT, mf->path, err) ||
        check_dataset(mf->file, "tokenizer/offsets", 1, V + 1, 0, 0, mf->path, err))
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
    if (check_dataset(mf->file, "tokenizer/bytes", 1, (hsize_t)off[V], 0, 0, mf->path, err))
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

/* ---------------------------------------------------------------- writing */

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
    quiet_hdf5();
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
                  : write_int_attr(f, "format_version", any_lower ? MI_FORMAT_VERSION : 1) | write_int_attr(f, "dim", c->dim) |
              write_int_attr(f, "hidden_dim", c->hidden_dim) | write_int_attr(f, "n_layers", c->n_layers) |
              write_int_attr(f, "n_heads", c->n_heads) | write_int_attr(f, "n_kv_heads", c->n_kv_heads) |
              write_int_attr(f, "head_dim", c->head_dim) | write_int_attr(f, "vocab_size", c->vocab_size) |
              write_int_attr(f, "seq_len", c->seq_len) | write_float_attr(f, "rope_theta", c->rope_theta) |
              write_float_attr(f, "norm_eps", c->norm_eps) |
              write_int_attr(f, "shared_classifier", c->shared_classifier) |
              write_int_attr(f, "synthetic", c->synthetic) | write_str_attr(f, "name", c->name);
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

int mi_model_writer_put_tensor(mi_model_writer *w, const char *name, int dtype, const float *data, size_t rows,
                               size_t cols, int transpose, char *err)
{
    int rank = cols == 1 && !transpose ? 1 : 2;
    hsize_t dims[2] = {transpose ? cols : rows, transpose ? rows : cols};
    /* a non-finite weight turns every logit it reaches into NaN: refuse to store one */
    for (size_t i = 0; i < rows * cols; i++)
        if (!isfinite(data[i]))
            return mi_set_error(err, "%s: tensor '%s' holds a non-finite value (%g at row %zu, column %zu); refusing "
                                     "to write it", w->out.path, name, (double)data[i], i / cols, i % cols);
    int bad = 0;
    if (dtype == MI_F32 || dtype == MI_F16) {
        size_t n = rows * cols, es = dtype == MI_F32 ? 4 : 2;
        void *vals = mi_malloc(n * es, "tensor buffer"), *out = vals;
        if (dtype == MI_F32)
            memcpy(vals, data, n * 4);
        else
            mi_quantize_row(MI_F16, data, (int)n, vals, NULL);
        if (transpose) {
            out = mi_malloc(n * es, "transpose buffer");
            transpose_bytes(vals, rows, cols, es, out);
        }
        hid_t ft = dtype == MI_F32 ? H5T_IEEE_F32LE : f16_type();
        bad = write_dataset(w->file, name, ft, ft, rank, dims, out);
        if (!bad && dtype == MI_F16) {
            hid_t d = H5Dopen2(w->file, name, H5P_DEFAULT);
            bad = d < 0 || write_str_attr(d, "dtype", "fp16");
            if (d >= 0)
                H5Dclose(d);
        }
        if (out != vals)
            free(out);
        free(vals);
    } else {
        if (cols % MI_QK != 0)
            return mi_set_error(err, "%s: tensor '%s' has rows of %zu values, not whole blocks of %d for %s", w->out.path,
                                name, cols, MI_QK, mi_dtype_name(dtype));
        size_t qrow = mi_dtype_q_row_bytes(dtype, cols), nb = cols / MI_QK;
        unsigned char *q = mi_malloc(rows * qrow, "quantized values");
        uint16_t *d = mi_malloc(rows * nb * 2, "block scales");
        for (size_t r = 0; r < rows; r++)
            mi_quantize_row(dtype, data + r * cols, (int)cols, q + r * qrow, d + r * nb);
        hsize_t qd[2] = {rows, qrow}, sd[2] = {rows, nb};
        void *qo = q, *so = d;
        if (transpose) { /* blocks run down the stored rows; see model_file.h */
            qo = mi_malloc(rows * qrow, "transpose buffer");
            so = mi_malloc(rows * nb * 2, "transpose buffer");
            transpose_bytes(q, rows, qrow, 1, qo);
            transpose_bytes(d, rows, nb, 2, so);
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
        if (transpose) {
            free(qo);
            free(so);
        }
        free(q);
        free(d);
    }
    if (bad)
        return mi_set_error(err, "%s: writing tensor '%s' failed (disk full?)", w->out.path, name);
    return 0;
}

int mi_model_writer_put(mi_model_writer *w, const char *name, const float *data, size_t rows, size_t cols,
                        int transpose, char *err)
{
    return mi_model_writer_put_tensor(w, name, MI_F32, data, rows, cols, transpose, err);
}

int mi_model_writer_put_tokenizer(mi_model_writer *w, const mi_tokenizer *tok, char *err)
{
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
        bad |= write_int_attr(g, "bos_id", MI_TOK_BOS);
        bad |= write_int_attr(g, "eos_id", MI_TOK_EOS);
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
