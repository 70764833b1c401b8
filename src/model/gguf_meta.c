/* GGUF metadata: the read primitives, reading and checking the key/values
 * at open, and the typed getters (see gguf.h). Values stay in the map; only
 * keys are copied, and the offsets of string array elements are indexed so
 * that element i is O(1). */
#define _POSIX_C_SOURCE 200809L
#include "gguf_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

#define MAX_ARRAY (1u << 26) /* elements: a 256k-token vocabulary is 1/256 of it */
#define MAX_DEPTH 8          /* arrays of arrays, nested no deeper */
#define MAX_KEY 65535        /* the GGUF spec's longest key */
#define KV_MIN 13            /* key length 8, a key of 1 byte at least, type 4 */

/* bytes of one value of each fixed-size type; 0: string and array */
static const int vsize[MI_GGUF_NVTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const vnames[MI_GGUF_NVTYPES] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                    "bool", "string", "array", "u64", "i64", "f64"};

const char *mi_gguf_vtype_name(int vtype)
{
    return vtype >= 0 && vtype < MI_GGUF_NVTYPES ? vnames[vtype] : "?";
}

/* ------------------------------------------------------------ the cursor */

int gg_need(gg_cur *c, uint64_t n)
{
    if (n <= c->size - c->pos)
        return 0;
    return mi_set_error(c->err, "%s: file is truncated %s: needs %" PRIu64 " bytes at offset %" PRIu64
                                ", the file has %" PRIu64, c->path, c->where, n, c->pos, c->size);
}

int gg_u32(gg_cur *c, uint32_t *v)
{
    if (gg_need(c, 4))
        return -1;
    memcpy(v, c->b + c->pos, 4);
    c->pos += 4;
    return 0;
}

int gg_u64(gg_cur *c, uint64_t *v)
{
    if (gg_need(c, 8))
        return -1;
    memcpy(v, c->b + c->pos, 8);
    c->pos += 8;
    return 0;
}

int gg_str(gg_cur *c, const char **s, uint64_t *len)
{
    uint64_t at = c->pos;
    if (gg_u64(c, len))
        return -1;
    if (*len > c->size - c->pos)
        return mi_set_error(c->err, "%s: string length %" PRIu64 " at offset %" PRIu64 " runs past the end of "
                            "the file (%" PRIu64 " bytes left) %s", c->path, *len, at, c->size - c->pos, c->where);
    *s = (const char *)c->b + c->pos;
    c->pos += *len;
    return 0;
}

/* ------------------------------------------------------------ key/values */

/* What the open says of the value being read: "key-value 3 'general.name'". */
typedef struct {
    mi_gguf *g;
    gg_cur *c;
    char *err;
    char label[128];
} kv_reader;

static int bad(kv_reader *r, const char *what)
{
    return mi_set_error(r->err, "%s: %s %s", r->g->path, r->label, what);
}

/* An array's element type and count, checked: a known type, nesting within
 * MAX_DEPTH, at most MAX_ARRAY elements. (A count the rest of the file cannot
 * hold is found as truncation when the elements are read.) */
static int array_head(kv_reader *r, int depth, int *type, uint64_t *count)
{
    uint32_t t;
    char msg[256];
    if (gg_u32(r->c, &t) || gg_u64(r->c, count))
        return -1;
    if (t >= MI_GGUF_NVTYPES) {
        snprintf(msg, sizeof msg, "is an array of unknown value type %u", t);
        return bad(r, msg);
    }
    if (depth >= MAX_DEPTH) {
        snprintf(msg, sizeof msg, "nests arrays deeper than %d", MAX_DEPTH);
        return bad(r, msg);
    }
    if (*count > MAX_ARRAY) {
        snprintf(msg, sizeof msg, "has an absurd array count %" PRIu64 " (at most %u)", *count, MAX_ARRAY);
        return bad(r, msg);
    }
    *type = (int)t;
    return 0;
}

/* n values of type t at the cursor (an array's elements, or one scalar when
 * array is 0), recursing into nested arrays. str_pos: where each string's
 * length lies. */
static int read_values(kv_reader *r, int t, uint64_t n, int array, int depth, uint64_t *str_pos)
{
    gg_cur *c = r->c;
    if (t == MI_GGUF_STRING || t == MI_GGUF_ARRAY) {
        for (uint64_t i = 0; i < n; i++) {
            const char *s = NULL;
            uint64_t len = 0;
            int et = 0;
            if (str_pos)
                str_pos[i] = c->pos;
            if (t == MI_GGUF_STRING ? gg_str(c, &s, &len)
                                    : array_head(r, depth + 1, &et, &len) ||
                                          read_values(r, et, len, 1, depth + 1, NULL))
                return -1;
        }
        return 0;
    }
    uint64_t bytes = n * (uint64_t)vsize[t]; /* n <= MAX_ARRAY: no overflow */
    if (array && bytes > c->size - c->pos) {
        char msg[192];
        snprintf(msg, sizeof msg, "array of %" PRIu64 " %s (%" PRIu64 " bytes at offset %" PRIu64 ") runs past the "
                 "end of the file (%" PRIu64 " bytes left)", n, vnames[t], bytes, c->pos, c->size - c->pos);
        return bad(r, msg);
    }
    if (gg_need(c, bytes))
        return -1;
    if (t == MI_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (c->b[c->pos + i] > 1) {
                char msg[96];
                snprintf(msg, sizeof msg, "holds bool byte %u (0 or 1 expected)", c->b[c->pos + i]);
                return bad(r, msg);
            }
    c->pos += bytes;
    return 0;
}

/* The key of key-value i: 1..MAX_KEY bytes without NUL, unique. */
static int read_key(kv_reader *r, int64_t i, gguf_kv *kv)
{
    const char *s = NULL;
    uint64_t len = 0;
    char q[NT_QUOTE_LEN];
    if (gg_str(r->c, &s, &len))
        return -1;
    if (len == 0 || len > MAX_KEY || memchr(s, 0, len))
        return mi_set_error(r->err, "%s: key-value %" PRId64 " has a bad key '%s' (%" PRIu64 " bytes: 1 to %d "
                            "without NUL bytes are allowed)", r->g->path, i, nt_quote(q, sizeof q, s, len), len,
                            MAX_KEY);
    if (!(kv->key = malloc(len + 1)))
        return mi_set_error(r->err, "%s: out of memory", r->g->path);
    memcpy(kv->key, s, len);
    kv->key[len] = '\0';
    kv->key_len = len;
    nt_quote(q, sizeof q, s, len);
    size_t first = nt_insert(&r->g->kv_names, kv->key, len, (size_t)i);
    if (first != (size_t)i)
        return mi_set_error(r->err, "%s: duplicate key '%s' (key-values %zu and %" PRId64 ")", r->g->path, q, first,
                            i);
    snprintf(r->label, sizeof r->label, "key-value %" PRId64 " '%s'", i, q);
    snprintf(r->c->where, sizeof r->c->where, "in %s", r->label);
    return 0;
}

static int read_kv(kv_reader *r, int64_t i)
{
    gguf_kv *kv = &r->g->kv[i];
    snprintf(r->label, sizeof r->label, "key-value %" PRId64, i);
    snprintf(r->c->where, sizeof r->c->where, "in %s", r->label);
    uint32_t t;
    if (read_key(r, i, kv) || gg_u32(r->c, &t))
        return -1;
    if (t >= MI_GGUF_NVTYPES) {
        char msg[64];
        snprintf(msg, sizeof msg, "has unknown value type %u", t);
        return bad(r, msg);
    }
    kv->type = (int)t;
    if (t != MI_GGUF_ARRAY) {
        kv->pos = r->c->pos;
        kv->count = 1;
        return read_values(r, kv->type, 1, 0, 0, NULL);
    }
    if (array_head(r, 0, &kv->elem_type, &kv->count))
        return -1;
    kv->pos = r->c->pos;
    /* a string takes 8 bytes at least: room for the positions of those the
     * bytes left can hold, and of one more, where reading fails if the file lies */
    uint64_t fit = (r->c->size - r->c->pos) / 8 + 1, n = kv->count < fit ? kv->count : fit;
    if (kv->elem_type == MI_GGUF_STRING && !(kv->str_pos = malloc((n + 1) * sizeof *kv->str_pos)))
        return mi_set_error(r->err, "%s: out of memory for %s", r->g->path, r->label);
    return read_values(r, kv->elem_type, kv->count, 1, 0, kv->str_pos);
}

int gguf_read_kvs(mi_gguf *g, gg_cur *c, char *err)
{
    kv_reader r = {.g = g, .c = c, .err = err};
    /* reading more key-values than the bytes left can hold fails as
     * truncated at the entry after them */
    uint64_t fit = (c->size - c->pos) / KV_MIN + 1;
    g->kv_cap = g->n_kv < (int64_t)fit ? g->n_kv : (int64_t)fit;
    g->kv = calloc((size_t)g->kv_cap + 1, sizeof *g->kv);
    if (!g->kv || nt_init(&g->kv_names, (size_t)g->kv_cap))
        return mi_set_error(err, "%s: out of memory for %" PRId64 " key-values", g->path, g->n_kv);
    for (int64_t i = 0; i < g->n_kv; i++)
        if (read_kv(&r, i))
            return -1;
    return 0;
}

void gguf_free_kvs(mi_gguf *g)
{
    if (g->kv)
        for (int64_t i = 0; i < g->kv_cap; i++) {
            free(g->kv[i].key);
            free(g->kv[i].str_pos);
        }
    free(g->kv);
    nt_free(&g->kv_names);
}

/* ------------------------------------------------------------ getters */

int64_t mi_gguf_n_kv(const mi_gguf *g) { return g->n_kv; }

int64_t mi_gguf_find_key(const mi_gguf *g, const char *key)
{
    size_t i = nt_find(&g->kv_names, key, strlen(key));
    return i == SIZE_MAX ? -1 : (int64_t)i;
}

const char *mi_gguf_key(const mi_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

int mi_gguf_kv_type(const mi_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kv[i].type : -1;
}

/* The integer of type t at p, if it lies in [lo, hi]: 0, -1 when t is not
 * an integer type, -2 when out of range. */
static int int_in(int t, const unsigned char *p, int64_t lo, int64_t hi, int64_t *v)
{
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; uint64_t u64; int64_t i64; } x;
    if (t < 0 || t >= MI_GGUF_NVTYPES || !vsize[t] || t == MI_GGUF_F32 || t == MI_GGUF_F64 || t == MI_GGUF_BOOL)
        return -1;
    memcpy(&x, p, (size_t)vsize[t]);
    switch (t) {
    case MI_GGUF_U8: *v = x.u8; break;
    case MI_GGUF_I8: *v = x.i8; break;
    case MI_GGUF_U16: *v = x.u16; break;
    case MI_GGUF_I16: *v = x.i16; break;
    case MI_GGUF_U32: *v = x.u32; break;
    case MI_GGUF_I32: *v = x.i32; break;
    case MI_GGUF_I64: *v = x.i64; break;
    default: /* u64 */
        if (x.u64 > INT64_MAX)
            return -2;
        *v = (int64_t)x.u64;
    }
    return *v < lo || *v > hi ? -2 : 0;
}

/* The f32 or f64 at p as a float: 0, -1 for another type, -2 out of range. */
static int float_at(int t, const unsigned char *p, float *v)
{
    if (t == MI_GGUF_F32) {
        memcpy(v, p, 4);
        return 0;
    }
    if (t != MI_GGUF_F64)
        return -1;
    double d;
    memcpy(&d, p, 8);
    if (isfinite(d) && fabs(d) > FLT_MAX)
        return -2;
    *v = (float)d;
    return 0;
}

/* The value for messages, with its article: "a u64 18446744073709551615",
 * "an f64 1e+300", "a string". */
static const char *describe(int t, const unsigned char *p, char *buf, size_t n)
{
    const char *an = strchr("iaf", vnames[t][0]) ? "an" : "a";
    if (t == MI_GGUF_F64) {
        double d;
        memcpy(&d, p, 8);
        snprintf(buf, n, "%s f64 %g", an, d);
        return buf;
    }
    int64_t s;
    int rc = int_in(t, p, INT64_MIN, INT64_MAX, &s);
    if (rc == -1) {
        snprintf(buf, n, "%s %s", an, vnames[t]);
    } else if (rc == 0) {
        snprintf(buf, n, "%s %s %" PRId64, an, vnames[t], s);
    } else { /* a u64 past INT64_MAX */
        uint64_t u;
        memcpy(&u, p, 8);
        snprintf(buf, n, "%s %s %" PRIu64, an, vnames[t], u);
    }
    return buf;
}

/* rc of int_in or float_at as the getters' result, with the message. */
static int conv_result(const mi_gguf *g, int rc, const char *key, const char *elem, int t,
                       const unsigned char *p, const char *want, char *err)
{
    char q[NT_QUOTE_LEN], d[96];
    if (!rc)
        return 0;
    return mi_set_error(err, "%s: key '%s'%s holds %s, %s %s", g->path, nt_quote(q, sizeof q, key, strlen(key)),
                        elem, describe(t, p, d, sizeof d), rc == -1 ? "not" : "out of the range of", want);
}

/* The scalar value of key: 1 when absent, else 0 with its type and bytes. */
static int scalar(const mi_gguf *g, const char *key, int *t, const unsigned char **p)
{
    int64_t i = mi_gguf_find_key(g, key);
    if (i < 0)
        return 1;
    *t = g->kv[i].type;
    *p = g->map + g->kv[i].pos;
    return 0;
}

int mi_gguf_get_u32(const mi_gguf *g, const char *key, uint32_t *v, char *err)
{
    int t;
    const unsigned char *p;
    int64_t x;
    if (scalar(g, key, &t, &p))
        return 1;
    int rc = int_in(t, p, 0, UINT32_MAX, &x);
    if (!rc)
        *v = (uint32_t)x;
    return conv_result(g, rc, key, "", t, p, "a u32", err);
}

int mi_gguf_get_i32(const mi_gguf *g, const char *key, int32_t *v, char *err)
{
    int t;
    const unsigned char *p;
    int64_t x;
    if (scalar(g, key, &t, &p))
        return 1;
    int rc = int_in(t, p, INT32_MIN, INT32_MAX, &x);
    if (!rc)
        *v = (int32_t)x;
    return conv_result(g, rc, key, "", t, p, "an i32", err);
}

int mi_gguf_get_f32(const mi_gguf *g, const char *key, float *v, char *err)
{
    int t;
    const unsigned char *p;
    if (scalar(g, key, &t, &p))
        return 1;
    return conv_result(g, float_at(t, p, v), key, "", t, p, "an f32", err);
}

int mi_gguf_get_bool(const mi_gguf *g, const char *key, bool *v, char *err)
{
    int t;
    const unsigned char *p;
    if (scalar(g, key, &t, &p))
        return 1;
    if (t == MI_GGUF_BOOL)
        *v = *p != 0;
    return conv_result(g, t == MI_GGUF_BOOL ? 0 : -1, key, "", t, p, "a bool", err);
}

int mi_gguf_get_str(const mi_gguf *g, const char *key, const char **s, size_t *len, char *err)
{
    int t;
    const unsigned char *p;
    if (scalar(g, key, &t, &p))
        return 1;
    if (t != MI_GGUF_STRING)
        return conv_result(g, -1, key, "", t, p, "a string", err);
    uint64_t n;
    memcpy(&n, p, 8);
    *s = (const char *)p + 8;
    *len = (size_t)n;
    return 0;
}

int mi_gguf_get_str_copy(const mi_gguf *g, const char *key, char *buf, size_t n, char *err)
{
    const char *s = NULL;
    size_t len = 0;
    int rc = mi_gguf_get_str(g, key, &s, &len, err);
    if (rc)
        return rc;
    char q[NT_QUOTE_LEN];
    if (len >= n)
        return mi_set_error(err, "%s: key '%s' holds a string of %zu bytes, longer than the %zu allowed", g->path,
                            nt_quote(q, sizeof q, key, strlen(key)), len, n ? n - 1 : 0);
    memcpy(buf, s, len);
    buf[len] = '\0';
    return 0;
}

/* ------------------------------------------------------------ arrays */

int mi_gguf_get_arr(const mi_gguf *g, const char *key, mi_gguf_arr *a, char *err)
{
    int64_t i = mi_gguf_find_key(g, key);
    if (i < 0)
        return 1;
    if (g->kv[i].type != MI_GGUF_ARRAY)
        return conv_result(g, -1, key, "", g->kv[i].type, g->map + g->kv[i].pos, "an array", err);
    *a = (mi_gguf_arr){g, i, g->kv[i].elem_type, g->kv[i].count};
    return 0;
}

/* Element i of a: the kv, or NULL with err (i out of range, or elements of
 * another kind than want: 's' strings, 'n' fixed-size numbers). */
static const gguf_kv *element(const mi_gguf_arr *a, uint64_t i, int want, char *err)
{
    const mi_gguf *g = a->g;
    const gguf_kv *kv = &g->kv[a->kv];
    char q[NT_QUOTE_LEN];
    nt_quote(q, sizeof q, kv->key, kv->key_len);
    if (i >= kv->count) {
        mi_set_error(err, "%s: key '%s' has %" PRIu64 " elements, element %" PRIu64 " was asked for", g->path, q,
                     kv->count, i);
        return NULL;
    }
    if (want == 's' ? kv->elem_type != MI_GGUF_STRING : !vsize[kv->elem_type]) {
        mi_set_error(err, "%s: key '%s' is an array of %s, not of %s", g->path, q, vnames[kv->elem_type],
                     want == 's' ? "strings" : "numbers");
        return NULL;
    }
    return kv;
}

int mi_gguf_arr_str(const mi_gguf_arr *a, uint64_t i, const char **s, size_t *len, char *err)
{
    const gguf_kv *kv = element(a, i, 's', err);
    if (!kv)
        return -1;
    uint64_t n;
    const unsigned char *p = a->g->map + kv->str_pos[i];
    memcpy(&n, p, 8);
    *s = (const char *)p + 8;
    *len = (size_t)n;
    return 0;
}

/* Numeric element i of a converted by conv (int_in's or float_at's rule). */
static int arr_num(const mi_gguf_arr *a, uint64_t i, int64_t lo, int64_t hi, int64_t *x, float *f,
                   const char *want, char *err)
{
    const gguf_kv *kv = element(a, i, 'n', err);
    if (!kv)
        return -1;
    const unsigned char *p = a->g->map + kv->pos + i * (uint64_t)vsize[kv->elem_type];
    int rc = f ? float_at(kv->elem_type, p, f) : int_in(kv->elem_type, p, lo, hi, x);
    char elem[48];
    snprintf(elem, sizeof elem, " element %" PRIu64, i);
    return conv_result(a->g, rc, kv->key, elem, kv->elem_type, p, want, err);
}

int mi_gguf_arr_f32(const mi_gguf_arr *a, uint64_t i, float *v, char *err)
{
    return arr_num(a, i, 0, 0, NULL, v, "an f32", err);
}

int mi_gguf_arr_i32(const mi_gguf_arr *a, uint64_t i, int32_t *v, char *err)
{
    int64_t x;
    int rc = arr_num(a, i, INT32_MIN, INT32_MAX, &x, NULL, "an i32", err);
    if (!rc)
        *v = (int32_t)x;
    return rc;
}

int mi_gguf_arr_u32(const mi_gguf_arr *a, uint64_t i, uint32_t *v, char *err)
{
    int64_t x;
    int rc = arr_num(a, i, 0, UINT32_MAX, &x, NULL, "a u32", err);
    if (!rc)
        *v = (uint32_t)x;
    return rc;
}
