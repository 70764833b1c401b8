/* Seeded synthetic models in the shape of real ones, for speed and scale work
 * only (throughput does not depend on weight values; accuracy does). Files
 * carry synthetic=1 and every command that loads one says "synthetic weights". */
#ifndef MESHINFER_SYNTH_H
#define MESHINFER_SYNTH_H

#include <stdint.h>

#include "meshinfer/config.h"
#include "meshinfer/tokenizer.h"

/* A byte-level vocabulary of vocab_size ids (<unk>, <s>, </s>, 256 byte
 * tokens, then distinct made-up pieces), so synthetic models can encode and
 * decode any text. Returns 0 or -1 with err set. */
int mi_tokenizer_synthetic(mi_tokenizer *t, int vocab_size, char *err);

/* Write a model of shape c with weights drawn uniformly with the standard
 * deviation of the usual 0.02 initialisation (norm weights 1), seeded by
 * seed and the tensor name, to path (atomically), each weight matrix in the
 * dtype c's table gives it (quantized from the same seeded values, so the
 * dtypes of one seed are the same model at different precisions). progress: 0 none, 1 a line
 * every quarter (logs), 2 one line redrawn per layer (terminals), on stderr.
 * Returns 0 or -1 with err set. */
int mi_synth_write(const mi_config *c, uint64_t seed, const char *path, int progress, char *err);

#endif
