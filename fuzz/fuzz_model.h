/* The small seeded synthetic model the HDF5 and command-line harnesses start
 * from (the repository keeps no model files, not even fuzz seeds). */
#ifndef MESHINFER_FUZZ_MODEL_H
#define MESHINFER_FUZZ_MODEL_H
#include <string.h>

#include "meshinfer/config.h"

/* dim 32, hidden 32, 2 layers, 4 heads (2 KV), vocab 260 (the least with
 * byte fallback and a few merges), 64 positions: files of 50-130 KB */
static inline void fuzz_tiny_config(mi_config *c, int shared)
{
    memset(c, 0, sizeof *c);
    c->dim = 32, c->hidden_dim = 32, c->n_layers = 2, c->n_heads = 4, c->n_kv_heads = 2, c->head_dim = 8;
    c->vocab_size = 260, c->seq_len = 64, c->rope_theta = 10000.0f, c->norm_eps = 1e-5f;
    c->shared_classifier = shared, c->synthetic = 1;
    strcpy(c->name, "fuzz-tiny");
}

/* A tiny time-series model (docs/patchtst.md): 2 layers, dim 32, 4 heads,
 * patches of 4 every 2 rows over a look-back of 12 (5 patches), horizon 4,
 * 2 channels. */
static inline void fuzz_tiny_series_config(mi_config *c)
{
    memset(c, 0, sizeof *c);
    mi_config_set_family(c, MI_FAMILY_PATCHTST);
    c->dim = 32, c->hidden_dim = 64, c->n_layers = 2, c->n_heads = c->n_kv_heads = 4, c->head_dim = 8;
    c->patch_len = 4, c->patch_stride = 2, c->lookback = 12, c->seq_len = 5, c->horizon = c->vocab_size = 4;
    c->n_channels = 2, c->rope_theta = 10000.0f, c->norm_eps = 1e-5f, c->synthetic = 1;
    strcpy(c->name, "fuzz-tiny-series");
}
#endif
