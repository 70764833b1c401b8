/* A strict reader of safetensors files and Hugging Face model folders, for
 * importing models people hold.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON header, then the data section. The header is an object: an optional
 * "__metadata__" (a map of strings, ignored here) and, for each tensor,
 * {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]},
 * offsets in bytes from the start of the data section.
 *
 * A folder holds either model.safetensors or model.safetensors.index.json,
 * whose "weight_map" maps every tensor name to the shard file (in the same
 * folder, e.g. model-00001-of-00002.safetensors) that holds it.
 *
 * mi_st_open maps every file read-only and checks everything before it
 * returns: the header length within the file and at most 100 MB, the header
 * a JSON object, every dtype known, every shape at most 8 non-negative ints,
 * begin <= end inside the data section, end - begin = product(shape) * dtype
 * size, no two tensors' bytes overlapping; for a folder, every shard the
 * index names present, every tensor where the index says, none in two
 * shards, none the index leaves out. After a successful open no accessor can
 * read outside the maps.
 *
 * Little-endian hosts only (the data stays in the file's little-endian
 * layout). Tensor data is not necessarily aligned: copy with memcpy. */
#ifndef MESHINFER_SAFETENSORS_H
#define MESHINFER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define MI_ST_MAX_DIMS 8
#define MI_ST_MAX_HEADER (100u << 20) /* bytes of JSON header */

typedef enum {
    MI_ST_F64, MI_ST_F32, MI_ST_F16, MI_ST_BF16, MI_ST_I64, MI_ST_I32, MI_ST_I16, MI_ST_I8, MI_ST_U8,
    MI_ST_BOOL, MI_ST_F8_E4M3, MI_ST_F8_E5M2, MI_ST_U16, MI_ST_U32, MI_ST_U64, MI_ST_NDTYPES
} mi_st_dtype;

typedef struct mi_st mi_st;

/* One tensor. shape is in the file's (PyTorch's) order: shape[n_dims-1] is
 * the contiguous axis (a matrix [rows, cols] is stored row by row). n_dims 0
 * is a scalar (one element). data points into the shard's map. */
typedef struct {
    const char *name;        /* NUL-terminated */
    mi_st_dtype dtype;
    const char *dtype_name;  /* as in the file: "BF16", "F32", ... */
    int n_dims;              /* 0..MI_ST_MAX_DIMS */
    int64_t shape[MI_ST_MAX_DIMS];
    const void *data;        /* NULL when size is 0 */
    size_t size;             /* bytes: product(shape) * mi_st_dtype_size(dtype) */
    int shard;               /* which file: 0..mi_st_n_shards()-1 */
} mi_st_tensor;

/* Open a .safetensors file, or a folder holding model.safetensors (used when
 * both are there) or model.safetensors.index.json and its shards. Returns 0
 * with *out set (free with mi_st_close), or -1 with one line in err
 * (MI_ERRLEN bytes) naming the file, the tensor and the problem. */
int mi_st_open(const char *path, mi_st **out, char *err);
void mi_st_close(mi_st *st);

/* Tensors in order: shard by shard, in each shard in header order. */
size_t mi_st_n_tensors(const mi_st *st);
const mi_st_tensor *mi_st_tensor_at(const mi_st *st, size_t i); /* NULL if out of range */
/* By name (O(1), hashed); NULL when absent. */
const mi_st_tensor *mi_st_find(const mi_st *st, const char *name);

/* The files read: 1 for a single file; the shards' paths in the order the
 * index first names them. */
int mi_st_n_shards(const mi_st *st);
const char *mi_st_shard_path(const mi_st *st, int shard); /* NULL if out of range */

/* "BF16"... for a dtype, NULL if out of range; bytes per element, 0 if out of range. */
const char *mi_st_dtype_name(mi_st_dtype d);
size_t mi_st_dtype_size(mi_st_dtype d);

#endif
