/* How fast this rank's device computes its share (see runtime.h
 * mi_runtime_stream_rate): the cost model's compute time is weight bytes
 * over a streaming rate, so measure that rate on the rank's own weights. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/kernels.h"

/* One matrix-vector product over every weight matrix this rank holds (what
 * one decoded token reads of its shard). Returns the bytes read. */
static double one_pass(mi_runtime *rt, float *x, float *y)
{
    const mi_model *m = &rt->model;
    double bytes = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const mi_layer *L = &m->layers[l];
        const mi_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w3, &L->w2};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            if (ts[i]->rows > 0 && ts[i]->cols > 0) {
                mi_matmul(y, x, ts[i], 1);
                bytes += (double)mi_tensor_bytes(ts[i]->dtype, (size_t)ts[i]->rows, (size_t)ts[i]->cols);
            }
    }
    if (m->cls_nv > 0) {
        mi_matmul(y, x, &m->classifier, 1);
        bytes += (double)mi_tensor_bytes(m->classifier.dtype, (size_t)m->classifier.rows,
                                         (size_t)m->classifier.cols);
    }
    return bytes;
}

double mi_runtime_stream_rate(mi_runtime *rt, double min_seconds, double *all)
{
    const mi_config *c = &rt->plan.cfg;
    size_t wide = (size_t)(c->hidden_dim > c->vocab_size ? c->hidden_dim : c->vocab_size);
    if ((size_t)c->n_heads * c->head_dim > wide)
        wide = (size_t)c->n_heads * c->head_dim;
    if ((size_t)c->dim > wide)
        wide = (size_t)c->dim;
    float *x = mi_calloc(wide, sizeof(float), "calibration"), *y = mi_calloc(wide, sizeof(float), "calibration");
    for (size_t i = 0; i < wide; i++)
        x[i] = 0.01f * (float)(i % 17);
    one_pass(rt, x, y); /* warm: pages touched, caches as in steady decoding */
    double bytes = 0, t0 = mi_now(), t;
    do {
        bytes += one_pass(rt, x, y);
        t = mi_now() - t0;
    } while (t < min_seconds && bytes > 0);
    free(x);
    free(y);
    double rate = bytes > 0 && t > 0 ? bytes / t : 0;
    if (rt->size > 1)
        MPI_Gather(&rate, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    else if (all)
        all[0] = rate;
    return rate;
}
