/* Small GGUF and safetensors files written from C for test_formats (and the
 * fuzz seeds it can write): a valid file of each kind, and the same file with
 * one fault at a time. Test code only. */
#ifndef MESHINFER_FORMAT_FIXTURES_H
#define MESHINFER_FORMAT_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

/* ---- GGUF: 23 key/values (every value type, arrays of strings, numbers,
 * bools, arrays of arrays, an empty array) and 5 tensors. Version 3 sets
 * general.alignment 64; version 2 leaves the default (32). */
enum gguf_fault {
    GF_NONE,
    GF_MAGIC,        /* "GGUG" */
    GF_VERSION,      /* version fx_bad_version */
    GF_DUP_NAME,     /* tensor 3 named like tensor 1 */
    GF_OVERLAP,      /* tensor 2 at tensor 1's offset */
    GF_MISALIGN,     /* tensor 2's offset + 2 */
    GF_PAST_END,     /* tensor 4 at offset 1 MiB */
    GF_TYPE,         /* tensor 2 of ggml type id 99 */
    GF_TYPE_REMOVED, /* tensor 2 of type id 31 (Q4_0_4_4, removed) */
    GF_NDIMS5,       /* tensor 1 with 5 dims */
    GF_STRLEN,       /* general.architecture's length 2^40 */
    GF_ALIGN,        /* general.alignment 24 */
    GF_COUNT,        /* tokenizer.ggml.tokens claims 2^40 strings */
    GF_ROW,          /* the q8_0 tensor 48 wide, not a whole number of 32-blocks */
    GF_BOOL,         /* test.bool holds byte 2 */
    GF_VTYPE,        /* test.u8 of value type 13 */
    GF_DUP_KEY,      /* test.i8 renamed test.u8 */
    GF_NEG_DIM,      /* tensor 0 dims[1] = -3 */
    GF_NAME_CTRL,    /* tensor 3 named "blk.0\nffn" */
    GF_ARRAY_LONG,   /* tokenizer.ggml.scores claims 100000 f32 */
};
extern uint32_t fx_bad_version;

#define FX_GGUF_TENSORS 5
#define FX_GGUF_KVS 23
typedef struct {
    const char *name;
    int type, n_dims;
    int64_t dims[4];
    size_t size; /* bytes */
} fx_tensor;
extern const fx_tensor fx_gguf_tensors[FX_GGUF_TENSORS];

/* Where the file was written, to cut it there. */
typedef struct {
    size_t kv_cut;     /* inside test.u32's value */
    size_t ti_cut;     /* inside tensor info 0's dims[0] */
    size_t data_start; /* the data section */
    size_t size;       /* the whole file */
    size_t offset[FX_GGUF_TENSORS]; /* tensor offsets in the data section */
} gguf_marks;

/* Write the fixture (with one fault) to path; 0 or -1. */
int fx_write_gguf(const char *path, uint32_t version, enum gguf_fault fault, gguf_marks *m);

/* Byte j of fixture tensor t (tensor 0, f32, holds the floats 0.25 * j). */
uint8_t fx_tensor_byte(int t, size_t j);

/* ---- safetensors: the 8-byte header length, the header JSON padded with
 * spaces to a multiple of 8, and data_len data bytes, byte i being
 * fx_st_byte(i). hlen_override != 0 replaces the length field. */
int fx_write_st(const char *path, const char *json, size_t data_len, uint64_t hlen_override);

uint8_t fx_st_byte(size_t i);

/* The valid single file's header: 5 tensors over 56 data bytes. */
extern const char *const fx_st_json;

#endif
