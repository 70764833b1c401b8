/* safetensors reader: one file, or a Hugging Face folder with one file or an
 * index and its shards (see safetensors.h). Headers are parsed with cJSON
 * from a NUL-terminated copy; the data stays in the maps. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/safetensors.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format_util.h"
#include "meshinfer/common.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the safetensors reader reads the little-endian header length in place: little-endian hosts only"
#endif

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define MAX_INT_JSON 9007199254740992.0 /* 2^53: larger JSON numbers are not exact doubles */

static const struct {
    const char *name;
    size_t size;
} dtypes[MI_ST_NDTYPES] = {
    [MI_ST_F64] = {"F64", 8},          [MI_ST_F32] = {"F32", 4},          [MI_ST_F16] = {"F16", 2},
    [MI_ST_BF16] = {"BF16", 2},        [MI_ST_I64] = {"I64", 8},          [MI_ST_I32] = {"I32", 4},
    [MI_ST_I16] = {"I16", 2},          [MI_ST_I8] = {"I8", 1},            [MI_ST_U8] = {"U8", 1},
    [MI_ST_BOOL] = {"BOOL", 1},        [MI_ST_F8_E4M3] = {"F8_E4M3", 1}, [MI_ST_F8_E5M2] = {"F8_E5M2", 1},
    [MI_ST_U16] = {"U16", 2},          [MI_ST_U32] = {"U32", 4},          [MI_ST_U64] = {"U64", 8},
};

const char *mi_st_dtype_name(mi_st_dtype d)
{
    return (unsigned)d < MI_ST_NDTYPES ? dtypes[d].name : NULL;
}

size_t mi_st_dtype_size(mi_st_dtype d)
{
    return (unsigned)d < MI_ST_NDTYPES ? dtypes[d].size : 0;
}

typedef struct {
    char *path;
    const unsigned char *map;
    uint64_t size;
} st_shard;

struct mi_st {
    st_shard *shards;
    int n_shards;
    mi_st_tensor *t;
    size_t n, cap;
    nt_table names;
};

/* ------------------------------------------------------------ one header entry */

/* A JSON number that is a whole number in [0, 2^53]. */
static int json_uint(const cJSON *j, uint64_t *v)
{
    if (!cJSON_IsNumber(j))
        return -1;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= MAX_INT_JSON) || d != floor(d))
        return -1;
    *v = (uint64_t)d;
    return 0;
}

static int parse_dtype(const char *path, const char *name, const cJSON *j, mi_st_tensor *t, char *err)
{
    char q[NT_QUOTE_LEN];
    if (!cJSON_IsString(j))
        return mi_set_error(err, "%s: tensor '%s' has no \"dtype\" string", path, name);
    for (int d = 0; d < MI_ST_NDTYPES; d++)
        if (!strcmp(j->valuestring, dtypes[d].name)) {
            t->dtype = (mi_st_dtype)d;
            t->dtype_name = dtypes[d].name;
            return 0;
        }
    return mi_set_error(err, "%s: tensor '%s' has unknown dtype '%s'", path, name,
                        nt_quote(q, sizeof q, j->valuestring, strlen(j->valuestring)));
}

static int parse_shape(const char *path, const char *name, const cJSON *j, mi_st_tensor *t, char *err)
{
    if (!cJSON_IsArray(j))
        return mi_set_error(err, "%s: tensor '%s' has no \"shape\" array", path, name);
    int n = cJSON_GetArraySize(j);
    if (n > MI_ST_MAX_DIMS)
        return mi_set_error(err, "%s: tensor '%s' has %d dims (at most %d)", path, name, n, MI_ST_MAX_DIMS);
    t->n_dims = n;
    int d = 0;
    for (const cJSON *e = j->child; e; e = e->next, d++) {
        uint64_t v;
        if (json_uint(e, &v))
            return mi_set_error(err, "%s: tensor '%s' shape[%d] is not a whole number in [0, 2^53]", path, name, d);
        t->shape[d] = (int64_t)v;
    }
    return 0;
}

/* [begin, end] inside the data section of dlen bytes, matching the shape. */
static int parse_offsets(const char *path, const char *name, const cJSON *j, uint64_t dlen, mi_st_tensor *t,
                         uint64_t *begin, char *err)
{
    uint64_t b, e, need = mi_st_dtype_size(t->dtype);
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2 || json_uint(j->child, &b) || json_uint(j->child->next, &e))
        return mi_set_error(err, "%s: tensor '%s' has no \"data_offsets\" [begin, end] of whole numbers", path, name);
    if (b > e)
        return mi_set_error(err, "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                            path, name, b, e);
    if (e > dlen)
        return mi_set_error(err, "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] run past the end of the "
                            "data section (%" PRIu64 " bytes)", path, name, b, e, dlen);
    int over = 0;
    for (int d = 0; d < t->n_dims; d++)
        over |= nt_mul_u64(need, (uint64_t)t->shape[d], &need);
    if (over || need != e - b) {
        char shape[160] = "";
        for (int d = 0, o = 0; d < t->n_dims && o < (int)sizeof shape; d++)
            o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%" PRId64, d ? ", " : "", t->shape[d]);
        if (over)
            return mi_set_error(err, "%s: tensor '%s' shape [%s] is too large (its size overflows 64 bits)", path,
                                name, shape);
        return mi_set_error(err, "%s: tensor '%s' size mismatch: %s [%s] needs %" PRIu64 " bytes, its data_offsets "
                            "[%" PRIu64 ", %" PRIu64 "] hold %" PRIu64, path, name, t->dtype_name, shape, need, b, e,
                            e - b);
    }
    *begin = b;
    t->size = (size_t)need;
    return 0;
}

/* One header entry besides __metadata__: exactly dtype, shape, data_offsets. */
static int parse_entry(mi_st *st, int shard, const cJSON *j, const unsigned char *data, uint64_t dlen, char *err)
{
    const char *path = st->shards[shard].path;
    char q[NT_QUOTE_LEN];
    const char *name = nt_quote(q, sizeof q, j->string, strlen(j->string));
    if (!j->string[0])
        return mi_set_error(err, "%s: a tensor has an empty name", path);
    if (!cJSON_IsObject(j))
        return mi_set_error(err, "%s: tensor '%s' is not an object", path, name);
    for (const cJSON *k = j->child; k; k = k->next)
        if (strcmp(k->string, "dtype") && strcmp(k->string, "shape") && strcmp(k->string, "data_offsets")) {
            char kq[NT_QUOTE_LEN];
            return mi_set_error(err, "%s: tensor '%s' has unknown key '%s' (dtype, shape and data_offsets are "
                                "allowed)", path, name, nt_quote(kq, sizeof kq, k->string, strlen(k->string)));
        }
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 64;
        mi_st_tensor *t = realloc(st->t, cap * sizeof *t);
        if (!t)
            return mi_set_error(err, "%s: out of memory", path);
        st->t = t;
        st->cap = cap;
    }
    mi_st_tensor *t = &st->t[st->n];
    memset(t, 0, sizeof *t);
    uint64_t begin = 0;
    if (parse_dtype(path, name, cJSON_GetObjectItemCaseSensitive(j, "dtype"), t, err) ||
        parse_shape(path, name, cJSON_GetObjectItemCaseSensitive(j, "shape"), t, err) ||
        parse_offsets(path, name, cJSON_GetObjectItemCaseSensitive(j, "data_offsets"), dlen, t, &begin, err))
        return -1;
    if (!(t->name = strdup(j->string)))
        return mi_set_error(err, "%s: out of memory", path);
    t->data = t->size ? data + begin : NULL;
    t->shard = shard;
    st->n++;
    return 0;
}

/* ------------------------------------------------------------ one file */

static int check_metadata(const char *path, const cJSON *m, char *err)
{
    if (!cJSON_IsObject(m))
        return mi_set_error(err, "%s: __metadata__ is not an object", path);
    for (const cJSON *e = m->child; e; e = e->next)
        if (!cJSON_IsString(e))
            return mi_set_error(err, "%s: __metadata__ is not a map of strings", path);
    return 0;
}

/* The tensors of shard s (first..st->n-1) do not overlap. */
static int check_overlaps(mi_st *st, int s, size_t first, const unsigned char *data, char *err)
{
    size_t n = st->n - first, a, b;
    fu_span *sp = malloc((n + 1) * sizeof *sp);
    if (!sp)
        return mi_set_error(err, "%s: out of memory", st->shards[s].path);
    for (size_t i = 0; i < n; i++) {
        const mi_st_tensor *t = &st->t[first + i];
        sp[i] = (fu_span){t->data ? (uint64_t)((const unsigned char *)t->data - data) : 0, t->size, first + i};
    }
    int over = fu_overlap(sp, n, &a, &b);
    free(sp);
    if (!over)
        return 0;
    const mi_st_tensor *x = &st->t[a], *y = &st->t[b];
    uint64_t xo = (uint64_t)((const unsigned char *)x->data - data), yo = (uint64_t)((const unsigned char *)y->data - data);
    char qx[NT_QUOTE_LEN], qy[NT_QUOTE_LEN];
    return mi_set_error(err, "%s: tensors '%s' and '%s' overlap (data bytes [%" PRIu64 ", %" PRIu64 ") and [%" PRIu64
                        ", %" PRIu64 "))", st->shards[s].path, nt_quote(qx, sizeof qx, x->name, strlen(x->name)),
                        nt_quote(qy, sizeof qy, y->name, strlen(y->name)), xo, xo + x->size, yo, yo + y->size);
}

/* The JSON header of shard s, at most MI_ST_MAX_HEADER bytes inside the file. */
static cJSON *parse_header(const st_shard *sh, uint64_t *hlen, char *err)
{
    if (sh->size < 8) {
        mi_set_error(err, "%s: file is truncated: %" PRIu64 " bytes, the header length alone takes 8", sh->path,
                     sh->size);
        return NULL;
    }
    memcpy(hlen, sh->map, 8);
    if (*hlen > sh->size - 8) {
        mi_set_error(err, "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes after "
                     "it)", sh->path, *hlen, sh->size - 8);
        return NULL;
    }
    if (*hlen > MI_ST_MAX_HEADER) {
        mi_set_error(err, "%s: header length %" PRIu64 " is absurd (at most %u bytes)", sh->path, *hlen,
                     MI_ST_MAX_HEADER);
        return NULL;
    }
    char *text = malloc((size_t)*hlen + 1);
    if (!text) {
        mi_set_error(err, "%s: out of memory for a header of %" PRIu64 " bytes", sh->path, *hlen);
        return NULL;
    }
    memcpy(text, sh->map + 8, (size_t)*hlen);
    text[*hlen] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)*hlen, &end, 0);
    size_t at = end ? (size_t)(end - text) : 0;
    while (root && at < *hlen && text[at] == ' ') /* the format pads the header with spaces */
        at++;
    if (!root || at < *hlen)
        mi_set_error(err, "%s: header is not JSON (%s at byte %zu of %" PRIu64 ")", sh->path,
                     root ? "text after the object" : "syntax error", at, *hlen);
    else if (!cJSON_IsObject(root))
        mi_set_error(err, "%s: header is not a JSON object", sh->path);
    free(text);
    if (root && (at < *hlen || !cJSON_IsObject(root))) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static int load_shard(mi_st *st, int s, char *err)
{
    st_shard *sh = &st->shards[s];
    if (fu_map_file(sh->path, "safetensors file", &sh->map, &sh->size, err))
        return -1;
    uint64_t hlen;
    cJSON *root = parse_header(sh, &hlen, err);
    if (!root)
        return -1;
    const unsigned char *data = sh->map + 8 + hlen;
    uint64_t dlen = sh->size - 8 - hlen;
    size_t first = st->n;
    int rc = 0;
    for (const cJSON *j = root->child; j && !rc; j = j->next)
        rc = !strcmp(j->string, "__metadata__") ? check_metadata(sh->path, j, err)
                                                 : parse_entry(st, s, j, data, dlen, err);
    cJSON_Delete(root);
    return rc ? rc : check_overlaps(st, s, first, data, err);
}

/* ------------------------------------------------------------ the set */

static int add_shard(mi_st *st, const char *path, char *err)
{
    st_shard *s = realloc(st->shards, ((size_t)st->n_shards + 1) * sizeof *s);
    if (!s)
        return mi_set_error(err, "%s: out of memory", path);
    st->shards = s;
    s[st->n_shards] = (st_shard){.path = strdup(path)};
    if (!s[st->n_shards].path)
        return mi_set_error(err, "%s: out of memory", path);
    st->n_shards++;
    return 0;
}

/* The name table; a name twice is an error (in one header, or in two shards). */
static int index_names(mi_st *st, char *err)
{
    if (nt_init(&st->names, st->n))
        return mi_set_error(err, "%s: out of memory", st->shards[0].path);
    for (size_t i = 0; i < st->n; i++) {
        size_t first = nt_insert(&st->names, st->t[i].name, strlen(st->t[i].name), i);
        if (first == i)
            continue;
        char q[NT_QUOTE_LEN];
        const mi_st_tensor *a = &st->t[first], *b = &st->t[i];
        nt_quote(q, sizeof q, a->name, strlen(a->name));
        if (a->shard == b->shard)
            return mi_set_error(err, "%s: tensor '%s' appears twice in the header", st->shards[a->shard].path, q);
        return mi_set_error(err, "tensor '%s' is in two shards: %s and %s", q, st->shards[a->shard].path,
                            st->shards[b->shard].path);
    }
    return 0;
}

/* Forward: the index reader (below) needs add_shard and load_shard. */
static int open_index(mi_st *st, const char *dir, const char *index_path, char *err);

int mi_st_open(const char *path, mi_st **out, char *err)
{
    *out = NULL;
    mi_st *st = calloc(1, sizeof *st);
    if (!st)
        return mi_set_error(err, "%s: out of memory", path);
    struct stat sb;
    int rc;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path) + sizeof INDEX_NAME + 2;
        char *single = malloc(n), *index = malloc(n);
        if (!single || !index) {
            rc = mi_set_error(err, "%s: out of memory", path);
        } else {
            snprintf(single, n, "%s/%s", path, SINGLE_NAME);
            snprintf(index, n, "%s/%s", path, INDEX_NAME);
            if (stat(single, &sb) == 0)
                rc = add_shard(st, single, err) || load_shard(st, 0, err) || index_names(st, err) ? -1 : 0;
            else if (stat(index, &sb) == 0)
                rc = open_index(st, path, index, err);
            else
                rc = mi_set_error(err, "%s: folder holds neither %s nor %s", path, SINGLE_NAME, INDEX_NAME);
        }
        free(single);
        free(index);
    } else {
        rc = add_shard(st, path, err) || load_shard(st, 0, err) || index_names(st, err) ? -1 : 0;
    }
    if (rc) {
        mi_st_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

void mi_st_close(mi_st *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++)
        free((char *)st->t[i].name);
    free(st->t);
    for (int s = 0; s < st->n_shards; s++) {
        fu_unmap(st->shards[s].map, st->shards[s].size);
        free(st->shards[s].path);
    }
    free(st->shards);
    nt_free(&st->names);
    free(st);
}

size_t mi_st_n_tensors(const mi_st *st) { return st->n; }
int mi_st_n_shards(const mi_st *st) { return st->n_shards; }

const mi_st_tensor *mi_st_tensor_at(const mi_st *st, size_t i)
{
    return i < st->n ? &st->t[i] : NULL;
}

const mi_st_tensor *mi_st_find(const mi_st *st, const char *name)
{
    size_t i = nt_find(&st->names, name, strlen(name));
    return i == SIZE_MAX ? NULL : &st->t[i];
}

const char *mi_st_shard_path(const mi_st *st, int shard)
{
    return shard >= 0 && shard < st->n_shards ? st->shards[shard].path : NULL;
}

/* ------------------------------------------------------------ the index */

/* A shard name from the index: a plain file name in the folder. */
static int shard_name_ok(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Load every shard the weight map names (each once, in order of first
 * mention); *shard_of[k] is the shard of weight map entry k. */
static int load_shards(mi_st *st, const char *dir, const char *index_path, const cJSON *map, int *shard_of,
                       char *err)
{
    int k = 0;
    for (const cJSON *e = map->child; e; e = e->next, k++) {
        char q[NT_QUOTE_LEN];
        nt_quote(q, sizeof q, e->string, strlen(e->string));
        if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring))
            return mi_set_error(err, "%s: weight_map entry '%s' is not a file name in the folder", index_path, q);
        size_t n = strlen(dir) + strlen(e->valuestring) + 2;
        char *path = malloc(n);
        if (!path)
            return mi_set_error(err, "%s: out of memory", index_path);
        snprintf(path, n, "%s/%s", dir, e->valuestring);
        int s = 0;
        while (s < st->n_shards && strcmp(st->shards[s].path, path))
            s++;
        struct stat sb;
        int rc = 0;
        if (s == st->n_shards) {
            if (stat(path, &sb) != 0)
                rc = mi_set_error(err, "%s: shard %s (of tensor '%s') is missing", index_path, path, q);
            else
                rc = add_shard(st, path, err) || load_shard(st, s, err) ? -1 : 0;
        }
        free(path);
        if (rc)
            return -1;
        shard_of[k] = s;
    }
    return 0;
}

/* Every tensor of the weight map is in the shard it names; every tensor of
 * the shards is in the weight map. */
static int check_index(mi_st *st, const char *index_path, const cJSON *map, const int *shard_of, char *err)
{
    char *listed = calloc(st->n + 1, 1);
    if (!listed)
        return mi_set_error(err, "%s: out of memory", index_path);
    int k = 0, rc = 0;
    char q[NT_QUOTE_LEN];
    for (const cJSON *e = map->child; e && !rc; e = e->next, k++) {
        nt_quote(q, sizeof q, e->string, strlen(e->string));
        size_t i = nt_find(&st->names, e->string, strlen(e->string));
        if (i == SIZE_MAX)
            rc = mi_set_error(err, "%s: tensor '%s' is not in %s, the shard the index names", index_path, q,
                              st->shards[shard_of[k]].path);
        else if (st->t[i].shard != shard_of[k])
            rc = mi_set_error(err, "%s: tensor '%s' is in %s, not in %s as the index says", index_path, q,
                              st->shards[st->t[i].shard].path, st->shards[shard_of[k]].path);
        else if (listed[i])
            rc = mi_set_error(err, "%s: weight_map lists tensor '%s' twice", index_path, q);
        else
            listed[i] = 1;
    }
    for (size_t i = 0; i < st->n && !rc; i++)
        if (!listed[i])
            rc = mi_set_error(err, "%s: tensor '%s' of %s is not in the index's weight_map", index_path,
                              nt_quote(q, sizeof q, st->t[i].name, strlen(st->t[i].name)),
                              st->shards[st->t[i].shard].path);
    free(listed);
    return rc;
}

static int open_index(mi_st *st, const char *dir, const char *index_path, char *err)
{
    size_t len;
    char *text = mi_read_text_file(index_path, "safetensors index", MI_ST_MAX_HEADER, &len, err);
    if (!text)
        return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    int n = cJSON_GetArraySize(map), rc;
    int *shard_of = malloc(((size_t)n + 1) * sizeof *shard_of);
    if (!root || !cJSON_IsObject(root))
        rc = mi_set_error(err, "%s: not a JSON object", index_path);
    else if (!cJSON_IsObject(map) || n == 0)
        rc = mi_set_error(err, "%s: no \"weight_map\" object naming the tensors' shards", index_path);
    else if (!shard_of)
        rc = mi_set_error(err, "%s: out of memory", index_path);
    else
        rc = load_shards(st, dir, index_path, map, shard_of, err) || index_names(st, err) ||
                     check_index(st, index_path, map, shard_of, err) ? -1 : 0;
    free(shard_of);
    cJSON_Delete(root);
    return rc;
}
