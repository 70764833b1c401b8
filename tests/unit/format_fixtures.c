/* GGUF and safetensors fixtures for test_formats (see format_fixtures.h):
 * written field by field here, from the layouts in gguf.h and safetensors.h. */
#include "format_fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t fx_bad_version = 1;

/* ggml type ids: f32 0, f16 1, q4_0 2, q8_0 8, bf16 30 */
const fx_tensor fx_gguf_tensors[FX_GGUF_TENSORS] = {
    {"token_embd.weight", 0, 2, {4, 3, 1, 1}, 48},
    {"blk.0.attn_q.weight", 1, 2, {8, 2, 1, 1}, 32},
    {"blk.0.ffn_up.weight", 8, 2, {64, 2, 1, 1}, 2 * 2 * 34},
    {"blk.0.ffn_down.weight", 2, 2, {32, 3, 1, 1}, 3 * 18},
    {"output_norm.weight", 30, 1, {4, 1, 1, 1}, 8},
};

uint8_t fx_tensor_byte(int t, size_t j)
{
    if (t == 0) { /* floats 0.25 * k */
        float f = 0.25f * (float)(j / 4);
        uint8_t b[4];
        memcpy(b, &f, 4);
        return b[j % 4];
    }
    return (uint8_t)(t * 31 + j * 7 + 1);
}

uint8_t fx_st_byte(size_t i) { return (uint8_t)(i * 3 + 1); }

/* ------------------------------------------------------------ a byte buffer */

typedef struct {
    unsigned char *b;
    size_t n, cap;
} gbuf;

static void put(gbuf *g, const void *p, size_t n)
{
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2 + 256;
        g->b = realloc(g->b, g->cap);
        if (!g->b)
            abort();
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}

static void put_u8(gbuf *g, uint8_t v) { put(g, &v, 1); }
static void put_u16(gbuf *g, uint16_t v) { put(g, &v, 2); }
static void put_u32(gbuf *g, uint32_t v) { put(g, &v, 4); }
static void put_u64(gbuf *g, uint64_t v) { put(g, &v, 8); }
static void put_f32(gbuf *g, float v) { put(g, &v, 4); }
static void put_f64(gbuf *g, double v) { put(g, &v, 8); }
static void put_str(gbuf *g, const char *s)
{
    put_u64(g, strlen(s));
    put(g, s, strlen(s));
}
static void pad_to(gbuf *g, size_t at)
{
    while (g->n < at)
        put_u8(g, 0);
}

/* A key and its value type. */
static void key(gbuf *g, const char *k, uint32_t type)
{
    put_str(g, k);
    put_u32(g, type);
}

/* An array header: type 9, element type, count. */
static void arr(gbuf *g, const char *k, uint32_t elem, uint64_t n)
{
    key(g, k, 9);
    put_u32(g, elem);
    put_u64(g, n);
}

/* ------------------------------------------------------------ GGUF */

/* The scalar key/values: one of each of the 12 scalar types (and two u64). */
static void scalars(gbuf *g, uint32_t version, enum gguf_fault fault, gguf_marks *m)
{
    key(g, "general.architecture", 8);
    if (fault == GF_STRLEN) {
        put_u64(g, 1ull << 40);
        put(g, "llama", 5);
    } else {
        put_str(g, "llama");
    }
    if (version == 3) {
        key(g, "general.alignment", 4);
        put_u32(g, fault == GF_ALIGN ? 24 : 64);
    } else {
        key(g, "general.name", 8); /* same count of key/values in both versions */
        put_str(g, "fixture v2");
    }
    key(g, "test.u8", fault == GF_VTYPE ? 13 : 0);
    put_u8(g, 200);
    key(g, fault == GF_DUP_KEY ? "test.u8" : "test.i8", 1);
    put_u8(g, (uint8_t)-100);
    key(g, "test.u16", 2);
    put_u16(g, 60000);
    key(g, "test.i16", 3);
    put_u16(g, (uint16_t)-30000);
    key(g, "test.u32", 4);
    m->kv_cut = g->n + 2;
    put_u32(g, 4000000000u);
    key(g, "test.i32", 5);
    put_u32(g, (uint32_t)-2000000000);
    key(g, "test.f32", 6);
    put_f32(g, 1.5f);
    key(g, "test.bool", 7);
    put_u8(g, fault == GF_BOOL ? 2 : 1);
    key(g, "test.u64", 10);
    put_u64(g, 1ull << 40);
    key(g, "test.u64_small", 10);
    put_u64(g, 7);
    key(g, "test.i64", 11);
    put_u64(g, (uint64_t)-5);
    key(g, "test.f64", 12);
    put_f64(g, 0.25);
}

/* The arrays: strings, f32, i32, u8, f64, bool, arrays of i32 and of
 * strings, an empty one. */
static void arrays(gbuf *g, enum gguf_fault fault)
{
    const char *tokens[] = {"<unk>", "hello", "", "w\xc3\xb6rld"};
    arr(g, "tokenizer.ggml.tokens", 8, fault == GF_COUNT ? 1ull << 40 : 4);
    for (int i = 0; i < 4; i++)
        put_str(g, tokens[i]);
    arr(g, "tokenizer.ggml.scores", 6, fault == GF_ARRAY_LONG ? 100000 : 4);
    const float scores[] = {0.0f, -1.5f, 2.25f, 3.0f};
    for (int i = 0; i < 4; i++)
        put_f32(g, scores[i]);
    arr(g, "tokenizer.ggml.token_type", 5, 4);
    const int32_t types[] = {2, 1, 1, -1};
    for (int i = 0; i < 4; i++)
        put_u32(g, (uint32_t)types[i]);
    arr(g, "test.arr_u8", 0, 3);
    put_u8(g, 1);
    put_u8(g, 2);
    put_u8(g, 255);
    arr(g, "test.arr_f64", 12, 2);
    put_f64(g, 0.5);
    put_f64(g, 1e300);
    arr(g, "test.arr_bool", 7, 2);
    put_u8(g, 1);
    put_u8(g, 0);
    arr(g, "test.nested", 9, 2); /* [[1, 2], [3]] */
    put_u32(g, 5);
    put_u64(g, 2);
    put_u32(g, 1);
    put_u32(g, 2);
    put_u32(g, 5);
    put_u64(g, 1);
    put_u32(g, 3);
    arr(g, "test.nested_str", 9, 1); /* [["a", "bc"]] */
    put_u32(g, 8);
    put_u64(g, 2);
    put_str(g, "a");
    put_str(g, "bc");
    arr(g, "test.empty", 4, 0);
}

/* Tensor info i with the fault applied. */
static void tensor_info(gbuf *g, int i, uint64_t offset, enum gguf_fault fault)
{
    const fx_tensor *t = &fx_gguf_tensors[i];
    const char *name = fault == GF_DUP_NAME && i == 3 ? fx_gguf_tensors[1].name : t->name;
    put_str(g, fault == GF_NAME_CTRL && i == 3 ? "blk.0\nffn" : name);
    int n_dims = fault == GF_NDIMS5 && i == 1 ? 5 : t->n_dims;
    put_u32(g, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++) {
        int64_t v = d < 4 ? t->dims[d] : 1;
        if (fault == GF_ROW && i == 2 && d == 0)
            v = 48;
        if (fault == GF_NEG_DIM && i == 0 && d == 1)
            v = -3;
        put_u64(g, (uint64_t)v);
    }
    int type = t->type;
    if ((fault == GF_TYPE || fault == GF_TYPE_REMOVED) && i == 2)
        type = fault == GF_TYPE ? 99 : 31;
    put_u32(g, (uint32_t)type);
    put_u64(g, offset);
}

int fx_write_gguf(const char *path, uint32_t version, enum gguf_fault fault, gguf_marks *m)
{
    gbuf g = {0};
    size_t align = version == 3 ? 64 : 32;
    put(&g, fault == GF_MAGIC ? "GGUG" : "GGUF", 4);
    put_u32(&g, fault == GF_VERSION ? fx_bad_version : version);
    put_u64(&g, FX_GGUF_TENSORS);
    put_u64(&g, FX_GGUF_KVS);
    scalars(&g, version, fault, m);
    arrays(&g, fault);
    size_t off = 0;
    for (int i = 0; i < FX_GGUF_TENSORS; i++) {
        off = (off + align - 1) / align * align;
        m->offset[i] = off;
        off += fx_gguf_tensors[i].size;
    }
    m->ti_cut = g.n + 8 + strlen(fx_gguf_tensors[0].name) + 4 + 3;
    for (int i = 0; i < FX_GGUF_TENSORS; i++) {
        uint64_t o = m->offset[i];
        if (fault == GF_OVERLAP && i == 2)
            o = m->offset[1];
        if (fault == GF_MISALIGN && i == 2)
            o += 2;
        if (fault == GF_PAST_END && i == 4)
            o = 1u << 20;
        tensor_info(&g, i, o, fault);
    }
    m->data_start = (g.n + align - 1) / align * align;
    for (int i = 0; i < FX_GGUF_TENSORS; i++) {
        pad_to(&g, m->data_start + m->offset[i]);
        for (size_t j = 0; j < fx_gguf_tensors[i].size; j++)
            put_u8(&g, fx_tensor_byte(i, j));
    }
    m->size = g.n;
    FILE *f = fopen(path, "wb");
    int rc = f && fwrite(g.b, 1, g.n, f) == g.n ? 0 : -1;
    if (f && fclose(f))
        rc = -1;
    free(g.b);
    return rc;
}

/* ------------------------------------------------------------ safetensors */

const char *const fx_st_json =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[3,4],\"data_offsets\":[0,24]},"
    "\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]},"
    "\"lm_head.weight\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[40,48]},"
    "\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[48,56]},"
    "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[56,56]}}";

int fx_write_st(const char *path, const char *json, size_t data_len, uint64_t hlen_override)
{
    size_t n = strlen(json), padded = (n + 7) / 8 * 8;
    uint64_t hlen = hlen_override ? hlen_override : padded;
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int rc = fwrite(&hlen, 8, 1, f) == 1 && fwrite(json, 1, n, f) == n ? 0 : -1;
    for (size_t i = n; i < padded && !rc; i++)
        rc = fputc(' ', f) == EOF;
    for (size_t i = 0; i < data_len && !rc; i++)
        rc = fputc(fx_st_byte(i), f) == EOF;
    if (fclose(f))
        rc = -1;
    return rc;
}
