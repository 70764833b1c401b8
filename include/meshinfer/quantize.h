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
 * matrix whose blocked axis is not a multiple of 32. */
int mi_dtypes_apply(mi_config *c, const char *dtype, const char *layer_spec, const char *emb_dtype, char *err);

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
