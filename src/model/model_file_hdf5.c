/* The HDF5 helpers the model file's reader, checks and writer share
 * (model_file_internal.h): quiet errors, attributes and dataset checks. */
#define _POSIX_C_SOURCE 200809L
#include "model_file_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "meshinfer/common.h"

void mf_quiet_hdf5(void)
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

void mi_model_layer_name(char *buf, size_t n, int layer, const char *tensor)
{
    snprintf(buf, n, "layers/%03d/%s", layer, tensor);
}

/* 1 if attribute a holds exactly one element: H5Aread writes every element,
 * so reading an array attribute into one int would overrun it. */
int mf_attr_is_single(hid_t a)
{
    hid_t s = H5Aget_space(a);
    hssize_t n = s < 0 ? -1 : H5Sget_simple_extent_npoints(s);
    if (s >= 0)
        H5Sclose(s);
    return n == 1;
}

int mf_type_is_number(hid_t t)
{
    H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    size_t size = t >= 0 ? H5Tget_size(t) : 0, bits = 8 * size, prec = t >= 0 ? H5Tget_precision(t) : 0;
    int off = t >= 0 ? H5Tget_offset(t) : -1;
    if (size < 1 || size > 8 || prec < 1 || off < 0 || (size_t)off + prec > bits)
        return 0;
    if (cls == H5T_INTEGER)
        return 1;
    if (cls != H5T_FLOAT || size < 2)
        return 0;
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0)
        return 0;
    return spos < bits && esize >= 1 && esize <= 15 && epos + esize <= bits && msize >= 1 && msize <= 64 &&
           mpos + msize <= bits;
}

int mf_attr_is_number(hid_t a, int n)
{
    hid_t s = a >= 0 ? H5Aget_space(a) : -1, t = a >= 0 ? H5Aget_type(a) : -1;
    hssize_t k = s < 0 ? -1 : H5Sget_simple_extent_npoints(s);
    int ok = k == n && mf_type_is_number(t);
    if (s >= 0)
        H5Sclose(s);
    if (t >= 0)
        H5Tclose(t);
    return ok;
}

int mf_attr_read_whole(hid_t a, long long *v, int n)
{
    double d[8];
    if (n < 1 || n > 8 || !mf_attr_is_number(a, n) || H5Aread(a, H5T_NATIVE_DOUBLE, d) < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        /* 6.5 layers is no model: truncated it would be read as 6, not refused */
        if (!(d[i] == floor(d[i]) && fabs(d[i]) <= 9007199254740992.0))
            return -2;
        v[i] = (long long)d[i];
    }
    return 0;
}

int mf_read_int_attr(hid_t loc, const char *name, int *v, const char *path, char *err)
{
    if (H5Aexists(loc, name) <= 0)
        return mi_set_error(err, "%s: not a meshinfer model (attribute '%s' missing)", path, name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a >= 0 && !mf_attr_is_number(a, 1)) {
        H5Aclose(a);
        return mi_set_error(err, "%s: attribute '%s' is not a single number (corrupt file)", path, name);
    }
    /* read as a double so that a non-integral value is seen, not truncated by the conversion */
    double d = 0;
    herr_t r = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_DOUBLE, &d);
    if (a >= 0)
        H5Aclose(a);
    if (r < 0)
        return mi_set_error(err, "%s: cannot read attribute '%s'", path, name);
    if (!(d == floor(d) && d >= INT_MIN && d <= INT_MAX))
        return mi_set_error(err, "%s: attribute '%s' is %g, not a whole number%s", path, name, d,
                            d == floor(d) ? " within the range of an int" : "");
    *v = (int)d;
    return 0;
}

int mf_read_float_attr(hid_t loc, const char *name, float *v, const char *path, char *err)
{
    if (H5Aexists(loc, name) <= 0)
        return mi_set_error(err, "%s: not a meshinfer model (attribute '%s' missing)", path, name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a >= 0 && !mf_attr_is_number(a, 1)) {
        H5Aclose(a);
        return mi_set_error(err, "%s: attribute '%s' is not a single number (corrupt file)", path, name);
    }
    herr_t r = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_FLOAT, v);
    if (a >= 0)
        H5Aclose(a);
    return r < 0 ? mi_set_error(err, "%s: cannot read attribute '%s'", path, name) : 0;
}

/* Check that dataset `name` exists with the given dims; returns 0 or -1. */
int mf_check_dataset(hid_t file, const char *name, int rank, hsize_t d0, hsize_t d1,
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
    /* a corrupt element type would make HDF5's own conversion read or write out of bounds */
    int sane = (cls != H5T_INTEGER && cls != H5T_FLOAT) || mf_type_is_number(t);
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
    if (!sane)
        return mi_set_error(err, "%s: tensor '%s' has a corrupt element type", path, name);
    if (want_class == H5T_NATIVE_FLOAT && (cls != H5T_FLOAT || tsize != 4))
        return mi_set_error(err, "%s: tensor '%s' is not float32", path, name);
    if (want_class == H5T_NATIVE_UCHAR && (cls != H5T_INTEGER || tsize != 1))
        return mi_set_error(err, "%s: '%s' is not a mask of 8-bit integers", path, name);
    return 0;
}

/* A string attribute of up to n-1 bytes into buf; 0 if present. */
int mf_read_str_attr(hid_t loc, const char *name, char *buf, size_t n)
{
    buf[0] = '\0';
    if (H5Aexists(loc, name) <= 0)
        return -1;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t at = a >= 0 ? H5Aget_type(a) : -1;
    int rc = -1;
    if (a >= 0 && at >= 0 && H5Tget_class(at) == H5T_STRING && mf_attr_is_single(a) && H5Tis_variable_str(at) > 0) {
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
    } else if (a >= 0 && at >= 0 && H5Tget_class(at) == H5T_STRING && mf_attr_is_single(a) && H5Tget_size(at) < n) {
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

void mf_traits(mi_config *c, mf_trait t[MF_N_TRAITS])
{
    mf_trait all[MF_N_TRAITS] = {
        {"norm_type", NULL, NULL, &c->norm_type},   {"ffn_type", NULL, NULL, &c->ffn_type},
        {"rope_type", NULL, NULL, &c->rope_type},   {"qkv_bias", NULL, NULL, &c->qkv_bias},
        {"out_bias", NULL, NULL, &c->out_bias},     {"qk_norm", NULL, NULL, &c->qk_norm},
        {"post_norms", NULL, NULL, &c->post_norms}, {"pos_embed", NULL, NULL, &c->pos_embed},
        {"rope_freqs", NULL, NULL, &c->rope_freqs}, {"emb_scale", NULL, &c->emb_scale, NULL},
        {"attn_scale", NULL, &c->attn_scale, NULL}, {"rope_theta_local", NULL, &c->rope_theta_local, NULL},
        {"sliding_window", &c->sliding_window, NULL, NULL}, {"swa_period", &c->swa_period, NULL, NULL},
    };
    memcpy(t, all, sizeof all);
}

void mf_moe_attrs(mi_config *c, mf_moe_attr a[MF_N_MOE_ATTRS])
{
    mf_moe_attr all[MF_N_MOE_ATTRS] = {
        {"n_experts", &c->n_experts}, {"n_experts_used", &c->n_experts_used}, {"shared_hidden_dim", &c->shared_hidden_dim},
    };
    memcpy(a, all, sizeof all);
}

int mf_needs_traits(const mi_config *c)
{
    mi_config d = *c;
    mi_config_set_family(&d, MI_FAMILY_LLAMA);
    d.rope_freqs = 0, d.attn_scale = 0, d.rope_theta_local = 0, d.sliding_window = 0, d.swa_period = 0;
    mf_trait a[MF_N_TRAITS], b[MF_N_TRAITS];
    mf_traits((mi_config *)c, a);
    mf_traits(&d, b);
    int differ = c->family != MI_FAMILY_LLAMA;
    for (int i = 0; i < MF_N_TRAITS; i++)
        differ |= a[i].i ? *a[i].i != *b[i].i : a[i].f ? *a[i].f != *b[i].f : *a[i].u != *b[i].u;
    return differ;
}
