/* Element types, weight tensors and message encodings.
 *
 * Every weight matrix is a tensor that carries its dtype and shape. The
 * quantized types are the widely used 32-element block formats (ggml's q8_0
 * and q4_0, so a GGUF import maps onto them value for value):
 *   q8_0: per block of 32 values one fp16 scale d and 32 int8 q; x = d * q.
 *   q4_0: per block one fp16 scale d and 32 4-bit q in 16 bytes (byte j holds
 *         element j in its low nibble and element j+16 in its high nibble);
 *         x = d * (q - 8).
 * The k-quants (ggml's q4_K, q5_K, q6_K) are super-blocks of 256 values kept
 * exactly as a GGUF file holds them, header and all, one after another along
 * the row (so an import copies them byte for byte):
 *   q4_K (144 bytes): fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins of
 *         8 sub-blocks of 32, 128 bytes of 4-bit q; x = d*sc*q - dmin*m.
 *   q5_K (176 bytes): as q4_K plus 32 bytes of fifth bits before the nibbles.
 *   q6_K (210 bytes): 128 bytes of low nibbles, 64 of high 2-bit pairs, 16
 *         int8 scales of sub-blocks of 16, fp16 d; x = d*sc*(q - 32).
 *   (mi_kquant_unpack gives the levels and scales of one super-block.)
 * Blocks run along the input axis of a matrix-vector product (a row of W in
 * y = W x), so a row is whole blocks and a shard of rows never cuts one; a
 * shard of columns (tensor parallelism's wo and w2) must start and end on a
 * multiple of 32 (Voltron: precision is lowered per layer and per tensor).
 *
 * In memory a q8_0 or q4_0 tensor keeps values and scales apart ("structure
 * of arrays"): q holds rows x cols values (int8, or two 4-bit values per
 * byte), d holds rows x cols/32 fp16 scales; a k-quant tensor's q holds its
 * super-blocks and d is NULL. SIMD kernels then load whole
 * blocks with aligned vector loads.
 *
 * Messages between ranks (Voltron "communication scaling") are encoded with
 * a wire dtype: fp32 (exact), fp16, or q8_0 blocks whose last block may be
 * shorter than 32 so that nothing but data is sent. No MPI, HDF5 or BLAS
 * here: kernels and their tests build for any target. */
#ifndef MESHINFER_TENSOR_H
#define MESHINFER_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    MI_F32 = 0,  /* IEEE binary32 */
    MI_F16 = 1,  /* IEEE binary16 */
    MI_Q8_0 = 2, /* blocks of 32: fp16 scale, int8 values */
    MI_Q4_0 = 3, /* blocks of 32: fp16 scale, 4-bit values with an offset of 8 */
    MI_Q4_K = 4, /* super-blocks of 256: 4-bit values, 6-bit scales and mins of 8 sub-blocks */
    MI_Q5_K = 5, /* super-blocks of 256: 5-bit values, 6-bit scales and mins of 8 sub-blocks */
    MI_Q6_K = 6, /* super-blocks of 256: 6-bit values, int8 scales of 16 sub-blocks */
} mi_dtype;
#define MI_N_DTYPES 7
#define MI_QK 32    /* elements per block of q8_0 and q4_0 */
#define MI_QK_K 256 /* elements per super-block of the k-quants */

/* "fp32", "fp16", "q8_0", "q4_0", "q4_K", "q5_K", "q6_K" (ggml's names);
 * "?" for anything else. */
const char *mi_dtype_name(int t);
/* Parse a name above; returns 0, or -1 for an unknown name. */
int mi_dtype_parse(const char *name, mi_dtype *t);
/* 1 for the block formats (rows must be whole blocks of mi_dtype_block). */
int mi_dtype_blocked(int t);
/* Elements per block along a row: 1 (fp32, fp16), MI_QK (q8_0, q4_0) or
 * MI_QK_K (the k-quants); 0 for an unknown t. A shard of columns must start
 * and end on a multiple of it. */
int mi_dtype_block(int t);
/* 1 when the dtype keeps its block scales apart in d (q8_0, q4_0). */
int mi_dtype_split_scales(int t);
/* 1 for the k-quants. */
int mi_dtype_kquant(int t);
/* Bytes of a row of n elements in memory, scales included; for blocked
 * types n must be a multiple of mi_dtype_block (fp32 4n, fp16 2n, q8_0
 * n + n/16, q4_0 n/2 + n/16, q4_K 144 n/256, q5_K 176 n/256, q6_K
 * 210 n/256). */
size_t mi_dtype_row_bytes(int t, size_t n);
/* Bytes of the values alone (q part) of a row of n elements. */
size_t mi_dtype_q_row_bytes(int t, size_t n);

/* ---------------------------------------------------------------- fp16 */

/* IEEE binary16 conversion, round to nearest even; overflow gives
 * infinity, NaN stays NaN. */
uint16_t mi_fp16_from_f32(float f);
float mi_f32_from_fp16(uint16_t h);

/* ---------------------------------------------------------------- tensor */

typedef struct {
    mi_dtype dtype;
    int rows, cols;  /* logical shape [rows, cols]: y[rows] = W x[cols] */
    void *q;         /* values, row-major: float, uint16_t (fp16), int8_t, or uint8_t (q4_0: cols/2 per row) */
    uint16_t *d;     /* blocked types: fp16 scales [rows, cols/32]; NULL otherwise */
} mi_tensor;

/* Bytes a rows x cols tensor of dtype t holds (values and scales). */
size_t mi_tensor_bytes(int t, size_t rows, size_t cols);

/* A tensor with no data of the given shape (q, d NULL): for computing sizes
 * and carving memory (mi_tensor_place). */
mi_tensor mi_tensor_shape(mi_dtype t, int rows, int cols);

/* Point t's q and d into mem (mi_tensor_bytes(t) bytes, 64-byte aligned):
 * values first, then (q8_0, q4_0) scales at the next 64-byte boundary. Returns the bytes
 * used, padding included (mi_tensor_place_bytes). */
size_t mi_tensor_place(mi_tensor *t, void *mem);
size_t mi_tensor_place_bytes(int dtype, size_t rows, size_t cols);

/* Rows [r0, r0+n) of t as a tensor sharing its memory. */
mi_tensor mi_tensor_rows(const mi_tensor *t, int r0, int n);

/* Voltron §4.3.1 shard-wise pruning at run time: keep only the rows (or the
 * columns) in the ascending runs [r0[i], r0[i]+rn[i]), i < n_runs, packed in
 * place in t's own memory (t->rows or t->cols shrinks to their summed
 * lengths; the memory past them goes unused, not freed). Columns of a blocked
 * dtype are kept in whole blocks: keep_cols returns -1 (t untouched) when a
 * run does not start and end on multiples of mi_dtype_block, else 0. */
void mi_tensor_keep_rows(mi_tensor *t, int n_runs, const int *r0, const int *rn);
int mi_tensor_keep_cols(mi_tensor *t, int n_runs, const int *c0, const int *cn);

/* One k-quant super-block (t MI_Q4_K, MI_Q5_K or MI_Q6_K; its bytes as
 * above) unpacked: q[256] its integer levels (q4_K 0..15, q5_K 0..31, q6_K
 * -32..31, the offset of 32 taken off), sc[] and m[] the sub-block scales
 * and mins (q4_K/q5_K: 8 sub-blocks of 32, each 0..63; q6_K: 16 sub-blocks
 * of 16, sc -128..127, m 0), *d and *dmin the fp32 super-block scales
 * (q6_K: dmin 0). Element i is d * sc[s] * q[i] - dmin * m[s], s = i /
 * (256 / number of sub-blocks). Returns the number of sub-blocks. */
int mi_kquant_unpack(int t, const void *block, int8_t q[MI_QK_K], int sc[16], int m[16], float *d, float *dmin);

/* Dequantize row r of t into out[cols]. */
void mi_tensor_row_f32(const mi_tensor *t, int r, float *out);

/* Voltron §4.3.1 "computation scaling": *out becomes w's values re-encoded
 * in dtype t, placed in mem (mi_tensor_place_bytes(t, rows, cols) bytes,
 * 64-byte aligned), row by row through fp32, so lowering a tensor gives the
 * same values as quantizing the file's weights would. Returns 0, or -1 when a
 * blocked t does not divide w's columns into its blocks or no row buffer
 * could be had (*out untouched). An empty w gives an empty *out, mem unused. */
int mi_tensor_convert(const mi_tensor *w, int t, void *mem, mi_tensor *out);

/* ---------------------------------------------------------- quantization */

/* Encode n floats as one row of dtype t (n a multiple of mi_dtype_block(t)):
 * q receives mi_dtype_q_row_bytes(t, n) bytes, d (q8_0, q4_0 only) n/32
 * fp16 scales (k-quants: NULL; their scales are in the super-blocks). Blocked scales are d = amax/127 (q8_0) or
 * d = m/-8 with m the value of largest magnitude (q4_0), rounded to fp16
 * before the values are quantized against it, so that |x - dequant(x)| is at
 * most |d|/2 (q8_0) or |d| (q4_0; |d|/2 for all but the block's extreme
 * values on the other side of zero). The k-quants search each sub-block's
 * scale (and min) for the least weighted squared error (llama.cpp's
 * make_qkx2_quants for q4_K/q5_K, make_qx_quants for q6_K), round the
 * sub-block scales to 6 bits (or int8) against the super-block's fp16 d
 * (and dmin), keep a neighbouring 6-bit value where it lowers the
 * sub-block's error, then choose the levels: RMSE at or below llama.cpp's
 * reference quantizers' (docs/guide/precision.md). A super-block holding a
 * non-finite input gets NaN scales. */
void mi_quantize_row(int t, const float *x, int n, void *q, uint16_t *d);
/* Decode one row (inverse of mi_quantize_row up to its error). */
void mi_dequantize_row(int t, const void *q, const uint16_t *d, int n, float *out);

/* ---------------------------------------------------------- wire format */

/* Bytes of a message row of n floats in wire dtype t (MI_F32, MI_F16 or
 * MI_Q8_0; q8_0 sends ceil(n/32) fp16 scales then n int8 values, the last
 * block short when 32 does not divide n). */
size_t mi_wire_row_bytes(int t, size_t n);
/* Voltron §4.3.2's ladder of wire dtypes, fp32 -> fp16 -> q8_0 (fewer bytes
 * down it): the next dtype down from t (-1 from q8_0 or a dtype not on it),
 * and the narrower of a and b. */
int mi_wire_lower(int t);
int mi_wire_narrower(int a, int b);
/* Encode rows x n floats of x (row stride ld floats) into buf, row after row
 * (rows * mi_wire_row_bytes bytes; buf needs no alignment). fp16 saturates
 * at +-65504 so a large activation does not become infinite. */
void mi_wire_pack(int t, const float *x, size_t rows, size_t n, size_t ld, void *buf);
/* Decode rows x n floats from buf into x (row stride ld). */
void mi_wire_unpack(int t, const void *buf, size_t rows, size_t n, size_t ld, float *x);

#endif
