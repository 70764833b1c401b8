/* Kernel benchmark (not a test): matrix-vector products of real model shapes
 * for every dtype and every kernel family this CPU runs, as weight GB/s and
 * as ratios to the scalar reference family, to q4_0 in the same family and
 * to the STREAM triad bandwidth (1 thread), all measured in the same run.
 * With several rounds every measurement is repeated once per round, in
 * turn (triad, then each dtype and family), and the median is reported, so
 * that a machine's drift over the run falls on all of them alike.
 *
 * With --batch, products of T activation rows instead (mi_matmul_ld with each
 * family in turn: activation preparation, ~32 KB row tiles, the tile kernels
 * for T > 1), for each T of the list, as microseconds per activation row and
 * as throughput against T = 1 in the same family and run ("x T=1": how many
 * times the rows per second of single-row products; T rows at once against T
 * separate products). Every T of a dtype and family in turn within a round.
 *
 * usage: bench_kernels [--quick] [--rounds R] [--dtypes LIST] [--copies C] [--batch TLIST] [SHAPE...]
 *        SHAPE as ROWSxCOLS, default the TinyLlama-1.1B and stories15M
 *        matrices; LIST comma-separated dtype names (default all; q4_0 is
 *        added when absent, as the reference of the "vs q4_0" column);
 *        R rounds (default 1); C copies of each matrix, cycled through (default
 *        enough to exceed a 32 MB last-level cache; 1 measures a matrix that
 *        fits a cache: the kernels' compute speed); TLIST comma-separated T
 *        (e.g. 1,4,8; 1 is added when absent, as the reference) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/kernels/family.h"
#include "meshinfer/kernels.h"
#include "meshinfer/stream.h"
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The matrices of one dtype: enough copies to exceed a 32 MB last-level cache. */
typedef struct {
    int copies;
    mi_tensor *W;
} dtype_set;

static dtype_set make_set(int t, int rows, int cols, float *row, int copies)
{
    size_t bytes = mi_tensor_bytes(t, (size_t)rows, (size_t)cols);
    dtype_set ds;
    ds.copies = bytes >= (64u << 20) ? 1 : (int)((96u << 20) / bytes) + 1;
    if (ds.copies > 64)
        ds.copies = 64;
    if (copies > 0)
        ds.copies = copies;
    ds.W = calloc((size_t)ds.copies, sizeof *ds.W);
    for (int c = 0; c < ds.copies; c++) {
        ds.W[c] = mi_tensor_shape((mi_dtype)t, rows, cols);
        void *mem;
        if (posix_memalign(&mem, 64, mi_tensor_place_bytes(t, (size_t)rows, (size_t)cols)))
            abort();
        mi_tensor_place(&ds.W[c], mem);
        for (int r = 0; r < rows; r++) {
            for (int i = 0; i < cols; i++)
                row[i] = frand() * 0.05f;
            size_t qb = mi_dtype_q_row_bytes(t, (size_t)cols);
            mi_quantize_row(t, row, cols, (char *)ds.W[c].q + (size_t)r * qb,
                            ds.W[c].d ? ds.W[c].d + (size_t)r * (cols / MI_QK) : NULL);
        }
    }
    return ds;
}

/* Best seconds per product of T rows through mi_matmul_ld with family f
 * active, cycling over the copies. */
static double time_batch(const mi_kernel_family *f, const mi_tensor *W, int copies, const float *x, float *y, int T,
                         int reps)
{
    char err[256];
    if (mi_kernels_use(f->name, err) != 0)
        return -1;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const mi_tensor *w = &W[r % copies];
        double t0 = now();
        mi_matmul_ld(y, w->rows, x, w->cols, w, T, 0);
        double t = now() - t0;
        if (t < best)
            best = t;
    }
    mi_kernels_use("auto", err);
    return best;
}

/* --batch: per shape, dtype and family, microseconds per activation row at
 * each T and the throughput against T = 1 (medians over the rounds). */
static void run_batch(int rows, int cols, const int *want, int copies, const int *Ts, int nT, int rounds, int quick)
{
    int nf;
    const mi_kernel_family *const *fs = mi_kernel_families(&nf);
    if (nf > 8)
        nf = 8;
    int maxT = 1;
    for (int i = 0; i < nT; i++)
        maxT = Ts[i] > maxT ? Ts[i] : maxT;
    float *x = malloc((size_t)maxT * cols * sizeof(float)), *y = malloc((size_t)maxT * rows * sizeof(float));
    float *row = malloc((size_t)cols * sizeof(float));
    for (size_t i = 0; i < (size_t)maxT * cols; i++)
        x[i] = frand();
    double *sec = calloc((size_t)rounds * nT, sizeof *sec), *tmp = calloc((size_t)rounds, sizeof *tmp);
    printf("%-12s %-5s %-13s %4s %10s %10s %9s %8s\n", "shape", "dtype", "family", "T", "us/product", "us/row",
           "rows/s", "x T=1");
    for (int t = 0; t < MI_N_DTYPES; t++) {
        if (!want[t] || cols % mi_dtype_block(t) != 0)
            continue;
        dtype_set ds = make_set(t, rows, cols, row, copies);
        for (int i = 0; i < nf; i++) {
            if (!fs[i]->available())
                continue;
            int reps = quick ? 5 : 20;
            if (reps < 2 * ds.copies)
                reps = 2 * ds.copies;
            if (i == 0) /* the scalar reference is slow: a few products */
                reps = quick ? 2 : 3;
            for (int rd = 0; rd < rounds; rd++)
                for (int k = 0; k < nT; k++) {
                    int kk = rd % 2 ? nT - 1 - k : k; /* every other round in reverse */
                    sec[rd * nT + kk] = time_batch(fs[i], ds.W, ds.copies, x, y, Ts[kk], reps);
                }
            double one = 0;
            for (int k = 0; k < nT; k++) {
                for (int rd = 0; rd < rounds; rd++)
                    tmp[rd] = sec[rd * nT + k];
                double me = median(tmp, rounds);
                if (Ts[k] == 1)
                    one = me;
                printf("%5dx%-6d %-5s %-13s %4d %10.1f %10.2f %9.0f %7.2fx\n", rows, cols, mi_dtype_name(t),
                       fs[i]->name, Ts[k], me * 1e6, me * 1e6 / Ts[k], Ts[k] / me, one > 0 ? one * Ts[k] / me : 0.0);
            }
        }
        for (int c = 0; c < ds.copies; c++)
            free(ds.W[c].q);
        free(ds.W);
    }
    free(x);
    free(y);
    free(row);
    free(sec);
    free(tmp);
}

int main(int argc, char **argv)
{
    int quick = 0, rounds = 1, copies = 0, n_shapes = 0, shapes[16][2], want[MI_N_DTYPES], Ts[16], nT = 0;
    for (int t = 0; t < MI_N_DTYPES; t++)
        want[t] = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--copies") && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            copies = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            char list[256];
            snprintf(list, sizeof list, "%s", argv[++i]);
            nT = 0; /* a second --batch replaces the first */
            Ts[nT++] = 1;
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                int T = atoi(tok);
                if (T < 1 || T > 4096 || nT >= 16) {
                    fprintf(stderr, "bench_kernels: --batch wants up to 15 T from 1 to 4096, not '%s'\n", tok);
                    return 2;
                }
                if (T > 1)
                    Ts[nT++] = T;
            }
        } else if (!strcmp(argv[i], "--dtypes") && i + 1 < argc) {
            char list[256];
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (int t = 0; t < MI_N_DTYPES; t++)
                want[t] = t == MI_Q4_0;
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                mi_dtype t;
                if (mi_dtype_parse(tok, &t) != 0) {
                    fprintf(stderr, "bench_kernels: unknown dtype '%s'\n", tok);
                    return 2;
                }
                want[t] = 1;
            }
        } else if (n_shapes < 16 && sscanf(argv[i], "%dx%d", &shapes[n_shapes][0], &shapes[n_shapes][1]) == 2 &&
                   shapes[n_shapes][0] > 0 && shapes[n_shapes][1] > 0) {
            n_shapes++;
        } else {
            fprintf(stderr, "usage: bench_kernels [--quick] [--rounds R] [--dtypes LIST] [--copies C] [--batch TLIST] "
                            "[ROWSxCOLS ...]\n");
            return 2;
        }
    }
    if (!n_shapes) {
        int def[][2] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}, {32000, 288}, {768, 288}};
        n_shapes = 6;
        memcpy(shapes, def, sizeof def);
    }
    if (nT) {
        for (int s = 0; s < n_shapes; s++)
            run_batch(shapes[s][0], shapes[s][1], want, copies, Ts, nT, rounds, quick);
        return 0;
    }
    int nf;
    const mi_kernel_family *const *fs = mi_kernel_families(&nf);
    if (nf > 8)
        nf = 8;
    /* seconds per product: [round][dtype][family]; triad GB/s per round */
    double(*sec)[MI_N_DTYPES][8] = calloc((size_t)rounds, sizeof *sec);
    double *triad = calloc((size_t)rounds, sizeof *triad), *tmp = calloc((size_t)rounds, sizeof *tmp);
    printf("%-12s %-5s %-13s %10s %9s %9s %8s %9s\n", "shape", "dtype", "family", "us/product", "GB/s", "vs scalar",
           "vs q4_0", "vs triad");
    for (int s = 0; s < n_shapes; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        float *x = malloc((size_t)cols * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
        float *row = malloc((size_t)cols * sizeof(float));
        for (int i = 0; i < cols; i++)
            x[i] = frand();
        dtype_set sets[MI_N_DTYPES];
        memset(sets, 0, sizeof sets);
        for (int t = 0; t < MI_N_DTYPES; t++)
            if (want[t] && cols % mi_dtype_block(t) == 0)
                sets[t] = make_set(t, rows, cols, row, copies);
        for (int rd = 0; rd < rounds; rd++) {
            /* 128 MB arrays, as `meshinfer bench` by default */
            triad[rd] = mi_stream_triad_gbs((size_t)32 << 20, quick ? 3 : 5, 1);
            for (int t = 0; t < MI_N_DTYPES; t++) {
                if (!sets[t].W)
                    continue;
                int reps = quick ? 5 : 20;
                if (reps < 2 * sets[t].copies)
                    reps = 2 * sets[t].copies;
                for (int i = 0; i < nf; i++)
                    sec[rd][t][i] = fs[i]->available()
                                        ? time_family(fs[i], sets[t].W, sets[t].copies, x, y, i == 0 && quick ? 3 : reps)
                                        : -1;
            }
        }
        double tri = median(memcpy(tmp, triad, (size_t)rounds * sizeof *tmp), rounds);
        printf("%5dx%-6d STREAM triad, 1 thread: %.2f GB/s (median of %d rounds)\n", rows, cols, tri, rounds);
        for (int t = 0; t < MI_N_DTYPES; t++) {
            if (!sets[t].W)
                continue;
            double bytes = (double)mi_tensor_bytes(t, (size_t)rows, (size_t)cols);
            for (int i = 0; i < nf; i++) {
                if (sec[0][t][i] < 0)
                    continue;
                for (int rd = 0; rd < rounds; rd++)
                    tmp[rd] = sec[rd][t][i];
                double me = median(tmp, rounds), base = -1, q4 = -1;
                if (sec[0][t][0] >= 0) {
                    for (int rd = 0; rd < rounds; rd++)
                        tmp[rd] = sec[rd][t][0];
                    base = median(tmp, rounds);
                }
                /* q4_0 in the same family (the scalar one's if the family has no q4_0) */
                int qf = sec[0][MI_Q4_0][i] >= 0 ? i : 0;
                if (sets[MI_Q4_0].W && sec[0][MI_Q4_0][qf] >= 0) {
                    for (int rd = 0; rd < rounds; rd++)
                        tmp[rd] = sec[rd][MI_Q4_0][qf];
                    q4 = (double)mi_tensor_bytes(MI_Q4_0, (size_t)rows, (size_t)cols) / median(tmp, rounds) / 1e9;
                }
                double gbs = bytes / me / 1e9;
                printf("%5dx%-6d %-5s %-13s %10.1f %9.2f %8.2fx %7.2fx %8.0f%%\n", rows, cols, mi_dtype_name(t),
                       fs[i]->name, me * 1e6, gbs, base > 0 ? base / me : 0.0, q4 > 0 ? gbs / q4 : 0.0,
                       100.0 * gbs / tri);
            }
        }
        for (int t = 0; t < MI_N_DTYPES; t++) {
            for (int c = 0; sets[t].W && c < sets[t].copies; c++)
                free(sets[t].W[c].q);
            free(sets[t].W);
        }
        free(x);
        free(y);
        free(row);
    }
    free(sec);
    free(triad);
    free(tmp);
    return 0;
}
