/* CUnit tests for the GGUF and safetensors readers (src/model/gguf.c,
 * gguf_meta.c, safetensors.c): fixture files written here
 * (format_fixtures.c) read back value by value, then one fault at a time,
 * each refused with one line naming the file and the problem.
 *
 * Usage: test_formats   (scratch files go to a mkdtemp directory under
 * $TMPDIR or /tmp and are removed at the end).
 * MESHINFER_FORMAT_SEEDS=DIR: also write the valid fixtures into DIR/gguf and
 * DIR/safetensors (the fuzz seeds in fuzz/corpus/ were made so). */
#define _POSIX_C_SOURCE 200809L

#include "format_fixtures.h"
#include "meshinfer/common.h"
#include "meshinfer/gguf.h"
#include "meshinfer/safetensors.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[4096];
static char err[MI_ERRLEN];

static int suite_init(void) { return tu_make_scratch(g_dir, sizeof g_dir, "test_formats"); }
static int suite_clean(void) { return tu_rm_tree(g_dir) == 0 ? 0 : -1; }

/* ------------------------------------------------------------ GGUF: valid */

static void check_scalars(const mi_gguf *g)
{
    const char *s;
    size_t len;
    char buf[16];
    uint32_t u = 77;
    int32_t i = 77;
    float f;
    bool b = false;
    CU_ASSERT_EQUAL(mi_gguf_get_str(g, "general.architecture", &s, &len, err), 0);
    CU_ASSERT(len == 5 && !memcmp(s, "llama", 5));
    CU_ASSERT_EQUAL(mi_gguf_get_str_copy(g, "general.architecture", buf, sizeof buf, err), 0);
    CU_ASSERT_STRING_EQUAL(buf, "llama");
    CU_ASSERT_EQUAL(mi_gguf_get_str_copy(g, "general.architecture", buf, 5, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "5 bytes, longer than the 4 allowed"));
    CU_ASSERT(mi_gguf_get_u32(g, "test.u8", &u, err) == 0 && u == 200);
    CU_ASSERT(mi_gguf_get_i32(g, "test.i8", &i, err) == 0 && i == -100);
    CU_ASSERT_EQUAL(mi_gguf_get_u32(g, "test.i8", &u, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "key 'test.i8' holds an i8 -100, out of the range of a u32"));
    CU_ASSERT(mi_gguf_get_u32(g, "test.u16", &u, err) == 0 && u == 60000);
    CU_ASSERT(mi_gguf_get_i32(g, "test.i16", &i, err) == 0 && i == -30000);
    CU_ASSERT(mi_gguf_get_u32(g, "test.u32", &u, err) == 0 && u == 4000000000u);
    CU_ASSERT_EQUAL(mi_gguf_get_i32(g, "test.u32", &i, err), -1);
    CU_ASSERT(mi_gguf_get_i32(g, "test.i32", &i, err) == 0 && i == -2000000000);
    CU_ASSERT(mi_gguf_get_f32(g, "test.f32", &f, err) == 0 && f == 1.5f);
    CU_ASSERT(mi_gguf_get_f32(g, "test.f64", &f, err) == 0 && f == 0.25f);
    CU_ASSERT_EQUAL(mi_gguf_get_f32(g, "test.u32", &f, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "holds a u32 4000000000, not an f32"));
    CU_ASSERT(mi_gguf_get_bool(g, "test.bool", &b, err) == 0 && b);
    CU_ASSERT_EQUAL(mi_gguf_get_bool(g, "test.u8", &b, err), -1);
    u = 77;
    CU_ASSERT_EQUAL(mi_gguf_get_u32(g, "test.u64", &u, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "u64 1099511627776, out of the range of a u32"));
    CU_ASSERT_EQUAL(u, 77);
    CU_ASSERT(mi_gguf_get_u32(g, "test.u64_small", &u, err) == 0 && u == 7);
    CU_ASSERT(mi_gguf_get_i32(g, "test.i64", &i, err) == 0 && i == -5);
    CU_ASSERT_EQUAL(mi_gguf_get_u32(g, "general.architecture", &u, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "key 'general.architecture' holds a string, not a u32"));
    /* absent: 1, output and err untouched */
    strcpy(err, "untouched");
    CU_ASSERT_EQUAL(mi_gguf_get_u32(g, "llama.block_count", &u, err), 1);
    CU_ASSERT_EQUAL(mi_gguf_get_str(g, "nope", &s, &len, err), 1);
    CU_ASSERT_STRING_EQUAL(err, "untouched");
    CU_ASSERT_EQUAL(u, 7);
}

static void check_arrays(const mi_gguf *g)
{
    mi_gguf_arr a;
    const char *s;
    size_t len;
    float f;
    int32_t i;
    uint32_t u;
    const char *tokens[] = {"<unk>", "hello", "", "w\xc3\xb6rld"};
    CU_ASSERT_EQUAL_FATAL(mi_gguf_get_arr(g, "tokenizer.ggml.tokens", &a, err), 0);
    CU_ASSERT(a.elem_type == MI_GGUF_STRING && a.count == 4);
    for (uint64_t k = 0; k < 4; k++) {
        CU_ASSERT_EQUAL(mi_gguf_arr_str(&a, k, &s, &len, err), 0);
        CU_ASSERT(len == strlen(tokens[k]) && !memcmp(s, tokens[k], len));
    }
    CU_ASSERT_EQUAL(mi_gguf_arr_str(&a, 4, &s, &len, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "key 'tokenizer.ggml.tokens' has 4 elements, element 4 was asked for"));
    CU_ASSERT_EQUAL(mi_gguf_arr_f32(&a, 0, &f, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is an array of string, not of numbers"));

    const float scores[] = {0.0f, -1.5f, 2.25f, 3.0f};
    CU_ASSERT_EQUAL_FATAL(mi_gguf_get_arr(g, "tokenizer.ggml.scores", &a, err), 0);
    CU_ASSERT(a.elem_type == MI_GGUF_F32 && a.count == 4);
    for (uint64_t k = 0; k < 4; k++)
        CU_ASSERT(mi_gguf_arr_f32(&a, k, &f, err) == 0 && f == scores[k]);
    CU_ASSERT_EQUAL(mi_gguf_arr_str(&a, 0, &s, &len, err), -1);
    const int32_t types[] = {2, 1, 1, -1};
    CU_ASSERT_EQUAL_FATAL(mi_gguf_get_arr(g, "tokenizer.ggml.token_type", &a, err), 0);
    for (uint64_t k = 0; k < 4; k++)
        CU_ASSERT(mi_gguf_arr_i32(&a, k, &i, err) == 0 && i == types[k]);
    CU_ASSERT(mi_gguf_arr_u32(&a, 0, &u, err) == 0 && u == 2);
    CU_ASSERT_EQUAL(mi_gguf_arr_u32(&a, 3, &u, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "element 3 holds an i32 -1, out of the range of a u32"));

    CU_ASSERT_EQUAL_FATAL(mi_gguf_get_arr(g, "test.arr_u8", &a, err), 0);
    CU_ASSERT(a.elem_type == MI_GGUF_U8 && a.count == 3);
    CU_ASSERT(mi_gguf_arr_u32(&a, 2, &u, err) == 0 && u == 255);
    CU_ASSERT(mi_gguf_arr_i32(&a, 1, &i, err) == 0 && i == 2);
    CU_ASSERT_EQUAL_FATAL(mi_gguf_get_arr(g, "test.arr_f64", &a, err), 0);
    CU_ASSERT(mi_gguf_arr_f32(&a, 0, &f, err) == 0 && f == 0.5f);
    CU_ASSERT_EQUAL(mi_gguf_arr_f32(&a, 1, &f, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "holds an f64 1e+300, out of the range of an f32"));
    CU_ASSERT_EQUAL_FATAL(mi_gguf_get_arr(g, "test.arr_bool", &a, err), 0);
    CU_ASSERT(a.elem_type == MI_GGUF_BOOL && a.count == 2);
    CU_ASSERT_EQUAL(mi_gguf_arr_i32(&a, 0, &i, err), -1);
    CU_ASSERT_EQUAL_FATAL(mi_gguf_get_arr(g, "test.nested", &a, err), 0);
    CU_ASSERT(a.elem_type == MI_GGUF_ARRAY && a.count == 2);
    CU_ASSERT_EQUAL(mi_gguf_arr_i32(&a, 0, &i, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is an array of array, not of numbers"));
    CU_ASSERT_EQUAL_FATAL(mi_gguf_get_arr(g, "test.nested_str", &a, err), 0);
    CU_ASSERT(a.elem_type == MI_GGUF_ARRAY && a.count == 1);
    CU_ASSERT_EQUAL_FATAL(mi_gguf_get_arr(g, "test.empty", &a, err), 0);
    CU_ASSERT(a.elem_type == MI_GGUF_U32 && a.count == 0);
    CU_ASSERT_EQUAL(mi_gguf_arr_u32(&a, 0, &u, err), -1);
    CU_ASSERT_EQUAL(mi_gguf_get_arr(g, "test.u8", &a, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "holds a u8 200, not an array"));
    CU_ASSERT_EQUAL(mi_gguf_get_arr(g, "absent", &a, err), 1);
}

static void check_tensors(const mi_gguf *g, const gguf_marks *m)
{
    CU_ASSERT_EQUAL_FATAL(mi_gguf_n_tensors(g), FX_GGUF_TENSORS);
    const char *names[] = {"f32", "f16", "q8_0", "q4_0", "bf16"};
    for (int k = 0; k < FX_GGUF_TENSORS; k++) {
        const fx_tensor *x = &fx_gguf_tensors[k];
        const mi_gguf_tensor *t = mi_gguf_tensor_at(g, k);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_STRING_EQUAL(t->name, x->name);
        CU_ASSERT_PTR_EQUAL(mi_gguf_find_tensor(g, x->name), t);
        CU_ASSERT_EQUAL(t->n_dims, x->n_dims);
        for (int d = 0; d < 4; d++)
            CU_ASSERT_EQUAL(t->dims[d], x->dims[d]);
        CU_ASSERT_EQUAL(t->type, x->type);
        CU_ASSERT_STRING_EQUAL(t->type_name, names[k]);
        CU_ASSERT_EQUAL(t->size, x->size);
        CU_ASSERT_EQUAL(t->offset, m->offset[k]);
        CU_ASSERT_EQUAL(t->offset % mi_gguf_alignment(g), 0);
        const uint8_t *p = t->data;
        size_t bad = 0;
        for (size_t j = 0; j < t->size; j++)
            bad += p[j] != fx_tensor_byte(k, j);
        CU_ASSERT_EQUAL(bad, 0);
    }
    /* token_embd [4, 3] f32: row r, column c is the float 0.25 * (4r + c) */
    float v;
    memcpy(&v, (const char *)mi_gguf_tensor_at(g, 0)->data + (2 * 4 + 3) * 4, 4);
    CU_ASSERT_EQUAL(v, 0.25f * 11);
    CU_ASSERT_PTR_NULL(mi_gguf_find_tensor(g, "blk.0.attn_k.weight"));
    CU_ASSERT_PTR_NULL(mi_gguf_tensor_at(g, FX_GGUF_TENSORS));
    CU_ASSERT_PTR_NULL(mi_gguf_tensor_at(g, -1));
}

static void check_valid_gguf(uint32_t version)
{
    char path[4200];
    gguf_marks m;
    mi_gguf *g = NULL;
    tu_path(path, sizeof path, g_dir, version == 3 ? "v3.gguf" : "v2.gguf");
    CU_ASSERT_EQUAL_FATAL(fx_write_gguf(path, version, GF_NONE, &m), 0);
    int rc = mi_gguf_open(path, &g, err);
    if (rc)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(mi_gguf_version(g), version);
    CU_ASSERT_EQUAL(mi_gguf_alignment(g), version == 3 ? 64 : 32);
    CU_ASSERT_EQUAL(mi_gguf_data_start(g), m.data_start);
    CU_ASSERT_EQUAL(mi_gguf_n_kv(g), FX_GGUF_KVS);
    CU_ASSERT_STRING_EQUAL(mi_gguf_key(g, 0), "general.architecture");
    CU_ASSERT_EQUAL(mi_gguf_find_key(g, "test.u16"), 4);
    CU_ASSERT_EQUAL(mi_gguf_kv_type(g, 4), MI_GGUF_U16);
    CU_ASSERT_EQUAL(mi_gguf_find_key(g, "test"), -1);
    CU_ASSERT_PTR_NULL(mi_gguf_key(g, FX_GGUF_KVS));
    check_scalars(g);
    check_arrays(g);
    check_tensors(g, &m);
    mi_gguf_close(g);
}

static void test_gguf_v3(void) { check_valid_gguf(3); }
static void test_gguf_v2(void) { check_valid_gguf(2); }

static void test_ggml_types(void)
{
    CU_ASSERT_STRING_EQUAL(mi_gguf_type_name(MI_GGML_Q4_K), "q4_K");
    CU_ASSERT_STRING_EQUAL(mi_gguf_type_name(MI_GGML_IQ2_XXS), "iq2_xxs");
    CU_ASSERT_STRING_EQUAL(mi_gguf_type_name(MI_GGML_TQ2_0), "tq2_0");
    /* block elements and bytes, as ggml's block structs add up */
    const struct { int type, block, size; } t[] = {
        {MI_GGML_F32, 1, 4},        {MI_GGML_BF16, 1, 2},       {MI_GGML_Q4_1, 32, 20},
        {MI_GGML_Q5_0, 32, 22},     {MI_GGML_Q8_1, 32, 40},     {MI_GGML_Q2_K, 256, 84},
        {MI_GGML_Q3_K, 256, 110},   {MI_GGML_Q5_K, 256, 176},   {MI_GGML_Q6_K, 256, 210},
        {MI_GGML_Q8_K, 256, 292},   {MI_GGML_IQ2_XS, 256, 74},  {MI_GGML_IQ3_XXS, 256, 98},
        {MI_GGML_IQ1_S, 256, 50},   {MI_GGML_IQ4_NL, 32, 18},   {MI_GGML_IQ3_S, 256, 110},
        {MI_GGML_IQ2_S, 256, 82},   {MI_GGML_IQ4_XS, 256, 136}, {MI_GGML_IQ1_M, 256, 56},
        {MI_GGML_I64, 1, 8},        {MI_GGML_TQ1_0, 256, 54},   {MI_GGML_MXFP4, 32, 17},
    };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        CU_ASSERT_EQUAL(mi_gguf_type_block(t[k].type), t[k].block);
        CU_ASSERT_EQUAL(mi_gguf_type_size(t[k].type), t[k].size);
    }
    const int unknown[] = {-1, 4, 5, 31, 33, 36, 38, 40, 1000};
    for (size_t k = 0; k < sizeof unknown / sizeof unknown[0]; k++) {
        CU_ASSERT_PTR_NULL(mi_gguf_type_name(unknown[k]));
        CU_ASSERT_EQUAL(mi_gguf_type_size(unknown[k]), 0);
    }
    CU_ASSERT_STRING_EQUAL(mi_gguf_vtype_name(MI_GGUF_F64), "f64");
    CU_ASSERT_STRING_EQUAL(mi_gguf_vtype_name(13), "?");
}

/* ------------------------------------------------------------ GGUF: faults */

/* The fixture with fault (cut to cut bytes when cut > 0) is refused with
 * both phrases in the message, which also names the file. */
static void expect_gguf_error(enum gguf_fault fault, uint32_t version, int cut_what, const char *w1,
                              const char *w2)
{
    char path[4200];
    gguf_marks m;
    mi_gguf *g = (mi_gguf *)&m; /* must become NULL */
    tu_path(path, sizeof path, g_dir, "bad.gguf");
    CU_ASSERT_EQUAL_FATAL(fx_write_gguf(path, version, fault, &m), 0);
    size_t cut = cut_what == 'h' ? 12 : cut_what == 'k' ? m.kv_cut : cut_what == 't' ? m.ti_cut
               : cut_what == 'd' ? m.data_start + m.offset[2] + 40 : 0;
    if (cut)
        CU_ASSERT_EQUAL_FATAL(truncate(path, (off_t)cut), 0);
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_gguf_open(path, &g, err), -1);
    CU_ASSERT_PTR_NULL(g);
    int ok = strstr(err, w1) && (!w2 || strstr(err, w2)) && strstr(err, "bad.gguf") && !strchr(err, '\n');
    if (!ok)
        fprintf(stderr, "\nfault %d: expected '%s' / '%s' in: %s\n", fault, w1, w2 ? w2 : "", err);
    CU_ASSERT(ok);
}

static void test_gguf_header_faults(void)
{
    expect_gguf_error(GF_MAGIC, 3, 0, "not a GGUF file", "'GGUG'");
    fx_bad_version = 1;
    expect_gguf_error(GF_VERSION, 3, 0, "GGUF version 1 is not supported", "obsolete");
    fx_bad_version = 4;
    expect_gguf_error(GF_VERSION, 3, 0, "GGUF version 4 is not supported", "versions 2 and 3");
    fx_bad_version = 3u << 24;
    expect_gguf_error(GF_VERSION, 3, 0, "big-endian GGUF file (version 3)", NULL);
    expect_gguf_error(GF_NONE, 3, 'h', "truncated in the header", "needs 8 bytes at offset 8");
}

static void test_gguf_kv_faults(void)
{
    expect_gguf_error(GF_NONE, 3, 'k', "truncated in key-value 6 'test.u32'", "needs 4 bytes");
    expect_gguf_error(GF_STRLEN, 3, 0, "string length 1099511627776", "runs past the end of the file");
    expect_gguf_error(GF_STRLEN, 3, 0, "in key-value 0 'general.architecture'", NULL);
    expect_gguf_error(GF_COUNT, 3, 0, "key-value 14 'tokenizer.ggml.tokens'", "absurd array count 1099511627776");
    expect_gguf_error(GF_ARRAY_LONG, 3, 0, "key-value 15 'tokenizer.ggml.scores' array of 100000 f32 (400000 bytes",
                      "runs past the end of the file");
    expect_gguf_error(GF_ALIGN, 3, 0, "general.alignment 24 is not a power of two", NULL);
    expect_gguf_error(GF_BOOL, 3, 0, "key-value 9 'test.bool' holds bool byte 2", NULL);
    expect_gguf_error(GF_VTYPE, 3, 0, "key-value 2 'test.u8' has unknown value type 13", NULL);
    expect_gguf_error(GF_DUP_KEY, 2, 0, "duplicate key 'test.u8'", "key-values 2 and 3");
}

static void test_gguf_tensor_faults(void)
{
    expect_gguf_error(GF_NONE, 3, 't', "truncated in tensor info 0 'token_embd.weight'", NULL);
    expect_gguf_error(GF_NONE, 3, 'd', "tensor 2 'blk.0.ffn_up.weight' data is truncated",
                      "needs 136 bytes at file offset");
    expect_gguf_error(GF_NONE, 2, 'd', "data is truncated", "40 are present");
    expect_gguf_error(GF_MISALIGN, 3, 0, "tensor 2 'blk.0.ffn_up.weight' offset 130", "not a multiple of the alignment 64");
    expect_gguf_error(GF_PAST_END, 3, 0, "tensor 4 'output_norm.weight' offset 1048576 lies past the end", NULL);
    expect_gguf_error(GF_DUP_NAME, 3, 0, "duplicate tensor name 'blk.0.attn_q.weight'", "tensors 1 and 3");
    expect_gguf_error(GF_OVERLAP, 3, 0, "tensors 'blk.0.attn_q.weight' and 'blk.0.ffn_up.weight' overlap", NULL);
    expect_gguf_error(GF_TYPE, 3, 0, "tensor 2 'blk.0.ffn_up.weight' has unknown ggml type id 99", NULL);
    expect_gguf_error(GF_TYPE_REMOVED, 3, 0, "unknown ggml type id 31", "removed");
    expect_gguf_error(GF_NDIMS5, 3, 0, "tensor 1 'blk.0.attn_q.weight' has n_dims 5", "(1 to 4)");
    expect_gguf_error(GF_ROW, 3, 0, "(q8_0): dims[0] 48 is not a multiple of the block size 32", NULL);
    expect_gguf_error(GF_NEG_DIM, 3, 0, "negative dims[1] (-3)", NULL);
    expect_gguf_error(GF_NAME_CTRL, 3, 0, "tensor 3 has a bad name 'blk.0?ffn'", "without control characters");
}

static void test_gguf_not_a_file(void)
{
    mi_gguf *g = NULL;
    char path[4200];
    CU_ASSERT_EQUAL(mi_gguf_open(g_dir, &g, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is a directory"));
    tu_path(path, sizeof path, g_dir, "missing.gguf");
    CU_ASSERT_EQUAL(mi_gguf_open(path, &g, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no such file"));
    tu_path(path, sizeof path, g_dir, "empty.gguf");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(path, ""), 0);
    CU_ASSERT_EQUAL(mi_gguf_open(path, &g, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "truncated in the header: needs 4 bytes at offset 0, the file has 0"));
}

/* ------------------------------------------------------------ safetensors */

static void test_st_dtypes(void)
{
    CU_ASSERT_STRING_EQUAL(mi_st_dtype_name(MI_ST_BF16), "BF16");
    CU_ASSERT_STRING_EQUAL(mi_st_dtype_name(MI_ST_F8_E5M2), "F8_E5M2");
    CU_ASSERT_EQUAL(mi_st_dtype_size(MI_ST_F64), 8);
    CU_ASSERT_EQUAL(mi_st_dtype_size(MI_ST_BF16), 2);
    CU_ASSERT_EQUAL(mi_st_dtype_size(MI_ST_F8_E4M3), 1);
    CU_ASSERT_EQUAL(mi_st_dtype_size(MI_ST_BOOL), 1);
    CU_ASSERT_PTR_NULL(mi_st_dtype_name(MI_ST_NDTYPES));
    CU_ASSERT_EQUAL(mi_st_dtype_size((mi_st_dtype)-1), 0);
}

/* Tensor t of st is name, dtype, shape (n dims), data from byte begin of
 * fixture data: the values below as fx_write_st wrote them. */
static void check_st_tensor(const mi_st *st, size_t i, const char *name, mi_st_dtype dtype, int n,
                            const int64_t *shape, size_t begin, size_t size)
{
    const mi_st_tensor *t = mi_st_tensor_at(st, i);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_STRING_EQUAL(t->name, name);
    CU_ASSERT_PTR_EQUAL(mi_st_find(st, name), t);
    CU_ASSERT_EQUAL(t->dtype, dtype);
    CU_ASSERT_STRING_EQUAL(t->dtype_name, mi_st_dtype_name(dtype));
    CU_ASSERT_EQUAL(t->n_dims, n);
    for (int d = 0; d < n; d++)
        CU_ASSERT_EQUAL(t->shape[d], shape[d]);
    CU_ASSERT_EQUAL(t->size, size);
    if (!size) {
        CU_ASSERT_PTR_NULL(t->data);
        return;
    }
    size_t bad = 0;
    for (size_t j = 0; j < size; j++)
        bad += ((const uint8_t *)t->data)[j] != fx_st_byte(begin + j);
    CU_ASSERT_EQUAL(bad, 0);
}

static void check_st_fixture(const char *path)
{
    mi_st *st = NULL;
    int rc = mi_st_open(path, &st, err);
    if (rc)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(mi_st_n_tensors(st), 5);
    CU_ASSERT_EQUAL(mi_st_n_shards(st), 1);
    check_st_tensor(st, 0, "model.embed_tokens.weight", MI_ST_BF16, 2, (const int64_t[]){3, 4}, 0, 24);
    check_st_tensor(st, 1, "model.norm.weight", MI_ST_F32, 1, (const int64_t[]){4}, 24, 16);
    check_st_tensor(st, 2, "lm_head.weight", MI_ST_F16, 2, (const int64_t[]){2, 2}, 40, 8);
    check_st_tensor(st, 3, "step", MI_ST_I64, 0, NULL, 48, 8);
    check_st_tensor(st, 4, "empty", MI_ST_F32, 2, (const int64_t[]){0, 5}, 56, 0);
    CU_ASSERT_PTR_NULL(mi_st_find(st, "__metadata__"));
    CU_ASSERT_PTR_NULL(mi_st_find(st, "model.embed_tokens"));
    CU_ASSERT_PTR_NULL(mi_st_tensor_at(st, 5));
    mi_st_close(st);
}

static void test_st_single(void)
{
    char path[4200], dir[4200];
    tu_path(path, sizeof path, g_dir, "one.safetensors");
    CU_ASSERT_EQUAL_FATAL(fx_write_st(path, fx_st_json, 56, 0), 0);
    check_st_fixture(path);
    /* a folder with model.safetensors */
    tu_path(dir, sizeof dir, g_dir, "single");
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    tu_path(path, sizeof path, dir, "model.safetensors");
    CU_ASSERT_EQUAL_FATAL(fx_write_st(path, fx_st_json, 56, 0), 0);
    check_st_fixture(dir);
    test_st_dtypes();
}

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define ST_A "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}"
#define ST_B "\"b.bias\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]}"
#define ST_A2 "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[12,28]}"
#define ST_C "\"c.weight\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]}"
#define INDEX_OK "{\"metadata\":{\"total_size\":34},\"weight_map\":{\"a.weight\":\"" SHARD1 "\"," \
                 "\"c.weight\":\"" SHARD2 "\",\"b.bias\":\"" SHARD1 "\"}}"

/* A fresh folder name: the index and the shards that are not NULL. */
static void write_folder(char *dir, size_t n, const char *index, const char *s1, size_t len1, const char *s2,
                         size_t len2)
{
    static int k;
    char name[32], path[4400];
    snprintf(name, sizeof name, "folder%d", k++);
    tu_path(dir, n, g_dir, name);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    tu_path(path, sizeof path, dir, "model.safetensors.index.json");
    if (index)
        CU_ASSERT_EQUAL_FATAL(tu_write_text(path, index), 0);
    tu_path(path, sizeof path, dir, SHARD1);
    if (s1)
        CU_ASSERT_EQUAL_FATAL(fx_write_st(path, s1, len1, 0), 0);
    tu_path(path, sizeof path, dir, SHARD2);
    if (s2)
        CU_ASSERT_EQUAL_FATAL(fx_write_st(path, s2, len2, 0), 0);
}

static void test_st_folder(void)
{
    char dir[4200], path[4400];
    mi_st *st = NULL;
    write_folder(dir, sizeof dir, INDEX_OK, "{" ST_A "," ST_B "}", 22, "{" ST_C "}", 12);
    int rc = mi_st_open(dir, &st, err);
    if (rc)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(mi_st_n_tensors(st), 3);
    CU_ASSERT_EQUAL(mi_st_n_shards(st), 2);
    tu_path(path, sizeof path, dir, SHARD2);
    CU_ASSERT_STRING_EQUAL(mi_st_shard_path(st, 1), path);
    CU_ASSERT_PTR_NULL(mi_st_shard_path(st, 2));
    check_st_tensor(st, 0, "a.weight", MI_ST_F32, 2, (const int64_t[]){2, 2}, 0, 16);
    check_st_tensor(st, 1, "b.bias", MI_ST_F16, 1, (const int64_t[]){3}, 16, 6);
    check_st_tensor(st, 2, "c.weight", MI_ST_BF16, 2, (const int64_t[]){2, 3}, 0, 12);
    CU_ASSERT_EQUAL(mi_st_find(st, "a.weight")->shard, 0);
    CU_ASSERT_EQUAL(mi_st_find(st, "c.weight")->shard, 1);
    mi_st_close(st);
}

/* path (or a file of json + data_len bytes) is refused with both phrases. */
static void expect_st_error(const char *path, const char *w1, const char *w2)
{
    mi_st *st = (mi_st *)&err; /* must become NULL */
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_st_open(path, &st, err), -1);
    CU_ASSERT_PTR_NULL(st);
    int ok = strstr(err, w1) && (!w2 || strstr(err, w2)) && !strchr(err, '\n');
    if (!ok)
        fprintf(stderr, "\nexpected '%s' / '%s' in: %s\n", w1, w2 ? w2 : "", err);
    CU_ASSERT(ok);
}

static void expect_st_file_error(const char *json, size_t data_len, uint64_t hlen, const char *w1, const char *w2)
{
    char path[4200];
    tu_path(path, sizeof path, g_dir, "bad.safetensors");
    CU_ASSERT_EQUAL_FATAL(fx_write_st(path, json, data_len, hlen), 0);
    expect_st_error(path, w1, w2);
    CU_ASSERT(strstr(err, "bad.safetensors") != NULL);
}

#define W(dtype, shape, offsets) "{\"w\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offsets "}}"

static void test_st_file_faults(void)
{
    char path[4200];
    expect_st_file_error(fx_st_json, 56, 100000, "header length 100000 runs past the end of the file", NULL);
    expect_st_file_error("{ not json", 8, 0, "header is not JSON", "syntax error");
    expect_st_file_error("{} x", 0, 0, "header is not JSON", "text after the object");
    expect_st_file_error("[1]", 0, 0, "header is not a JSON object", NULL);
    expect_st_file_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", 32, 0,
                         "tensors 'a' and 'b' overlap", "[0, 24) and [16, 32)");
    expect_st_file_error("{\"a\\nb\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                         "\"c\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 8, 0,
                         "tensors 'a?b' and 'c' overlap", NULL);
    expect_st_file_error(W("F4", "[2]", "[0,1]"), 8, 0, "tensor 'w' has unknown dtype 'F4'", NULL);
    expect_st_file_error(W("F32", "[3]", "[0,16]"), 16, 0,
                         "tensor 'w' size mismatch: F32 [3] needs 12 bytes, its data_offsets [0, 16] hold 16", NULL);
    expect_st_file_error(W("F32", "[100]", "[0,400]"), 40, 0, "tensor 'w' data_offsets [0, 400]",
                         "run past the end of the data section (40 bytes)");
    expect_st_file_error(W("U8", "[4]", "[8,4]"), 8, 0, "end before they begin", NULL);
    expect_st_file_error(W("U8", "[1,1,1,1,1,1,1,1,1]", "[0,1]"), 8, 0, "has 9 dims (at most 8)", NULL);
    expect_st_file_error(W("U8", "[-1]", "[0,1]"), 8, 0, "shape[0] is not a whole number", NULL);
    expect_st_file_error(W("U8", "[1.5]", "[0,1]"), 8, 0, "shape[0] is not a whole number", NULL);
    expect_st_file_error("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 8, 0, "tensor 'w' has no \"dtype\"", NULL);
    expect_st_file_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"crc\":1}}", 8, 0,
                         "tensor 'w' has unknown key 'crc'", NULL);
    expect_st_file_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                         "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 8, 0,
                         "tensor 'w' appears twice in the header", NULL);
    expect_st_file_error("{\"__metadata__\":{\"n\":1}}", 0, 0, "__metadata__ is not a map of strings", NULL);
    /* a header length over 100 MB, in a sparse file that long */
    tu_path(path, sizeof path, g_dir, "big.safetensors");
    CU_ASSERT_EQUAL_FATAL(fx_write_st(path, "{}", 0, (101u << 20) - 8), 0);
    CU_ASSERT_EQUAL_FATAL(truncate(path, 101 << 20), 0);
    expect_st_error(path, "header length 105906168 is absurd", "at most 104857600 bytes");
    tu_path(path, sizeof path, g_dir, "short.safetensors");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(path, "abc"), 0);
    expect_st_error(path, "file is truncated: 3 bytes, the header length alone takes 8", NULL);
}

static void test_st_folder_faults(void)
{
    char dir[4200];
    write_folder(dir, sizeof dir, INDEX_OK, "{" ST_A "," ST_B "}", 22, NULL, 0);
    expect_st_error(dir, "shard", "model-00002-of-00002.safetensors (of tensor 'c.weight') is missing");
    write_folder(dir, sizeof dir, INDEX_OK, "{" ST_A "}", 16, "{" ST_C "}", 12);
    expect_st_error(dir, "tensor 'b.bias' is not in", SHARD1 ", the shard the index names");
    write_folder(dir, sizeof dir, INDEX_OK, "{" ST_A "," ST_B "}", 22, "{" ST_C "," ST_A2 "}", 28);
    expect_st_error(dir, "tensor 'a.weight' is in two shards", SHARD2);
    write_folder(dir, sizeof dir, "{\"weight_map\":{\"a.weight\":\"" SHARD1 "\",\"b.bias\":\"" SHARD2 "\","
                 "\"c.weight\":\"" SHARD2 "\"}}", "{" ST_A "," ST_B "}", 22, "{" ST_C "}", 12);
    expect_st_error(dir, "tensor 'b.bias' is in", SHARD1 ", not in");
    write_folder(dir, sizeof dir, "{\"weight_map\":{\"a.weight\":\"" SHARD1 "\",\"c.weight\":\"" SHARD2 "\"}}",
                 "{" ST_A "," ST_B "}", 22, "{" ST_C "}", 12);
    expect_st_error(dir, "tensor 'b.bias' of", "is not in the index's weight_map");
    write_folder(dir, sizeof dir, "{\"weight_map\":{\"a.weight\":\"../" SHARD1 "\"}}", NULL, 0, NULL, 0);
    expect_st_error(dir, "weight_map entry 'a.weight' is not a file name in the folder", NULL);
    write_folder(dir, sizeof dir, "{\"weight_map\":[]}", NULL, 0, NULL, 0);
    expect_st_error(dir, "no \"weight_map\" object", NULL);
    write_folder(dir, sizeof dir, "{weight_map}", NULL, 0, NULL, 0);
    expect_st_error(dir, "model.safetensors.index.json: not a JSON object", NULL);
    write_folder(dir, sizeof dir, NULL, NULL, 0, NULL, 0);
    expect_st_error(dir, "folder holds neither model.safetensors nor model.safetensors.index.json", NULL);
}

/* ------------------------------------------------------------ seeds */

/* MESHINFER_FORMAT_SEEDS=DIR: the valid fixtures as fuzz seeds. */
static int write_seeds(const char *dir)
{
    char sub[4200], path[4400];
    gguf_marks m;
    int rc = 0;
    snprintf(sub, sizeof sub, "%s/gguf", dir);
    mkdir(sub, 0755);
    for (uint32_t v = 2; v <= 3; v++) {
        snprintf(path, sizeof path, "%s/fixture-v%u.gguf", sub, v);
        rc |= fx_write_gguf(path, v, GF_NONE, &m);
    }
    snprintf(sub, sizeof sub, "%s/safetensors", dir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/fixture.safetensors", sub);
    rc |= fx_write_st(path, fx_st_json, 56, 0);
    return rc;
}

int main(void)
{
    const char *seeds = getenv("MESHINFER_FORMAT_SEEDS");
    if (seeds && write_seeds(seeds))
        return 2;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("formats", suite_init, suite_clean);
    if (!s) {
        CU_cleanup_registry();
        return 2;
    }
    struct { const char *name; CU_TestFunc fn; } tests[] = {
        {"gguf v3: every key/value type and 5 tensors read back", test_gguf_v3},
        {"gguf v2: the same with the default alignment", test_gguf_v2},
        {"ggml type table: names, block elements and bytes", test_ggml_types},
        {"gguf bad header: magic, versions 1, 4 and big-endian, truncated", test_gguf_header_faults},
        {"gguf bad key/values: truncated, string past the end, counts, alignment, types", test_gguf_kv_faults},
        {"gguf bad tensors: truncated info and data, offsets, names, types, dims", test_gguf_tensor_faults},
        {"gguf: directory, missing and empty files", test_gguf_not_a_file},
        {"safetensors: a single file read back", test_st_single},
        {"safetensors: a 2-shard folder with index", test_st_folder},
        {"safetensors bad files: header, JSON, dtype, shape, offsets, overlap", test_st_file_faults},
        {"safetensors bad folders: missing shard, misplaced and duplicate tensors", test_st_folder_faults},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!CU_add_test(s, tests[i].name, tests[i].fn)) {
            CU_cleanup_registry();
            return 2;
        }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned fails = CU_get_number_of_failures();
    unsigned suite_fails = CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return fails != 0 || suite_fails != 0;
}
