/* Single-device math of the Llama forward pass. All arrays are row-major
 * float32; T is the number of token positions processed together (1 while
 * decoding, the prompt chunk length during prefill).
 *
 * Determinism matters for distributed execution: mi_matmul with T == 1 computes
 * every output row with the same instruction sequence whatever rows surround
 * it, so a rank holding a subset of rows (seed 000's head-level partitioning)
 * gets bit-identical results to a single device. */
#ifndef MESHINFER_KERNELS_H
#define MESHINFER_KERNELS_H

#include <stddef.h>

/* out[t] = x[t] / rms(x[t]) * w, for t < T; x, out: [T, dim]; w: [dim].
 * out may alias x. */
void mi_rmsnorm(float *out, const float *x, const float *w, int T, int dim, float eps);

/* y[T, n_out] = x[T, n_in] @ W[n_out, n_in]^T. T == 1 uses our matrix-vector
 * kernel (memory-bound decode: one pass over W); T > 1 uses BLAS sgemm. */
void mi_matmul(float *y, const float *x, const float *W, int T, int n_in, int n_out);

/* Same as mi_matmul but adds into y (y += x @ W^T); used for residuals. */
void mi_matmul_add(float *y, const float *x, const float *W, int T, int n_in, int n_out);

/* RoPE rotation tables: cos/sin of pos * theta^(-2i/head_dim), [seq_len][head_dim/2]. */
typedef struct {
    int seq_len, head_dim;
    float *cos, *sin;
} mi_rope_table;
void mi_rope_init(mi_rope_table *r, int seq_len, int head_dim, float theta);
void mi_rope_free(mi_rope_table *r);

/* Rotate adjacent pairs (2i, 2i+1) of each head (llama2.c convention) of
 * v[T][n_heads*head_dim] at positions pos0 .. pos0+T-1. */
void mi_rope_apply(const mi_rope_table *r, float *v, int T, int pos0, int n_heads);

/* Causal attention of n_q query heads that share KV heads in groups of
 * `group` (grouped-query attention). q: [T][n_q*head_dim] (already rotated);
 * kc, vc: KV cache of the n_q/group KV heads, [n_kv][seq_len][head_dim], filled
 * up to position pos0+T-1. out: [T][n_q*head_dim]. att: scratch of seq_len floats. */
void mi_attention(float *out, const float *q, const float *kc, const float *vc, int T, int pos0, int n_q,
                  int group, int head_dim, int seq_len, float *att);

/* h1 = silu(h1) * h3, elementwise over n values (SwiGLU gate). */
void mi_swiglu(float *h1, const float *h3, size_t n);

/* Softmax in place over n values. */
void mi_softmax(float *x, int n);

/* Use BLAS sgemv instead of our kernel for T == 1 (a same-run baseline for
 * `bench`; not bit-reproducible under row partitioning). Process-wide. */
void mi_use_blas_matvec(int on);

/* Set the number of BLAS threads (OpenBLAS); 0 leaves the default. */
void mi_set_blas_threads(int n);

#endif
