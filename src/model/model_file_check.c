/* The model file's checks at open (model_file.h): every tensor exists with
 * the shape the config implies, in a dtype this build reads, and the
 * stored layers are the config's. */
#define _POSIX_C_SOURCE 200809L
#include "model_file_internal.h"

#include <stdio.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/tensor.h"

/* Check a weight matrix stored as [d0, d1] (transposed: blocked along d0,
 * otherwise along d1) and return its dtype: a float32 or float16 dataset,
 * a group holding the block format's values `qs` and fp16 scales `d`
 * (q8_0, q4_0), or a group holding a k-quant's super-blocks `qs` (uint8
 * [d0, d1/256 * block bytes]; transposed [d0/256, d1 * block bytes]). */
static int check_matrix(mi_model_file *mf, const char *name, hsize_t d0, hsize_t d1, int transposed, int *dtype,
                        char *err)
{
    *dtype = MI_F32;
    if (mf_check_dataset(mf->file, name, 2, d0, d1, 0, mf->path, err) == 0) {
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
    int rc = mf_read_str_attr(o, "dtype", dt, sizeof dt);
    mi_dtype t;
    if (rc) {
        H5Oclose(o);
        return mi_set_error(err, "%s: tensor '%s' is a group without a dtype attribute (q8_0, q4_0, q4_K, q5_K or "
                                 "q6_K)", mf->path, name);
    }
    if (mi_dtype_parse(dt, &t) || !mi_dtype_blocked(t)) {
        H5Oclose(o);
        return mi_set_error(err, "%s: tensor '%s' is a block group with dtype '%s', not q8_0, q4_0, q4_K, q5_K or "
                                 "q6_K", mf->path, name, dt);
    }
    /* the attributes that describe the layout must say what this build reads */
    /* read as whole numbers: 32.5 must not pass as block_size 32 */
    long long bs = 0, axis_attr = -1;
    long long shp[2] = {0, 0};
    int ok = H5Aexists(o, "block_size") > 0 && H5Aexists(o, "blocked_axis") > 0 && H5Aexists(o, "shape") > 0;
    if (ok) {
        hid_t a = H5Aopen(o, "block_size", H5P_DEFAULT);
        ok = mf_attr_is_single(a) && mf_attr_read_whole(a, &bs, 1) == 0;
        H5Aclose(a);
        a = H5Aopen(o, "blocked_axis", H5P_DEFAULT);
        ok = ok && mf_attr_is_single(a) && mf_attr_read_whole(a, &axis_attr, 1) == 0;
        H5Aclose(a);
        a = H5Aopen(o, "shape", H5P_DEFAULT);
        hid_t sp = H5Aget_space(a);
        ok = ok && H5Sget_simple_extent_npoints(sp) == 2 && mf_attr_read_whole(a, shp, 2) == 0;
        H5Sclose(sp);
        H5Aclose(a);
    }
    H5Oclose(o);
    const int block = mi_dtype_block(t);
    if (!ok || bs != block || axis_attr != (transposed ? 0 : 1) || shp[0] != (long long)d0 || shp[1] != (long long)d1)
        return mi_set_error(err, "%s: tensor '%s' (%s) must have block_size %d, blocked_axis %d and shape [%llu, "
                                 "%llu]; its attributes say otherwise or are missing", mf->path, name, dt, block,
                            transposed ? 0 : 1, (unsigned long long)d0, (unsigned long long)d1);
    hsize_t axis = transposed ? d0 : d1;
    if (axis % (hsize_t)block)
        return mi_set_error(err, "%s: tensor '%s' is %s but its blocked axis of %llu is not a multiple of %d",
                            mf->path, name, dt, (unsigned long long)axis, block);
    char part[160];
    if (mi_dtype_kquant(t)) {
        hsize_t bb = (hsize_t)mi_dtype_q_row_bytes(t, MI_QK_K);
        snprintf(part, sizeof part, "%s/qs", name);
        if (mf_check_dataset(mf->file, part, 2, transposed ? d0 / MI_QK_K : d0,
                             transposed ? d1 * bb : d1 / MI_QK_K * bb, 0, mf->path, err))
            return -1;
        hid_t d = H5Dopen2(mf->file, part, H5P_DEFAULT), ty = H5Dget_type(d);
        ok = H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 1 && H5Tget_sign(ty) == H5T_SGN_NONE && mf_type_is_number(ty);
        H5Tclose(ty);
        H5Dclose(d);
        if (!ok)
            return mi_set_error(err, "%s: tensor '%s' (%s super-blocks) is not unsigned 8-bit integers", mf->path,
                                part, dt);
        *dtype = t;
        return 0;
    }
    hsize_t q0 = d0, q1 = d1, s0 = d0, s1 = d1;
    if (transposed) {
        q0 = t == MI_Q4_0 ? d0 / 2 : d0;
        s0 = d0 / MI_QK;
    } else {
        q1 = t == MI_Q4_0 ? d1 / 2 : d1;
        s1 = d1 / MI_QK;
    }
    snprintf(part, sizeof part, "%s/qs", name);
    if (mf_check_dataset(mf->file, part, 2, q0, q1, 0, mf->path, err))
        return -1;
    hid_t d = H5Dopen2(mf->file, part, H5P_DEFAULT), ty = H5Dget_type(d);
    /* q8_0 values are signed bytes, q4_0's two unsigned nibbles */
    H5T_sign_t want = t == MI_Q8_0 ? H5T_SGN_2 : H5T_SGN_NONE;
    ok = H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 1 && H5Tget_sign(ty) == want && mf_type_is_number(ty);
    H5Tclose(ty);
    H5Dclose(d);
    if (!ok)
        return mi_set_error(err, "%s: tensor '%s' is not %s 8-bit integers", mf->path, part,
                            t == MI_Q8_0 ? "signed" : "unsigned");
    snprintf(part, sizeof part, "%s/d", name);
    if (mf_check_dataset(mf->file, part, 2, s0, s1, 0, mf->path, err))
        return -1;
    d = H5Dopen2(mf->file, part, H5P_DEFAULT);
    ty = H5Dget_type(d);
    ok = H5Tget_class(ty) == H5T_FLOAT && H5Tget_size(ty) == 2 && mf_type_is_number(ty);
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
    if (mf_check_dataset(mf->file, "patch_embed", 2, d, (hsize_t)c->patch_len, F, mf->path, err) ||
        mf_check_dataset(mf->file, "patch_embed_b", 1, d, 0, F, mf->path, err) ||
        mf_check_dataset(mf->file, "pos_embed", 2, (hsize_t)c->seq_len, d, F, mf->path, err) ||
        mf_check_dataset(mf->file, "head", 2, (hsize_t)c->horizon, (hsize_t)c->seq_len * d, F, mf->path, err) ||
        mf_check_dataset(mf->file, "head_b", 1, (hsize_t)c->horizon, 0, F, mf->path, err))
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
            if (mf_check_dataset(mf->file, name, t[i].rank, t[i].r ? h : d, t[i].rank == 2 ? (t[i].k ? h : d) : 0, F,
                              mf->path, err))
                return -1;
        }
    return 0;
}

/* The float32 vectors the family's traits add (model_file.h, version 4):
 * the model's own, then each layer's, as mi_config_trait_tensors lists them
 * (a vector [n] has cols 1; a matrix, pos_embed, is [rows, cols]). */
static int check_trait_tensors(mi_model_file *mf, char *err)
{
    const mi_config *c = &mf->cfg;
    const char *names[MI_MAX_TRAIT_TENSORS];
    size_t rows[MI_MAX_TRAIT_TENSORS], cols[MI_MAX_TRAIT_TENSORS];
    char name[128];
    for (int l = -1; l < c->n_layers; l++) {
        int n = mi_config_trait_tensors(c, l, names, rows, cols);
        for (int i = 0; i < n; i++) {
            if (l < 0)
                snprintf(name, sizeof name, "%s", names[i]);
            else
                mi_model_layer_name(name, sizeof name, l, names[i]);
            if (mf_check_dataset(mf->file, name, cols[i] > 1 ? 2 : 1, (hsize_t)rows[i], cols[i] > 1 ? (hsize_t)cols[i] : 0,
                                 H5T_NATIVE_FLOAT, mf->path, err))
                return -1;
        }
    }
    return 0;
}

/* A mixture-of-experts layer's matrices (model_file.h), recording their
 * dtypes: the stacked experts in the dtype table's w1, w2, w3 columns. */
static int check_moe(mi_model_file *mf, int l, char *err)
{
    mi_config *c = &mf->cfg;
    hsize_t d = (hsize_t)c->dim, h = (hsize_t)c->hidden_dim, E = (hsize_t)c->n_experts;
    hsize_t sh = (hsize_t)c->shared_hidden_dim;
    char name[128];
    int t;
    /* experts_w1, w3 [E*h, dim] and experts_w2 [E*dim, h], each blocked along its columns */
    const int exp_mat[3] = {MI_W1, MI_W2, MI_W3};
    for (int i = 0; i < 3; i++) {
        int m = exp_mat[i];
        mi_model_layer_name(name, sizeof name, l, mi_expert_mat_names[m]);
        if (check_matrix(mf, name, m == MI_W2 ? E * d : E * h, m == MI_W2 ? h : d, 0, &t, err))
            return -1;
        c->dtype[l][m] = (unsigned char)t;
    }
    const hsize_t rows[MI_N_MOE_MATS] = {E, sh, sh, sh};
    for (int m = 0; m < MI_N_MOE_MATS; m++) {
        if (m != MI_MOE_ROUTER && sh == 0)
            continue;
        mi_model_layer_name(name, sizeof name, l, mi_moe_mat_names[m]);
        if (check_matrix(mf, name, rows[m], d, m == MI_MOE_SW2, &t, err))
            return -1;
        c->moe_dtype[l][m] = (unsigned char)t;
    }
    return 0;
}

int mf_check_all_tensors(mi_model_file *mf, char *err)
{
    mi_config *c = &mf->cfg;
    hsize_t d = (hsize_t)c->dim, v = (hsize_t)c->vocab_size, h = (hsize_t)c->hidden_dim;
    hsize_t q = (hsize_t)c->n_heads * (hsize_t)c->head_dim, kv = (hsize_t)mi_kv_dim(c);
    hid_t F = H5T_NATIVE_FLOAT;
    int t;
    if (c->family == MI_FAMILY_PATCHTST)
        return check_layer_count(mf, err) || check_patchtst_tensors(mf, err) ? -1 : 0;
    if (check_matrix(mf, "tok_embeddings", v, d, 0, &t, err) ||
        mf_check_dataset(mf->file, "norm", 1, d, 0, F, mf->path, err))
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
    int gated = c->ffn_type == MI_FFNK_SWIGLU || c->ffn_type == MI_FFNK_GEGLU;
    char name[128];
    int moe = mi_config_is_moe(c);
    for (int l = 0; l < c->n_layers; l++) {
        mi_model_layer_name(name, sizeof name, l, "attention_norm");
        if (mf_check_dataset(mf->file, name, 1, d, 0, F, mf->path, err))
            return -1;
        mi_model_layer_name(name, sizeof name, l, "ffn_norm");
        if (mf_check_dataset(mf->file, name, 1, d, 0, F, mf->path, err))
            return -1;
        for (int m = 0; m < MI_N_LAYER_MATS; m++) {
            if (moe && (m == MI_W1 || m == MI_W2 || m == MI_W3))
                continue; /* the experts' (check_moe) */
            if (m == MI_W3 && !gated) { /* no gate: w3's dtype entry follows w1's */
                c->dtype[l][m] = c->dtype[l][MI_W1];
                continue;
            }
            mi_model_layer_name(name, sizeof name, l, mi_layer_mat_names[m]);
            if (check_matrix(mf, name, rows[m], d, m == MI_WO || m == MI_W2, &t, err))
                return -1;
            c->dtype[l][m] = (unsigned char)t;
        }
    }
    for (int l = 0; moe && l < c->n_layers; l++)
        if (check_moe(mf, l, err))
            return -1;
    return check_trait_tensors(mf, err);
}
