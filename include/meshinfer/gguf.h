/* A strict reader of GGUF files (llama.cpp's model format, versions 2 and 3),
 * for importing models people hold.
 *
 * Layout (all integers little-endian): "GGUF", u32 version, u64 n_tensors,
 * u64 n_kv; n_kv key/values (string key, u32 value type, value); n_tensors
 * tensor infos (string name, u32 n_dims, n_dims u64 dims, u32 ggml type id,
 * u64 offset); padding to general.alignment (default 32); the data section.
 * A string is a u64 byte count and that many bytes, not NUL-terminated. An
 * array value is a u32 element type, a u64 count and the elements (arrays may
 * nest). Version 1 (32-bit counts) and big-endian files are refused.
 *
 * mi_gguf_open maps the file read-only and checks everything before it
 * returns: every length and count against the bytes left in the file, every
 * value type, key and tensor name unique, the alignment a power of two, every
 * tensor's ggml type known, its first dim a whole number of blocks, its offset
 * aligned, its data inside the file and not overlapping another's. After a
 * successful open no accessor can read outside the map.
 *
 * Little-endian hosts only (the file's integers are read with memcpy, so
 * unaligned fields are fine, but never byte-swapped). Files may be opened in
 * several threads at once; the accessors only read. */
#ifndef MESHINFER_GGUF_H
#define MESHINFER_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MI_GGUF_MAX_DIMS 4          /* ggml's GGML_MAX_DIMS */
#define MI_GGUF_MAX_NAME 63         /* longest tensor name ggml stores (bytes) */
#define MI_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types, as the file numbers them. */
enum mi_gguf_vtype {
    MI_GGUF_U8 = 0, MI_GGUF_I8 = 1, MI_GGUF_U16 = 2, MI_GGUF_I16 = 3, MI_GGUF_U32 = 4, MI_GGUF_I32 = 5,
    MI_GGUF_F32 = 6, MI_GGUF_BOOL = 7, MI_GGUF_STRING = 8, MI_GGUF_ARRAY = 9, MI_GGUF_U64 = 10,
    MI_GGUF_I64 = 11, MI_GGUF_F64 = 12, MI_GGUF_NVTYPES = 13
};

/* ggml type ids of the tensors (ids 4, 5, 31-33 and 36-38 were removed from
 * ggml and are refused like any unknown id). */
enum mi_ggml_type {
    MI_GGML_F32 = 0, MI_GGML_F16 = 1, MI_GGML_Q4_0 = 2, MI_GGML_Q4_1 = 3, MI_GGML_Q5_0 = 6,
    MI_GGML_Q5_1 = 7, MI_GGML_Q8_0 = 8, MI_GGML_Q8_1 = 9, MI_GGML_Q2_K = 10, MI_GGML_Q3_K = 11,
    MI_GGML_Q4_K = 12, MI_GGML_Q5_K = 13, MI_GGML_Q6_K = 14, MI_GGML_Q8_K = 15, MI_GGML_IQ2_XXS = 16,
    MI_GGML_IQ2_XS = 17, MI_GGML_IQ3_XXS = 18, MI_GGML_IQ1_S = 19, MI_GGML_IQ4_NL = 20, MI_GGML_IQ3_S = 21,
    MI_GGML_IQ2_S = 22, MI_GGML_IQ4_XS = 23, MI_GGML_I8 = 24, MI_GGML_I16 = 25, MI_GGML_I32 = 26,
    MI_GGML_I64 = 27, MI_GGML_F64 = 28, MI_GGML_IQ1_M = 29, MI_GGML_BF16 = 30, MI_GGML_TQ1_0 = 34,
    MI_GGML_TQ2_0 = 35, MI_GGML_MXFP4 = 39
};

typedef struct mi_gguf mi_gguf;

/* One tensor, as the file describes it. dims are in GGUF (ggml) order:
 * dims[0] is the contiguous, innermost axis (a matrix's number of columns),
 * dims[n_dims-1] the outermost; dims[n_dims..3] are 1. data points into the
 * map (aligned to the file's alignment relative to the data section, which
 * itself starts at an aligned file offset) and holds size bytes:
 * dims[0] / block elements * block bytes * dims[1] * dims[2] * dims[3]. */
typedef struct {
    const char *name;    /* NUL-terminated, 1 to MI_GGUF_MAX_NAME bytes, no control characters */
    int n_dims;          /* 0..4 (0: a scalar) */
    int64_t dims[MI_GGUF_MAX_DIMS];
    int type;            /* enum mi_ggml_type */
    const char *type_name; /* ggml's name: "f32", "q8_0", "q4_K", "bf16", ... */
    uint64_t offset;     /* from the start of the data section */
    const void *data;    /* NULL when size is 0 */
    size_t size;         /* bytes */
} mi_gguf_tensor;

/* An array value (see mi_gguf_get_arr). */
typedef struct {
    const mi_gguf *g;
    int64_t kv;          /* index of its key/value */
    int elem_type;       /* enum mi_gguf_vtype of the elements */
    uint64_t count;      /* number of elements */
} mi_gguf_arr;

/* Map and validate the GGUF file at path. Returns 0 with *out set (free with
 * mi_gguf_close), or -1 with one line in err (MI_ERRLEN bytes) naming the
 * file and the problem: the key/value or tensor (by index and name), the
 * offset, the bytes needed and present. */
int mi_gguf_open(const char *path, mi_gguf **out, char *err);
void mi_gguf_close(mi_gguf *g);

uint32_t mi_gguf_version(const mi_gguf *g);   /* 2 or 3 */
uint64_t mi_gguf_alignment(const mi_gguf *g); /* bytes, a power of two */
uint64_t mi_gguf_data_start(const mi_gguf *g); /* file offset of the data section */

/* ---- ggml types: name ("q4_K"), elements per block and bytes per block.
 * The name is NULL, and the sizes 0, for an id ggml does not define. */
const char *mi_gguf_type_name(int type);
int mi_gguf_type_block(int type);   /* elements per block: 1, 32 or 256 */
int mi_gguf_type_size(int type);    /* bytes per block */
/* Name of a metadata value type ("u32", "string", "array", ...); "?" if unknown. */
const char *mi_gguf_vtype_name(int vtype);

/* ---- metadata. Keys are indexed 0..mi_gguf_n_kv()-1 in file order. */
int64_t mi_gguf_n_kv(const mi_gguf *g);
/* Index of key (O(1), hashed), or -1 when absent. */
int64_t mi_gguf_find_key(const mi_gguf *g, const char *key);
const char *mi_gguf_key(const mi_gguf *g, int64_t i);   /* NUL-terminated; NULL if i is out of range */
int mi_gguf_kv_type(const mi_gguf *g, int64_t i);        /* enum mi_gguf_vtype; -1 if out of range */

/* The typed getters below return 0 on success, 1 when the key is absent
 * (err untouched, output untouched), -1 with err naming the key when its value
 * has another type or does not fit the output. */
/* A string: *s points into the map, *len bytes, NOT NUL-terminated. */
int mi_gguf_get_str(const mi_gguf *g, const char *key, const char **s, size_t *len, char *err);
/* A string copied into buf[n] with a NUL; -1 also when it needs more than n-1 bytes. */
int mi_gguf_get_str_copy(const mi_gguf *g, const char *key, char *buf, size_t n, char *err);
/* Any integer type (u8..i64) whose value fits the output. */
int mi_gguf_get_u32(const mi_gguf *g, const char *key, uint32_t *v, char *err);
int mi_gguf_get_i32(const mi_gguf *g, const char *key, int32_t *v, char *err);
/* f32, or f64 within float range (NaN and infinities pass through). */
int mi_gguf_get_f32(const mi_gguf *g, const char *key, float *v, char *err);
int mi_gguf_get_bool(const mi_gguf *g, const char *key, bool *v, char *err);

/* An array: fills *a (element type, count). 0, 1 when absent, -1 when the
 * value is not an array. */
int mi_gguf_get_arr(const mi_gguf *g, const char *key, mi_gguf_arr *a, char *err);
/* Element i of a string array (O(1): offsets are indexed at open): *s into
 * the map, *len bytes, not NUL-terminated. -1 with err naming the key when the
 * array holds another type or i >= count. */
int mi_gguf_arr_str(const mi_gguf_arr *a, uint64_t i, const char **s, size_t *len, char *err);
/* Element i of a numeric array, converted as the scalar getters do: f32 from
 * f32 or f64 elements, i32 and u32 from any integer elements whose value fits.
 * Arrays of arrays hold no directly readable elements (-1). */
int mi_gguf_arr_f32(const mi_gguf_arr *a, uint64_t i, float *v, char *err);
int mi_gguf_arr_i32(const mi_gguf_arr *a, uint64_t i, int32_t *v, char *err);
int mi_gguf_arr_u32(const mi_gguf_arr *a, uint64_t i, uint32_t *v, char *err);

/* ---- tensors, indexed 0..mi_gguf_n_tensors()-1 in file order. */
int64_t mi_gguf_n_tensors(const mi_gguf *g);
const mi_gguf_tensor *mi_gguf_tensor_at(const mi_gguf *g, int64_t i); /* NULL if out of range */
/* By name (O(1), hashed); NULL when absent. */
const mi_gguf_tensor *mi_gguf_find_tensor(const mi_gguf *g, const char *name);

#endif
