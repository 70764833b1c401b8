/* CATS's time-series workload (docs/patchtst.md): series files, the
 * PatchTST-style encoder's input (instance normalisation, patches), its
 * patch embedding and forecasting head, and its single-device forecast.
 * The distributed runtime runs the same functions on the shards a plan
 * gives each rank, so one device and many compute the same numbers. */
#ifndef MESHINFER_SERIES_H
#define MESHINFER_SERIES_H

#include "meshinfer/forward.h"

/* A multivariate series: rows time steps (chronological), cols channels. */
typedef struct {
    int rows, cols;
    double *v;          /* [rows, cols] row-major */
    char **names;       /* [cols] column names from the header */
    int skipped_time;   /* 1: the file's first column (time, date or timestamp) was left out */
} mi_series;

/* Read a CSV series: a header row of column names, then one row per time
 * step of numbers. A first column named time, date or timestamp is left out
 * (a label, not a channel). Returns 0, or -1 with one line in err naming the
 * file, line (the header is line 1) and column of the first problem: a
 * missing, non-numeric or non-finite value (empty, NA, nan, inf), one beyond
 * float32's range, a row with another field count, a blank line with data
 * after it (it would shift the time steps), no data rows, or a file that
 * cannot be read. Files are outside input: every field is
 * bounded (at most 4096 columns, 64-character names kept). */
int mi_series_read(const char *path, mi_series *s, char *err);
void mi_series_free(mi_series *s);

/* Input of one channel: x[lookback] -> patches[n_patches * patch_len] after
 * instance normalisation (RevIN without affine): mean *mu, *sigma =
 * sqrt(population variance + 1e-5). */
void mi_series_patches(const mi_config *c, const float *x, float *patches, float *mu, float *sigma);

/* Columns [c0, c0+n) of the embedded patches, for T patches:
 * x[t*ldx + (0..n)] = patch_embed[c0.., :] @ patches[t] + patch_embed_b[c0..] + pos_embed[t][c0..].
 * The model holds the whole patch embedding (dim * patch_len values). */
void mi_patch_embed(const mi_model *m, const float *patches, int T, float *x, int ldx, int c0, int n);

/* The head rows this device holds: y[cls_nv] = head @ flat(x) + head_b,
 * x: [n_patches, dim] (every column; flat index n*dim + f). */
void mi_series_head(const mi_model *m, const float *x, float *y);

/* One channel's forecast on a device holding the whole model:
 * patches [n_patches * patch_len] (mi_series_patches) -> y[horizon], still
 * normalised (multiply by sigma, add mu). s: scratch for seq_len positions. */
void mi_series_forward(mi_model *m, mi_scratch *s, const float *patches, float *y);

#endif
