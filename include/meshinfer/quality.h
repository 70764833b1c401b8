/* Quality of a model configuration on one device: tokens of a text file,
 * windowed perplexity, negative log-likelihood, and a model made to compute
 * what `meshinfer quantize` (dtypes, pruned FFN shards) would write, in
 * memory. No MPI. */
#ifndef MESHINFER_QUALITY_H
#define MESHINFER_QUALITY_H

#include <stddef.h>

#include "meshinfer/model.h"
#include "meshinfer/forward.h"
#include "meshinfer/tokenizer.h"

/* The tokens of text file path (no BOS), at most max_tokens; mi_fatal names
 * an unreadable file, text the tokenizer refuses, or fewer than 2 tokens. */
int *mi_text_ids(const char *path, const mi_tokenizer *tok, long max_tokens, int *n);

/* Perplexity of ids[n] in windows of the context, each starting with token
 * bos (mi_tokenizer_doc_start: the tokenizer's BOS). */
double mi_window_perplexity(mi_model *m, mi_scratch *s, const int *ids, int n, int bos);

/* Rows [r0, r0+n) of t set to zero, in any dtype (a blocked row's scales
 * too). */
void mi_zero_rows(mi_tensor *t, int r0, int n);

/* Model m (every layer held) made to compute what `meshinfer quantize` would
 * write for target's layer dtypes and, with keep (n_layers rows of kept
 * hidden channels, planner.h mi_prune_keep), its pruning: the pruned channels'
 * w3 rows zeroed (their outputs vanish) before the layers are re-encoded. */
void mi_model_apply(mi_model *m, const mi_config *target, const int *keep, int kept);

/* Negative log-likelihood (nats) of token `target` under logits[V]
 * (perplexity, importance). */
double mi_nll(const float *logits, int V, int target);

#endif
