/* Single-device math of the Llama forward pass. Activations are row-major
 * float32; weights are tensors of any dtype (tensor.h); T is the number of
 * token positions processed together (1 while decoding, the prompt chunk
 * length during prefill). */
#ifndef MESHINFER_KERNELS_H
#define MESHINFER_KERNELS_H

#include <stddef.h>

#include "meshinfer/tensor.h"

/* out[t] = x[t] / rms(x[t]) * w, for t < T; x, out: [T, dim]; w: [dim].
 * out may alias x. */
void mi_rmsnorm(float *out, const float *x, const float *w, int T, int dim, float eps);

/* CATS device-local RMSNorm: like mi_rmsnorm, but each row's mean
 * square is over the columns it holds (held[t*dim + i] != 0; pruned or lost
 * columns are not held) and the others are written as 0. held == NULL, or
 * every column held, gives mi_rmsnorm's result bit for bit. */
void mi_rmsnorm_held(float *out, const float *x, const float *w, int T, int dim, float eps,
                     const unsigned char *held);

/* CATS's time-series family (docs/patchtst.md): LayerNorm with gain g
 * and bias b over each row of x [T, dim] (biased variance, eps inside the
 * square root), device-local when held is given: mean and variance over
 * the held columns only (held[t*dim + i] != 0), the others written as 0.
 * out may alias x. */
void mi_layernorm_held(float *out, const float *x, const float *g, const float *b, int T, int dim, float eps,
                       const unsigned char *held);

/* x = gelu(x), the exact erf form (PyTorch's default), over n values. */
void mi_gelu(float *x, size_t n);

/* y[t][i] += b[i] for t < T, i < n; row t of y starts at y + t*ldy. */
void mi_add_bias(float *y, int ldy, const float *b, int T, int n);

/* y[T, W.rows] = x[T, W.cols] @ W^T, for any weight dtype (tensor.h).
 * Decode (T == 1) runs the active kernel family's matrix-vector product,
 * split over mi_set_threads threads by rows; T > 1 (prefill, a batch of
 * sequences) runs the family's tile kernel over the rows in cache-sized
 * tiles, each weight block decoded once for up to 4-8 positions, every
 * position's row the same bits as its T == 1 product (so prefill equals
 * decode bit for bit). Only mi_use_blas_matvec(1) (the bench baseline) sends
 * fp32 to BLAS sgemv/sgemm. Block dtypes quantize each row of x to int8 once
 * per call.
 * HeadSplit: every output row is computed the same way whatever rows surround
 * it, so row shards on several ranks reproduce one device exactly. */
void mi_matmul(float *y, const float *x, const mi_tensor *W, int T);

/* Same as mi_matmul but adds into y (y += x @ W^T); used for residuals. */
void mi_matmul_add(float *y, const float *x, const mi_tensor *W, int T);

/* mi_matmul on slices of wider buffers: row t of x starts at x + t*ldx,
 * row t of y at y + t*ldy (ldx >= W.cols, ldy >= W.rows); add: y +=. The
 * same numbers as mi_matmul on packed copies. */
void mi_matmul_ld(float *y, int ldy, const float *x, int ldx, const mi_tensor *W, int T, int add);

/* RoPE rotation tables: cos/sin of pos * theta^(-2i/head_dim), [seq_len][head_dim/2];
 * halves: which elements of a head rotate together (mi_rope_apply). */
typedef struct {
    int seq_len, head_dim;
    int halves;
    float *cos, *sin;
} mi_rope_table;
void mi_rope_init(mi_rope_table *r, int seq_len, int head_dim, float theta);
/* The same with frequency i divided by factors[i] (factors NULL: none; Llama
 * 3's RoPE scaling and linear scaling are such factors) and halves set. */
void mi_rope_init_scaled(mi_rope_table *r, int seq_len, int head_dim, float theta, const float *factors,
                         int halves);
void mi_rope_free(mi_rope_table *r);

/* Rotate each head of v[T][n_heads*head_dim] at positions pos0 .. pos0+T-1:
 * adjacent pairs (2i, 2i+1) (llama2.c convention), or with r->halves the
 * pairs (i, i + head_dim/2) (Hugging Face's rotate_half). */
void mi_rope_apply(const mi_rope_table *r, float *v, int T, int pos0, int n_heads);

/* Causal attention of n_q query heads that share KV heads in groups of
 * `group` (grouped-query attention). q: [T][n_q*head_dim] (already rotated);
 * kc, vc: KV cache of the n_q/group KV heads, [n_kv][seq_len][head_dim], filled
 * up to position pos0+T-1. out: [T][n_q*head_dim]. att: scratch of seq_len floats. */
void mi_attention(float *out, const float *q, const float *kc, const float *vc, int T, int pos0, int n_q,
                  int group, int head_dim, int seq_len, float *att);
/* The same with the scores scaled by scale (instead of 1/sqrt(head_dim))
 * and, window > 0, position p attending only to the last `window`
 * positions (p - window, p] (a sliding-window layer). */
void mi_attention_ex(float *out, const float *q, const float *kc, const float *vc, int T, int pos0, int n_q,
                     int group, int head_dim, int seq_len, float *att, float scale, int window);

/* x = gelu(x) with the tanh approximation (GPT-2's gelu_new, Gemma's
 * gelu_pytorch_tanh), over n values. */
void mi_gelu_tanh(float *x, size_t n);
/* h1 = gelu_tanh(h1) * h3 (Gemma's GeGLU gate). */
void mi_geglu(float *h1, const float *h3, size_t n);

/* h1 = silu(h1) * h3, elementwise over n values (SwiGLU gate). */
void mi_swiglu(float *h1, const float *h3, size_t n);

/* Softmax in place over n values. */
void mi_softmax(float *x, int n);

/* HeadSplit's inter-layer speculation test: is the FFN's contribution f small
 * next to Z (the residual stream the next layer's attention was computed on)?
 * f, z: [T][d]. *worst receives the largest ||f_t|| / ||z_t|| over the T
 * positions (a norm ratio, not its square: the tolerance is on the ratio;
 * infinite when some z_t is zero). Returns 1 (keep the speculative attention)
 * when *worst < tol, strictly: a ratio equal to the tolerance is recomputed. */
int mi_spec_accept(const float *f, const float *z, int T, int d, double tol, double *worst);

/* Use BLAS (sgemv, sgemm) instead of our row kernels for fp32 products (a
 * same-run baseline for `bench`; not bit-reproducible under row
 * partitioning: a BLAS may choose its kernel by the matrix's size). Off by
 * default. Process-wide. */
void mi_use_blas_matvec(int on);

/* Threads per rank for the matrix products (ours, OpenMP, and BLAS's);
 * n >= 1. Process-wide. */
void mi_set_threads(int n);
/* The threads mi_set_threads gave (1 before any call). */
int mi_threads(void);

/* The kernel family in use ("scalar", "avx2", "avx512", "neon",
 * "neon-dotprod"): the best this CPU runs, unless the environment variable
 * MESHINFER_KERNELS or mi_kernels_use names another. */
const char *mi_kernels_name(void);
/* Use family `name` ("auto" for the best). Returns 0, or -1 with a short
 * reason in err (unknown, or not supported by this CPU). Process-wide. */
int mi_kernels_use(const char *name, char *err);
/* "auto" and every family compiled in, comma-separated (for --help). */
const char *mi_kernels_list(void);

#endif
