/* GGUF reader: the file map, the header, the tensor infos and their checks,
 * the ggml type table and the tensor accessors (see gguf.h). The key/values
 * and the read primitives are in gguf_meta.c (which calls nothing here). */
#define _POSIX_C_SOURCE 200809L
#include "gguf_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

/* More would be no model anyone holds, and bounds what a hostile header can
 * make us allocate before its bytes are read. */
#define MAX_TENSORS (1 << 20)
#define MAX_KVS (1 << 20)
#define TENSOR_INFO_MIN 24 /* name length 8, n_dims 4, type 4, offset 8 */

/* ggml's types: name, elements per block, bytes per block (ggml.c's
 * type_traits; gguf-py's GGML_QUANT_SIZES). Missing ids were removed. */
static const struct {
    const char *name;
    int block, size;
} ggml_types[] = {
    [MI_GGML_F32] = {"f32", 1, 4},           [MI_GGML_F16] = {"f16", 1, 2},
    [MI_GGML_Q4_0] = {"q4_0", 32, 18},       [MI_GGML_Q4_1] = {"q4_1", 32, 20},
    [MI_GGML_Q5_0] = {"q5_0", 32, 22},       [MI_GGML_Q5_1] = {"q5_1", 32, 24},
    [MI_GGML_Q8_0] = {"q8_0", 32, 34},       [MI_GGML_Q8_1] = {"q8_1", 32, 40},
    [MI_GGML_Q2_K] = {"q2_K", 256, 84},      [MI_GGML_Q3_K] = {"q3_K", 256, 110},
    [MI_GGML_Q4_K] = {"q4_K", 256, 144},     [MI_GGML_Q5_K] = {"q5_K", 256, 176},
    [MI_GGML_Q6_K] = {"q6_K", 256, 210},     [MI_GGML_Q8_K] = {"q8_K", 256, 292},
    [MI_GGML_IQ2_XXS] = {"iq2_xxs", 256, 66}, [MI_GGML_IQ2_XS] = {"iq2_xs", 256, 74},
    [MI_GGML_IQ3_XXS] = {"iq3_xxs", 256, 98}, [MI_GGML_IQ1_S] = {"iq1_s", 256, 50},
    [MI_GGML_IQ4_NL] = {"iq4_nl", 32, 18},   [MI_GGML_IQ3_S] = {"iq3_s", 256, 110},
    [MI_GGML_IQ2_S] = {"iq2_s", 256, 82},    [MI_GGML_IQ4_XS] = {"iq4_xs", 256, 136},
    [MI_GGML_I8] = {"i8", 1, 1},             [MI_GGML_I16] = {"i16", 1, 2},
    [MI_GGML_I32] = {"i32", 1, 4},           [MI_GGML_I64] = {"i64", 1, 8},
    [MI_GGML_F64] = {"f64", 1, 8},           [MI_GGML_IQ1_M] = {"iq1_m", 256, 56},
    [MI_GGML_BF16] = {"bf16", 1, 2},         [MI_GGML_TQ1_0] = {"tq1_0", 256, 54},
    [MI_GGML_TQ2_0] = {"tq2_0", 256, 66},    [MI_GGML_MXFP4] = {"mxfp4", 32, 17},
};
#define N_GGML_TYPES (int)(sizeof ggml_types / sizeof ggml_types[0])

const char *mi_gguf_type_name(int type)
{
    return type >= 0 && type < N_GGML_TYPES ? ggml_types[type].name : NULL;
}

int mi_gguf_type_block(int type)
{
    return mi_gguf_type_name(type) ? ggml_types[type].block : 0;
}

int mi_gguf_type_size(int type)
{
    return mi_gguf_type_name(type) ? ggml_types[type].size : 0;
}

/* ------------------------------------------------------------ header */

static int read_header(mi_gguf *g, gg_cur *c, char *err)
{
    snprintf(c->where, sizeof c->where, "in the header");
    if (gg_need(c, 4))
        return -1;
    if (memcmp(c->b, "GGUF", 4)) {
        char q[NT_QUOTE_LEN];
        return mi_set_error(err, "%s: not a GGUF file (its first bytes are '%s', not 'GGUF')", g->path,
                            nt_quote(q, sizeof q, (const char *)c->b, 4));
    }
    c->pos = 4;
    uint64_t n_tensors, n_kv;
    if (gg_u32(c, &g->version))
        return -1;
    uint32_t v = g->version, swapped = (v >> 24) | (v >> 8 & 0xff00) | (v << 8 & 0xff0000) | (v << 24);
    if (swapped == 2 || swapped == 3)
        return mi_set_error(err, "%s: big-endian GGUF file (version %u): only little-endian files are read",
                            g->path, swapped);
    if (v != 2 && v != 3)
        return mi_set_error(err, "%s: GGUF version %u is not supported (versions 2 and 3 are%s)", g->path, v,
                            v == 1 ? "; version 1 is obsolete: convert the model again with llama.cpp" : "");
    if (gg_u64(c, &n_tensors) || gg_u64(c, &n_kv))
        return -1;
    if (n_kv > MAX_KVS)
        return mi_set_error(err, "%s: header claims %" PRIu64 " key-values: absurd (at most %d)", g->path, n_kv,
                            MAX_KVS);
    if (n_tensors > MAX_TENSORS)
        return mi_set_error(err, "%s: header claims %" PRIu64 " tensors: absurd (at most %d)", g->path, n_tensors,
                            MAX_TENSORS);
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    return 0;
}

static int read_alignment(mi_gguf *g, char *err)
{
    uint32_t a = MI_GGUF_DEFAULT_ALIGNMENT;
    if (mi_gguf_get_u32(g, "general.alignment", &a, err) < 0)
        return -1;
    if (a == 0 || (a & (a - 1)))
        return mi_set_error(err, "%s: general.alignment %u is not a power of two", g->path, a);
    g->alignment = a;
    return 0;
}

/* ------------------------------------------------------------ tensor infos */

/* Shape and type of tensor t (name, dims and type read): known type, whole
 * blocks along dims[0], the byte size without overflow. */
static int tensor_size(mi_gguf *g, int64_t i, mi_gguf_tensor *t, char *err)
{
    if (!mi_gguf_type_name(t->type))
        return mi_set_error(err, "%s: tensor %" PRId64 " '%s' has unknown ggml type id %d%s", g->path, i, t->name,
                            t->type, t->type >= 0 && t->type < N_GGML_TYPES ? " (a type ggml has removed)" : "");
    t->type_name = ggml_types[t->type].name;
    uint64_t block = (uint64_t)ggml_types[t->type].block, bytes = (uint64_t)ggml_types[t->type].size;
    if ((uint64_t)t->dims[0] % block)
        return mi_set_error(err, "%s: tensor %" PRId64 " '%s' (%s): dims[0] %" PRId64 " is not a multiple of "
                            "the block size %" PRIu64, g->path, i, t->name, t->type_name, t->dims[0], block);
    int over = nt_mul_u64((uint64_t)t->dims[0] / block, bytes, &bytes);
    for (int d = 1; d < MI_GGUF_MAX_DIMS; d++)
        over |= nt_mul_u64(bytes, (uint64_t)t->dims[d], &bytes);
    if (over || bytes > SIZE_MAX)
        return mi_set_error(err, "%s: tensor %" PRId64 " '%s' is too large: [%" PRId64 ", %" PRId64 ", %" PRId64
                            ", %" PRId64 "] of %s overflows 64 bits", g->path, i, t->name, t->dims[0],
                            t->dims[1], t->dims[2], t->dims[3], t->type_name);
    t->size = (size_t)bytes;
    return 0;
}

/* 1 if s[len] has a control byte (a NUL would cut the C string; the others
 * would break the one-line messages that name the tensor). */
static int has_control(const char *s, uint64_t len)
{
    for (uint64_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 1;
    return 0;
}

/* The name of tensor i: 1..MI_GGUF_MAX_NAME bytes, no control bytes, unique. */
static int tensor_name(mi_gguf *g, gg_cur *c, int64_t i, mi_gguf_tensor *t, char *err)
{
    const char *s = NULL;
    uint64_t len = 0;
    if (gg_str(c, &s, &len))
        return -1;
    char q[NT_QUOTE_LEN];
    if (len == 0 || len > MI_GGUF_MAX_NAME || has_control(s, len))
        return mi_set_error(err, "%s: tensor %" PRId64 " has a bad name '%s' (%" PRIu64 " bytes: 1 to %d without "
                            "control characters are allowed)", g->path, i, nt_quote(q, sizeof q, s, len), len,
                            MI_GGUF_MAX_NAME);
    char *name = malloc(len + 1);
    if (!name)
        return mi_set_error(err, "%s: out of memory", g->path);
    memcpy(name, s, len);
    name[len] = '\0';
    t->name = name;
    size_t first = nt_insert(&g->tensor_names, name, len, (size_t)i);
    if (first != (size_t)i)
        return mi_set_error(err, "%s: duplicate tensor name '%s' (tensors %zu and %" PRId64 ")", g->path, name,
                            first, i);
    return 0;
}

static int read_tensor_info(mi_gguf *g, gg_cur *c, int64_t i, char *err)
{
    mi_gguf_tensor *t = &g->tensors[i];
    snprintf(c->where, sizeof c->where, "in tensor info %" PRId64, i);
    if (tensor_name(g, c, i, t, err))
        return -1;
    snprintf(c->where, sizeof c->where, "in tensor info %" PRId64 " '%s'", i, t->name);
    uint32_t n_dims, type;
    if (gg_u32(c, &n_dims))
        return -1;
    if (n_dims < 1 || n_dims > MI_GGUF_MAX_DIMS) /* 0: nothing a model stores, and the next fields misread */
        return mi_set_error(err, "%s: tensor %" PRId64 " '%s' has n_dims %u (1 to %d)", g->path, i, t->name,
                            n_dims, MI_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < MI_GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        if ((uint32_t)d < n_dims && gg_u64(c, &v))
            return -1;
        if (v > INT64_MAX)
            return mi_set_error(err, "%s: tensor %" PRId64 " '%s' has a negative dims[%d] (%" PRId64 ")", g->path,
                                i, t->name, d, (int64_t)v);
        t->dims[d] = (int64_t)v;
    }
    if (gg_u32(c, &type) || gg_u64(c, &t->offset))
        return -1;
    int32_t id; /* the file stores the id as an int32 */
    memcpy(&id, &type, 4);
    t->type = id;
    return tensor_size(g, i, t, err);
}

/* Offset aligned, data inside the file. */
static int place_tensor(mi_gguf *g, int64_t i, char *err)
{
    mi_gguf_tensor *t = &g->tensors[i];
    uint64_t section = g->size > g->data_start ? g->size - g->data_start : 0;
    if (t->offset % g->alignment)
        return mi_set_error(err, "%s: tensor %" PRId64 " '%s' offset %" PRIu64 " is not a multiple of the "
                            "alignment %" PRIu64, g->path, i, t->name, t->offset, g->alignment);
    if (t->offset > section)
        return mi_set_error(err, "%s: tensor %" PRId64 " '%s' offset %" PRIu64 " lies past the end of the file "
                            "(its data section holds %" PRIu64 " bytes)", g->path, i, t->name, t->offset, section);
    if (t->size > section - t->offset)
        return mi_set_error(err, "%s: tensor %" PRId64 " '%s' data is truncated: %s [%" PRId64 ", %" PRId64
                            ", %" PRId64 ", %" PRId64 "] needs %zu bytes at file offset %" PRIu64 ", %" PRIu64
                            " are present", g->path, i, t->name, t->type_name, t->dims[0], t->dims[1], t->dims[2],
                            t->dims[3], t->size, g->data_start + t->offset, section - t->offset);
    t->data = t->size ? g->map + g->data_start + t->offset : NULL;
    return 0;
}

/* No two tensors' bytes overlap (empty tensors hold none). */
static int check_overlaps(mi_gguf *g, char *err)
{
    fu_span *s = malloc(((size_t)g->n_tensors + 1) * sizeof *s);
    if (!s)
        return mi_set_error(err, "%s: out of memory", g->path);
    for (int64_t i = 0; i < g->n_tensors; i++)
        s[i] = (fu_span){g->tensors[i].offset, g->tensors[i].size, (size_t)i};
    size_t a, b;
    int over = fu_overlap(s, (size_t)g->n_tensors, &a, &b);
    free(s);
    if (!over)
        return 0;
    const mi_gguf_tensor *x = &g->tensors[a], *y = &g->tensors[b];
    return mi_set_error(err, "%s: tensors '%s' and '%s' overlap (data bytes [%" PRIu64 ", %" PRIu64 ") and [%"
                        PRIu64 ", %" PRIu64 "))", g->path, x->name, y->name, x->offset, x->offset + x->size,
                        y->offset, y->offset + y->size);
}

/* The data section holds the tensors and nothing more: writers pad each
 * tensor to the alignment, so past the last one's padded end the file has
 * no bytes. A header that counts one tensor too few reads the last tensor
 * info as data and shifts every offset; the unread tensor's bytes are then
 * left over here. */
static int check_tail(mi_gguf *g, char *err)
{
    uint64_t end = 0, section = g->size > g->data_start ? g->size - g->data_start : 0;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].offset + g->tensors[i].size > end)
            end = g->tensors[i].offset + g->tensors[i].size;
    end = (end + g->alignment - 1) / g->alignment * g->alignment;
    if (section <= end)
        return 0;
    return mi_set_error(err, "%s: %" PRIu64 " bytes after the last tensor's data belong to no tensor (does the "
                        "header's count of %" PRId64 " tensors match the file?)", g->path, section - end,
                        g->n_tensors);
}

static int read_tensors(mi_gguf *g, gg_cur *c, char *err)
{
    /* each info takes TENSOR_INFO_MIN bytes at least: reading more than the
     * bytes left can hold fails as truncated at the entry after them */
    uint64_t fit = (c->size - c->pos) / TENSOR_INFO_MIN + 1;
    g->tensor_cap = g->n_tensors < (int64_t)fit ? g->n_tensors : (int64_t)fit;
    g->tensors = calloc((size_t)g->tensor_cap + 1, sizeof *g->tensors);
    if (!g->tensors || nt_init(&g->tensor_names, (size_t)g->tensor_cap))
        return mi_set_error(err, "%s: out of memory for %" PRId64 " tensors", g->path, g->n_tensors);
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (read_tensor_info(g, c, i, err))
            return -1;
    /* the data section starts at the next aligned offset (c->pos < 2^63 and
     * the alignment <= 2^31: no overflow) */
    g->data_start = (c->pos + g->alignment - 1) / g->alignment * g->alignment;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (place_tensor(g, i, err))
            return -1;
    return check_overlaps(g, err) || check_tail(g, err) ? -1 : 0;
}

/* ------------------------------------------------------------ open, close */

int mi_gguf_open(const char *path, mi_gguf **out, char *err)
{
    *out = NULL;
    mi_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        return mi_set_error(err, "%s: out of memory", path);
    }
    g->alignment = MI_GGUF_DEFAULT_ALIGNMENT;
    if (fu_map_file(path, "GGUF file", &g->map, &g->size, err)) {
        mi_gguf_close(g);
        return -1;
    }
    gg_cur c = {.b = g->map, .size = g->size, .path = g->path, .err = err};
    if (read_header(g, &c, err) || gguf_read_kvs(g, &c, err) || read_alignment(g, err) ||
        read_tensors(g, &c, err)) {
        mi_gguf_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

void mi_gguf_close(mi_gguf *g)
{
    if (!g)
        return;
    gguf_free_kvs(g);
    if (g->tensors)
        for (int64_t i = 0; i < g->tensor_cap; i++)
            free((char *)g->tensors[i].name);
    free(g->tensors);
    nt_free(&g->tensor_names);
    fu_unmap(g->map, g->size);
    free(g->path);
    free(g);
}

uint32_t mi_gguf_version(const mi_gguf *g) { return g->version; }
uint64_t mi_gguf_alignment(const mi_gguf *g) { return g->alignment; }
uint64_t mi_gguf_data_start(const mi_gguf *g) { return g->data_start; }
int64_t mi_gguf_n_tensors(const mi_gguf *g) { return g->n_tensors; }

const mi_gguf_tensor *mi_gguf_tensor_at(const mi_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const mi_gguf_tensor *mi_gguf_find_tensor(const mi_gguf *g, const char *name)
{
    size_t i = nt_find(&g->tensor_names, name, strlen(name));
    return i == SIZE_MAX ? NULL : &g->tensors[i];
}
