/* Lowering a model's precision (Voltron: precision per layer and per
 * tensor): choosing the dtype of every weight matrix, and writing a model
 * file in those dtypes from an fp32 one. No MPI. */
#ifndef MESHINFER_QUANTIZE_H
#define MESHINFER_QUANTIZE_H

#include "meshinfer/config.h"

/* Set the weight dtypes of c (its table, tensor.h names):
 *   dtype        every layer matrix (NULL: leave as is)
 *   layer_spec   per layer, overriding dtype: "A[-B]:DTYPE[,...]", e.g.
 *                "0-1:q8_0,2-5:q4_0" (NULL: none); every layer named must
 *                exist and none twice
 *   emb_dtype    token embeddings and classifier (NULL: dtype, or as is)
 * Returns 0, or -1 with one line in err: an unknown dtype name, a malformed
 * spec, a layer outside the model or named twice, or a block dtype on a
 * matrix whose blocked axis is not a multiple of its block (32, or 256 for
 * the k-quants). */
int mi_dtypes_apply(mi_config *c, const char *dtype, const char *layer_spec, const char *emb_dtype, char *err);

/* The same, where dtype may also be llama.cpp's mixes "q4_K_M" and "q5_K_M"
 * (q4_K or q5_K everywhere but: the classifier, and tied embeddings, q6_K;
 * wv and w2 q6_K in the layers l < n/8, l >= 7n/8 and (l - n/8) % 3 == 2,
 * n = n_layers; untied embeddings the base type), as llama_tensor_get_type
 * chooses them, and where a k-quant that dtype gives a matrix whose blocked
 * axis is not whole super-blocks of 256 falls back: q4_K to q4_0, q5_K and
 * q6_K to q8_0 (fp16 if the axis is not whole blocks of 32 either).
 * *n_fallback (not NULL) receives the number of matrices that fell back
 * (the embeddings and an untied classifier count one each). layer_spec and
 * emb_dtype name their tensors and never fall back: a k-quant there on
 * rows that are not whole super-blocks is refused. */
int mi_dtypes_apply_fallback(mi_config *c, const char *dtype, const char *layer_spec, const char *emb_dtype,
                             int *n_fallback, char *err);

/* Write the model `in` (every weight fp32) to `out` with the weight dtypes of
 * `target` (a config of the same shape, e.g. from mi_dtypes_apply): each
 * matrix read whole, quantized row by row along its input axis, written as
 * model_file.h describes; norms and tokenizer copied. out appears only when
 * complete (model_file.h's writer). progress: 0 silent, 1 a line per quarter,
 * 2 a rewritten line per layer (on stderr). Returns 0, or -1 with err: an
 * unreadable input, an input that is not all fp32 (already quantized), a
 * shape mismatch, non-finite weights (named), out the same file as in, or a
 * write failure. */
int mi_model_quantize(const char *in, const char *out, const mi_config *target, int progress, char *err);

/* The same, pruning the FFN (Voltron §4.3.1 shard-wise pruning): target's
 * hidden_dim is the channels kept, and ffn_keep lists them per layer
 * (n_layers rows of target->hidden_dim indices into the input's hidden
 * channels, ascending; planner.h mi_prune_keep makes it): rows of w1 and w3 and
 * columns of w2 are kept, so the written model computes what the input does
 * with the other channels' outputs zero. NULL ffn_keep, or target->hidden_dim
 * equal to the input's: mi_model_quantize. Errors as there, and: a
 * hidden_dim larger than the input's, indices out of range or not
 * ascending. */
int mi_model_quantize_pruned(const char *in, const char *out, const mi_config *target, const int *ffn_keep,
                             int progress, char *err);

#endif
