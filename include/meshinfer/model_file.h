/* The meshinfer HDF5 model file: one file holds config, tokenizer and weights.
 *
 * Layout, readable with h5dump (format_version 1 when every weight is
 * float32, 2 when any is fp16, q8_0, q4_0 or a k-quant; this build reads both):
 *   /                       attributes: format_version, dim, hidden_dim, n_layers,
 *                           n_heads, n_kv_heads, head_dim, vocab_size, seq_len,
 *                           rope_theta, norm_eps, shared_classifier, synthetic, name
 *   /tok_embeddings         [vocab_size, dim]
 *   /norm                   [dim]                      final RMSNorm
 *   /classifier             [vocab_size, dim]          only when not shared
 *   /layers/LLL/attention_norm [dim]
 *   /layers/LLL/wq          [n_heads*head_dim, dim]    rows of head h: h*head_dim ..
 *   /layers/LLL/wk, wv      [n_kv_heads*head_dim, dim]
 *   /layers/LLL/wo_t        [n_heads*head_dim, dim]    wo transposed: rows of head h
 *   /layers/LLL/ffn_norm    [dim]
 *   /layers/LLL/w1, w3      [hidden_dim, dim]
 *   /layers/LLL/w2_t        [hidden_dim, dim]          w2 transposed: rows of FFN unit j
 *   /tokenizer/scores [V] f32, /tokenizer/offsets [V+1] i64, /tokenizer/bytes [N] u8
 *                           llama2.c's tokenizer; any other (tokenizer.h's BPE kinds):
 *   /tokenizer/spec [N] u8  its stored form, UTF-8 JSON (tokenizer.h), V <= vocab_size
 *
 * Every tensor is stored so that the shard a rank holds (a KV-head group's
 * query/key/value/output rows, or a slice of FFN units) is a contiguous row
 * range: HeadSplit's head-level placement and Voltron's tensor parallelism then
 * read their shard with one contiguous hyperslab. wo and w2 are stored
 * transposed for that reason; the shard loader (model.h) and mi_model_read_t()
 * transpose them back.
 *
 * Weight matrices (not norms, which stay float32: they are dim values each
 * and scale every activation) may be stored in lower precision (tensor.h):
 *   fp16   a dataset of IEEE binary16 (an HDF5 float type with 16-bit fields)
 *          of the same shape, with attribute dtype = "fp16";
 *   q8_0,  a group of the tensor's name with attributes dtype ("q8_0" or
 *   q4_0   "q4_0"), shape (the stored [rows, cols]), block_size (32) and
 *          blocked_axis, holding datasets qs (the values: int8, or uint8 with
 *          two 4-bit values per byte) and d (float16 scales, one per block).
 * Blocks run along the input axis of the product: along the columns of a
 * stored tensor (blocked_axis 1: qs [rows, cols] or [rows, cols/2], d [rows,
 * cols/32]), and down the rows of the transposed wo_t and w2_t (blocked_axis
 * 0: qs [rows, cols] or [rows/2, cols], d [rows/32, cols]), which are the
 * byte-for-byte transposes of the in-memory row layout. A shard's rows stay one
 * hyperslab of qs and one of d; for wo_t and w2_t it must be whole blocks.
 *   q4_K,  a group as above (dtype "q4_K", "q5_K" or "q6_K", block_size 256)
 *   q5_K,  holding one dataset qs, uint8: each row's super-blocks as ggml
 *   q6_K   lays them out (tensor.h), [rows, cols/256 * B] (B = 144, 176, 210
 *          bytes a super-block); no d. The transposed wo_t and w2_t
 *          (blocked_axis 0, shape [cols, rows] as above) are transposed by
 *          whole super-blocks: [cols/256, rows * B], stored row k holding
 *          super-block k of every row of the product's matrix, so a shard of
 *          its columns (whole super-blocks) is stored rows and a shard of its
 *          rows a byte range of each.
 *
 * Format_version 4 is a language model of a family other than Llama 2's
 * (config.h): the version 2 attributes plus `family` ("llama", "qwen2",
 * "qwen3", "gemma3", "gpt2") and the traits as integer or float attributes
 * (norm_type, ffn_type, rope_type, qkv_bias, out_bias, qk_norm, post_norms,
 * pos_embed, rope_freqs, emb_scale, attn_scale, rope_theta_local,
 * sliding_window, swa_period: the values of config.h's fields), and the
 * tensors the traits add, float32:
 *   /norm_b [dim], /layers/LLL/attention_norm_b, ffn_norm_b [dim]   LayerNorm biases
 *   /layers/LLL/wq_b [n_heads*head_dim], wk_b, wv_b [n_kv_heads*head_dim]   qkv_bias
 *   /layers/LLL/wo_b [dim], w1_b [hidden_dim], w2_b [dim]           out_bias
 *   /layers/LLL/q_norm, k_norm [head_dim]                           qk_norm
 *   /layers/LLL/post_attention_norm, post_ffn_norm [dim]            post_norms
 *   /pos_embed [seq_len, dim]                                       pos_embed
 *   /rope_freqs [head_dim/2]                                        rope_freqs
 * and no w3 where the FFN has no gate (GPT-2). Norm weights are stored as
 * they multiply (Gemma's 1 + w is stored summed).
 *
 * A mixture of experts (family qwen2moe or qwen3moe; config.h) adds the
 * integer attributes n_experts, n_experts_used, shared_hidden_dim and
 * norm_topk_prob (hidden_dim is one expert's width), and each layer holds,
 * instead of w1, w2_t and w3:
 *   /layers/LLL/router      [n_experts, dim]                 any dtype
 *   /layers/LLL/experts_w1, experts_w3 [n_experts*hidden_dim, dim]   expert e: rows e*hidden_dim ..
 *   /layers/LLL/experts_w2  [n_experts*dim, hidden_dim]      expert e: rows e*dim .. (its w2 as it
 *                           multiplies, not transposed: the expert, not the FFN unit, is what a rank holds)
 *   /layers/LLL/shared_w1, shared_w3 [shared_hidden_dim, dim], shared_w2_t [shared_hidden_dim, dim]
 *   /layers/LLL/shared_gate [dim] float32                    (these four only with a shared expert)
 * Each stack is one dataset (a block group for q8_0/q4_0, blocked along its
 * columns), so a rank reads the experts it holds as row hyperslabs. The
 * experts take the dtype table's w1, w2, w3 entries; the router and shared
 * expert config.h's moe_dtype.
 *
 * CATS's time-series family (format_version 3, family = "patchtst") has
 * its own attributes and tensors, with biases and no tokenizer; see
 * docs/patchtst.md, which the training script follows too. */
#ifndef MESHINFER_MODEL_FILE_H
#define MESHINFER_MODEL_FILE_H

#include <stddef.h>

#include "meshinfer/config.h"
#include "meshinfer/tokenizer.h"

#define MI_FORMAT_VERSION 2
#define MI_FORMAT_VERSION_SERIES 3 /* the time-series family: docs/patchtst.md gives its layout */
#define MI_FORMAT_VERSION_FAMILY 4 /* a language model's family and traits (see above) */

typedef struct mi_model_file mi_model_file;

/* 1 with one line in err when path is a format people bring that meshinfer
 * does not read (a GGUF file, a safetensors file, a Hugging Face model
 * folder; by their first bytes, or by name when those say nothing), naming it
 * and what to do; 0 otherwise (err untouched). Reads at most 16 bytes. */
int mi_foreign_format(const char *path, char *err);

/* Open a model file read-only, read and validate the config, and check that
 * every tensor exists with the shape the config implies, recording each
 * weight matrix's dtype in cfg (norms must be float32).
 * Returns NULL with one line in err for a missing, truncated or corrupt file,
 * a wrong format version, an invalid config, a tensor of the wrong shape or
 * type, or a block format whose parts do not match. In this and every read
 * below, a fault inside libhdf5 on a damaged file ends the process with one
 * line naming it (common.h mi_fault_file_enter). */
mi_model_file *mi_model_open(const char *path, mi_config *cfg, char *err);
void mi_model_close(mi_model_file *mf);

/* Dataset name of a per-layer tensor, e.g. ("wq", 3) -> "layers/003/wq". */
void mi_model_layer_name(char *buf, size_t n, int layer, const char *tensor);

/* Read rows [row0, row0+nrows) of a 2-D float32 dataset (or elements of a 1-D
 * one, with row_len 1 per row) into out (nrows * row_len floats, row-major;
 * out holds out_cap floats, and a file whose rows would not fit is an error,
 * since the file, not the caller, decides row_len). Only those bytes are read
 * from disk. Returns 0 or -1 with err set. */
int mi_model_read_rows(mi_model_file *mf, const char *name, size_t row0, size_t nrows,
                       float *out, size_t out_cap, char *err);

/* Read stored rows [row0, row0+nrows) of dataset `name` (a whole tensor, or
 * the qs or d part of a block-format group) as raw bytes, row_bytes each (the
 * caller states the row size it expects; a mismatch is an error). Used by the
 * shard loader for every dtype. Returns 0 or -1 with err set. */
int mi_model_read_raw(mi_model_file *mf, const char *name, size_t row0, size_t nrows, size_t row_bytes, void *out,
                      char *err);

/* The same for bytes [byte0, byte0+nbytes) of each of those rows (a column
 * hyperslab: a somegather shard's columns of the embeddings, its rows of the
 * stored-transposed wo_t and w2_t); out receives nrows * nbytes bytes. The
 * range must be whole elements of the stored type. Returns 0 or -1 with err. */
int mi_model_read_raw_cols(mi_model_file *mf, const char *name, size_t row0, size_t nrows, size_t row_bytes,
                           size_t byte0, size_t nbytes, void *out, char *err);

/* Read rows [row0, row0+nrows) of a transposed dataset (wo_t, w2_t: [k, n]) and
 * store them transposed as out[n][nrows], i.e. the column block of the original
 * [n, k] matrix, so the forward pass uses one matrix orientation everywhere. */
int mi_model_read_t(mi_model_file *mf, const char *name, size_t row0, size_t nrows,
                    float *out, char *err);

/* CATS pruning masks a time-series model was trained with (the group
 * /somegather, docs/patchtst.md): mask[x] receives [n_layers, width] bytes
 * (1 = the column's owner sends it) for the exchanges attn_in, heads,
 * ffn_in (width dim) and hidden (width hidden_dim); *ratio the pruning
 * ratio, *magnitude 1 for ordinary magnitude pruning, *ranks the device
 * count trained for. Returns 1, 0 when the file has no masks, or -1 with
 * err (a malformed group). */
int mi_model_read_masks(mi_model_file *mf, unsigned char *mask[4], double *ratio, int *magnitude, int *ranks,
                        char *err);

/* Load the tokenizer stored in the file (either form). Returns 0 or -1 with err set; an id attribute of
 * /tokenizer (bos_id, eos_id, byte_fallback_first_id) that disagrees with the tokenizer is refused. */
int mi_model_read_tokenizer(mi_model_file *mf, mi_tokenizer *tok, char *err);

/* A UTF-8 text stored as dataset `name` (a 1-D byte array; the chat
 * template is /chat_template) into *out (malloc'd, NUL-terminated). Returns
 * 0, 1 when the file has none (*out NULL), or -1 with err when it is not a
 * byte string, holds a NUL or is larger than 64 MB. */
int mi_model_read_text(mi_model_file *mf, const char *name, char **out, char *err);

/* ---- writing: used by `convert` and `synth` ---- */
typedef struct mi_model_writer mi_model_writer;

/* Start writing a model to a temporary name next to path; nothing appears at
 * path until mi_model_writer_commit, so an interrupted or failed conversion
 * never leaves a half-written model behind. */
mi_model_writer *mi_model_writer_create(const char *path, const mi_config *cfg, char *err);

/* Write a full tensor: rows x cols float32 (cols 1 for 1-D tensors).
 * transpose: data is [rows, cols] row-major but stored as [cols, rows]
 * (used for wo and w2). */
/* The same in dtype `dtype` (tensor.h): data is quantized row by row along
 * its cols (the input axis), so cols must be a multiple of 32 for the block
 * types; transposed ones are stored as described above. */
int mi_model_writer_put_tensor(mi_model_writer *w, const char *name, int dtype, const float *data, size_t rows,
                               size_t cols, int transpose, char *err);

/* The same from values already encoded in dtype's in-memory layout
 * (tensor.h: rows of fp32/fp16 values, or of block values q with their fp16
 * scales d, rows * cols/32 of them), stored byte for byte (an import keeps a
 * file's q8_0 and q4_0 blocks exactly). Every value is decoded once to
 * check that it is finite. Returns 0, or -1 with err naming the tensor. */
int mi_model_writer_put_encoded(mi_model_writer *w, const char *name, int dtype, const void *q, const uint16_t *d,
                                size_t rows, size_t cols, int transpose, char *err);

/* Store a text (e.g. "chat_template", the family's chat template as the
 * source file gave it) as a 1-D byte dataset. 0 or -1 with err. */
int mi_model_writer_put_text(mi_model_writer *w, const char *name, const char *text, char *err);
int mi_model_writer_put(mi_model_writer *w, const char *name, const float *data, size_t rows,
                        size_t cols, int transpose, char *err);

/* Store the tokenizer in /tokenizer: llama2.c's as pieces and scores, the
 * BPE kinds as /tokenizer/spec. */
int mi_model_writer_put_tokenizer(mi_model_writer *w, const mi_tokenizer *tok, char *err);

/* Flush, close and atomically rename to the final path. Frees w. */
int mi_model_writer_commit(mi_model_writer *w, char *err);

/* Close and remove the temporary file. Frees w. Safe with NULL. */
void mi_model_writer_abort(mi_model_writer *w);

#endif
