/* Reading llama2.c checkpoints (legacy "version 0" and "version 1" formats),
 * for `meshinfer convert`. */
#ifndef MESHINFER_CHECKPOINT_H
#define MESHINFER_CHECKPOINT_H

#include <stddef.h>

#include "meshinfer/config.h"

typedef struct {
    mi_config cfg;
    int version;               /* 0: legacy, 1: "ak42" header */
    void *map;                 /* mmap of the whole file */
    size_t map_size;
    /* Pointers into the map, llama2.c orientation ([out, in] rows). Stacked
     * per layer: e.g. wq has n_layers * dim * dim floats. */
    const float *tok_embeddings, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
} mi_checkpoint;

/* Map and validate a checkpoint: header values must form a valid config and
 * the file size must match exactly what the header implies (so truncated or
 * padded files are caught). Returns 0 or -1 with one line in err. */
int mi_checkpoint_open(mi_checkpoint *ck, const char *path, char *err);
void mi_checkpoint_close(mi_checkpoint *ck);

/* Convert checkpoint + tokenizer.bin into a meshinfer HDF5 model at out_path,
 * written atomically (temp file + rename). name is stored as the model name.
 * Returns 0 or -1 with err set; on failure no file is left at out_path. */
int mi_convert(const char *ckpt_path, const char *tok_path, const char *out_path, const char *name, char *err);

#endif
