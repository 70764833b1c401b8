/* Matrix products on tensors of any dtype: activation preparation, row
 * tiling for prefill, threads, and the BLAS paths for fp32 (see kernels.h). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>

#include "family.h"
#include "meshinfer/common.h"
#include "meshinfer/kernels.h"

static int g_threads = 1;
static int g_blas_matvec = 0;

/* OpenBLAS-specific; declared here to avoid depending on its private header. */
extern void openblas_set_num_threads(int);

void mi_set_threads(int n)
{
    g_threads = n > 0 ? n : 1;
    openblas_set_num_threads(g_threads);
}

int mi_threads(void)
{
    return g_threads;
}

void mi_use_blas_matvec(int on)
{
    g_blas_matvec = on;
}

/* Prepared activations live in one buffer reused by every call (a rank runs
 * one product at a time; its threads only read it). */
static void *g_scratch;
static size_t g_scratch_bytes;
static mi_act *g_acts;
static int g_acts_n;

static void *scratch(size_t bytes, int T)
{
    if (bytes > g_scratch_bytes) {
        free(g_scratch);
        g_scratch = NULL;
        if (posix_memalign(&g_scratch, 64, bytes) != 0)
            mi_fatal("out of memory preparing activations (%zu bytes)", bytes);
        g_scratch_bytes = bytes;
    }
    if (T > g_acts_n) {
        free(g_acts);
        g_acts = mi_malloc((size_t)T * sizeof *g_acts, "activation table");
        g_acts_n = T;
    }
    return g_scratch;
}

/* Rows [r0, r1) for every position: weight rows in tiles of about 32 KB so
 * a tile stays in cache while the T positions pass over it; with a tile
 * kernel each weight block is also decoded once per group of positions
 * (family.h), with the same bits as one position at a time. */
static void run_rows(mi_rows_fn rows, mi_tile_fn tile, float *y, int ldy, const mi_tensor *W, int r0, int r1,
                     const mi_act *acts, int T, int add)
{
    if (T == 1) {
        rows(y + r0, W, r0, r1, &acts[0], add);
        return;
    }
    size_t rb = mi_dtype_row_bytes(W->dtype, (size_t)W->cols);
    int rt = rb >= 32768 ? 1 : (int)(32768 / rb);
    for (int a = r0; a < r1; a += rt) {
        int b = a + rt < r1 ? a + rt : r1;
        if (tile)
            tile(y + a, ldy, W, a, b, acts, T, add);
        else
            for (int t = 0; t < T; t++)
                rows(y + (size_t)t * ldy + a, W, a, b, &acts[t], add);
    }
}

static void matmul(float *y, int ldy, const float *x, int ldx, const mi_tensor *W, int T, int add)
{
    const int n_in = W->cols, n_out = W->rows;
    if (T < 1 || n_out < 1)
        return;
    if (W->dtype == MI_F32 && g_blas_matvec) {
        /* Only on request (bench's same-run baseline): a BLAS may pick its
         * kernel by the matrix's size (OpenBLAS's small-matrix kernels on
         * SkylakeX and later), so a row's sum could change with the rows
         * around it and a row-partitioned run would not give one device's
         * bits. Our row kernels below are the same for any slice, at any T.
         * Accumulating into y (beta = 1) is not used: a BLAS that splits the
         * inner dimension into blocks adds each block's partial sums to y, so
         * y + W x would round differently from W x added afterwards, and a
         * sum split over ranks (or not) would no longer give the same bits on
         * every machine (OpenBLAS's Haswell and Zen kernels did on this
         * project's AMD EPYC; its SkylakeX kernels did not). W x is made
         * whole, then added. */
        float *o = add ? scratch((size_t)T * (size_t)n_out * sizeof(float), T) : y;
        int ldo = add ? n_out : ldy;
        if (T == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, n_out, n_in, 1.0f, W->q, n_in, x, 1, 0.0f, o, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n_out, n_in, 1.0f, x, ldx, W->q, n_in, 0.0f, o,
                        ldo);
        if (add)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < n_out; i++)
                    y[(size_t)t * ldy + i] += o[(size_t)t * ldo + i];
        return;
    }
    const mi_kernel_family *f = mi_kernel_active();
    mi_prep_fn prep = f->prep[W->dtype];
    mi_rows_fn rows = f->rows[W->dtype];
    mi_tile_fn tile = f->tile[W->dtype];
    if (!rows) { /* a family may leave a dtype to the reference kernels */
        prep = mi_kernels_scalar.prep[W->dtype];
        rows = mi_kernels_scalar.rows[W->dtype];
        tile = mi_kernels_scalar.tile[W->dtype];
    }
    size_t ab = (MI_ACT_BYTES(n_in) + 63) & ~(size_t)63;
    char *buf = scratch(prep ? ab * (size_t)T : 64, T);
    for (int t = 0; t < T; t++) {
        if (prep) {
            prep(x + (size_t)t * ldx, n_in, buf + (size_t)t * ab, &g_acts[t]);
        } else {
            g_acts[t] = (mi_act){0};
            g_acts[t].n = n_in;
            g_acts[t].x = x + (size_t)t * ldx;
        }
    }
    int nt = g_threads;
    /* below ~64 KB of weights a second thread costs more than it saves */
    if (nt > 1 && (double)mi_dtype_row_bytes(W->dtype, (size_t)n_in) * n_out < 65536.0)
        nt = 1;
    if (nt > n_out)
        nt = n_out;
    if (nt == 1) {
        run_rows(rows, tile, y, ldy, W, 0, n_out, g_acts, T, add);
        return;
    }
    /* each thread a contiguous share of the rows; a row's result does not
     * depend on which thread computes it */
#pragma omp parallel num_threads(nt)
    {
        int i = omp_get_thread_num();
        int a = (int)((long)n_out * i / nt), b = (int)((long)n_out * (i + 1) / nt);
        run_rows(rows, tile, y, ldy, W, a, b, g_acts, T, add);
    }
}

void mi_matmul(float *y, const float *x, const mi_tensor *W, int T)
{
    matmul(y, W->rows, x, W->cols, W, T, 0);
}

void mi_matmul_add(float *y, const float *x, const mi_tensor *W, int T)
{
    matmul(y, W->rows, x, W->cols, W, T, 1);
}

void mi_matmul_ld(float *y, int ldy, const float *x, int ldx, const mi_tensor *W, int T, int add)
{
    matmul(y, ldy, x, ldx, W, T, add);
}
