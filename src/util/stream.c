/* STREAM triad measurement (see stream.h). */
#include "meshinfer/stream.h"

#include <stdlib.h>

#include "meshinfer/common.h"

double mi_stream_triad_gbs(size_t n, int reps, int threads)
{
    float *a = mi_malloc(n * sizeof(float), "STREAM arrays");
    float *b = mi_malloc(n * sizeof(float), "STREAM arrays");
    float *c = mi_malloc(n * sizeof(float), "STREAM arrays");
    if (threads < 1)
        threads = 1;
    /* first touch by the threads that use each part, as STREAM does */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) {
        a[i] = 0.0f;
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
    double best = 1e30;
    volatile float s = 3.0f;
    for (int r = 0; r < reps; r++) {
        float sc = s;
        double t0 = mi_now();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < n; i++)
            a[i] = b[i] + sc * c[i];
        double dt = mi_now() - t0;
        if (dt < best)
            best = dt;
    }
    /* keep the result observable so the loop is not removed */
    volatile float sink = a[n / 2];
    (void)sink;
    free(a);
    free(b);
    free(c);
    return 3.0 * sizeof(float) * (double)n / best / 1e9;
}
