/* Internal to src/model/: what the GGUF reader's two files share. gguf.c
 * opens the file, reads the header and the tensor infos; gguf_meta.c has the
 * read primitives (gg_*), reads the key/values and answers the metadata
 * getters. Calls go one way, gguf.c to gguf_meta.c. Public: meshinfer/gguf.h. */
#ifndef MESHINFER_GGUF_INTERNAL_H
#define MESHINFER_GGUF_INTERNAL_H

#include <stdint.h>

#include "format_util.h"
#include "meshinfer/gguf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader reads little-endian integers in place: little-endian hosts only"
#endif

typedef struct {
    char *key;         /* NUL-terminated copy */
    size_t key_len;
    int type;          /* enum mi_gguf_vtype */
    uint64_t pos;      /* file offset of the value; for arrays, of the first element */
    int elem_type;     /* arrays: the elements' type */
    uint64_t count;    /* arrays: the number of elements */
    uint64_t *str_pos; /* arrays of strings: file offset of element i's length */
} gguf_kv;

struct mi_gguf {
    char *path;
    const unsigned char *map;
    uint64_t size;
    uint32_t version;
    uint64_t alignment, data_start;
    int64_t n_kv, n_tensors;
    /* entries allocated: the counts, or fewer when the bytes left cannot
     * hold them (such a file is truncated and fails before going further) */
    int64_t kv_cap, tensor_cap;
    gguf_kv *kv;
    nt_table kv_names;
    mi_gguf_tensor *tensors;
    nt_table tensor_names;
};

/* A read position in the map; where says what is being read ("in the
 * header", "in key-value 3 'general.name'") for truncation messages. */
typedef struct {
    const unsigned char *b;
    uint64_t size, pos;
    const char *path;
    char *err;
    char where[160];
} gg_cur;

/* n more bytes must be there; -1 with "truncated <where>" otherwise. */
int gg_need(gg_cur *c, uint64_t n);
int gg_u32(gg_cur *c, uint32_t *v);
int gg_u64(gg_cur *c, uint64_t *v);
/* A string: length and bytes (in the map, not NUL-terminated). */
int gg_str(gg_cur *c, const char **s, uint64_t *len);

/* Read g->n_kv key/values at c (gguf_meta.c); fills g->kv and g->kv_names. */
int gguf_read_kvs(mi_gguf *g, gg_cur *c, char *err);
void gguf_free_kvs(mi_gguf *g);

#endif
