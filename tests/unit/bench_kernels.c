/* Kernel benchmark (not a test): matrix-vector products of real model shapes
 * for every dtype and every kernel family this CPU runs, as weight GB/s and
 * as a ratio to the scalar reference family measured in the same run.
 *
 * usage: bench_kernels [--quick] [SHAPE...]   SHAPE as ROWSxCOLS, default the
 *        TinyLlama-1.1B and stories15M matrices */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/kernels/family.h"
#include "meshinfer/tensor.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t g_rng = 88172645463325252ull;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Best seconds per product over `reps` runs, cycling over `copies` copies of
 * the matrix so that large ones come from memory, as in decoding. */
static double time_family(const mi_kernel_family *f, const mi_tensor *W, int copies, const float *x, float *y,
                          int reps)
{
    mi_prep_fn prep = f->prep[W->dtype];
    mi_rows_fn rows = f->rows[W->dtype];
    if (!rows)
        return -1;
    void *scratch;
    if (posix_memalign(&scratch, 64, MI_ACT_BYTES(W->cols)))
        abort();
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const mi_tensor *w = &W[r % copies];
        double t0 = now();
        mi_act a;
        memset(&a, 0, sizeof a);
        a.n = w->cols;
        a.x = x;
        if (prep)
            prep(x, w->cols, scratch, &a);
        rows(y, w, 0, w->rows, &a, 0);
        double t = now() - t0;
        if (t < best)
            best = t;
    }
    free(scratch);
    return best;
}

int main(int argc, char **argv)
{
    int quick = 0, n_shapes = 0, shapes[16][2];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (n_shapes < 16 && sscanf(argv[i], "%dx%d", &shapes[n_shapes][0], &shapes[n_shapes][1]) == 2)
            n_shapes++;
        else {
            fprintf(stderr, "usage: bench_kernels [--quick] [ROWSxCOLS ...]\n");
            return 2;
        }
    }
    if (!n_shapes) {
        int def[][2] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}, {32000, 288}, {768, 288}};
        n_shapes = 6;
        memcpy(shapes, def, sizeof def);
    }
    int nf;
    const mi_kernel_family *const *fs = mi_kernel_families(&nf);
    printf("%-12s %-5s %-13s %10s %9s %9s\n", "shape", "dtype", "family", "us/product", "GB/s", "vs scalar");
    for (int s = 0; s < n_shapes; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        float *x = malloc((size_t)cols * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
        float *row = malloc((size_t)cols * sizeof(float));
        for (int i = 0; i < cols; i++)
            x[i] = frand();
        for (int t = 0; t < MI_N_DTYPES; t++) {
            size_t bytes = mi_tensor_bytes(t, (size_t)rows, (size_t)cols);
            /* enough copies to exceed a 32 MB last-level cache */
            int copies = bytes >= (64u << 20) ? 1 : (int)((96u << 20) / bytes) + 1;
            if (copies > 64)
                copies = 64;
            mi_tensor *W = calloc((size_t)copies, sizeof *W);
            for (int c = 0; c < copies; c++) {
                W[c] = mi_tensor_shape((mi_dtype)t, rows, cols);
                void *mem;
                if (posix_memalign(&mem, 64, mi_tensor_place_bytes(t, (size_t)rows, (size_t)cols)))
                    abort();
                mi_tensor_place(&W[c], mem);
                for (int r = 0; r < rows; r++) {
                    for (int i = 0; i < cols; i++)
                        row[i] = frand() * 0.05f;
                    size_t qb = mi_dtype_q_row_bytes(t, (size_t)cols);
                    mi_quantize_row(t, row, cols, (char *)W[c].q + (size_t)r * qb,
                                    W[c].d ? W[c].d + (size_t)r * (cols / MI_QK) : NULL);
                }
            }
            int reps = quick ? 5 : 20;
            if (reps < 2 * copies)
                reps = 2 * copies;
            double base = -1;
            for (int i = 0; i < nf; i++) {
                if (!fs[i]->available())
                    continue;
                double sec = time_family(fs[i], W, copies, x, y, i == 0 && quick ? 3 : reps);
                if (sec < 0)
                    continue;
                if (i == 0)
                    base = sec;
                printf("%5dx%-6d %-5s %-13s %10.1f %9.2f %8.2fx\n", rows, cols, mi_dtype_name(t), fs[i]->name,
                       sec * 1e6, (double)bytes / sec / 1e9, base > 0 ? base / sec : 0.0);
            }
            for (int c = 0; c < copies; c++)
                free(W[c].q);
            free(W);
        }
        free(x);
        free(y);
        free(row);
    }
    return 0;
}
