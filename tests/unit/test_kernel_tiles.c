/* CUnit checks of the tile kernels (src/kernels/family.h): for every family
 * this CPU runs and every dtype, products of T = 1..9 activation rows over
 * odd row counts, row subsets and any position of a row in the group give,
 * row by row, the bits of the family's T = 1 product (its row kernel), also
 * when adding into y, and stay within the scalar reference's rounding
 * tolerance. With MI_TEST_MATMUL (the host build, which has matmul.c) the
 * same through mi_matmul_ld at T up to 67, in cache-sized row tiles and on
 * two threads. Weights are random bytes (q8_0's -127..127; random k-quant
 * super-blocks with finite scales), not an encoder's output,
 * so that the test stays short under qemu. */
#include <CUnit/Basic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/kernels/family.h"
#include "meshinfer/tensor.h"
#include "test_kernels.h"
#ifdef MI_TEST_MATMUL
#include "meshinfer/kernels.h"
#endif

enum { MAXT = 9 };

static uint64_t g_state = 0x9e3779b97f4a7c15ull;

static uint32_t next32(void)
{
    g_state ^= g_state << 13;
    g_state ^= g_state >> 7;
    g_state ^= g_state << 17;
    return (uint32_t)(g_state >> 32);
}

static float frand(void) /* uniform in [-1, 1) */
{
    return (float)(next32() >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

/* A rows x cols tensor of dtype t of random values (see the header comment). */
static mi_tensor random_tensor(int t, int rows, int cols, void **mem)
{
    mi_tensor W = mi_tensor_shape((mi_dtype)t, rows, cols);
    size_t bytes = mi_tensor_place_bytes(t, (size_t)rows, (size_t)cols);
    if (posix_memalign(mem, 64, bytes ? bytes : 64) != 0)
        abort();
    mi_tensor_place(&W, *mem);
    size_t rb = mi_dtype_q_row_bytes(t, (size_t)cols);
    uint8_t *q = W.q;
    for (size_t i = 0; i < rb * (size_t)rows; i++)
        q[i] = (uint8_t)next32();
    if (t == MI_Q8_0) /* -127..127, as every quantizer writes (AVX2 takes -128 as +128) */
        for (size_t i = 0; i < rb * (size_t)rows; i++)
            q[i] = q[i] == 0x80 ? 0x81 : q[i];
    if (t == MI_F32)
        for (size_t i = 0; i < (size_t)rows * cols; i++)
            ((float *)W.q)[i] = frand();
    if (t == MI_F16)
        for (size_t i = 0; i < (size_t)rows * cols; i++)
            ((uint16_t *)W.q)[i] = mi_fp16_from_f32(frand());
    if (W.d)
        for (size_t i = 0; i < (size_t)rows * (cols / MI_QK); i++)
            W.d[i] = mi_fp16_from_f32(0.02f * frand());
    if (mi_dtype_kquant(t)) { /* finite super-block scales: d (and dmin) at its start, q6_K's at its end */
        size_t bb = mi_dtype_q_row_bytes(t, MI_QK_K);
        for (size_t k = 0; k < (size_t)rows * (cols / MI_QK_K); k++) {
            uint16_t d = mi_fp16_from_f32(0.01f * frand()), dmin = mi_fp16_from_f32(0.01f * frand());
            uint8_t *blk = q + k * bb;
            if (t == MI_Q6_K) {
                memcpy(blk + 208, &d, 2);
            } else {
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &dmin, 2);
            }
        }
    }
    return W;
}

/* Activation row t: random of growing size, all zeros, or small values with outliers. */
static void fill_row(float *x, int n, int t)
{
    for (int i = 0; i < n; i++)
        x[i] = t % 4 == 3 ? 0.0f : t % 5 == 4 ? (i % 37 == 3 ? 50.0f : 0.01f) * frand() : (1 + t) * frand();
}

typedef struct {
    const mi_kernel_family *f; /* the family whose kernels run this dtype (scalar where it has none) */
    mi_prep_fn prep;
    mi_rows_fn rows;
    mi_tile_fn tile;
} kernels;

static kernels kernels_of(const mi_kernel_family *f, int t)
{
    kernels k = {f, f->prep[t], f->rows[t], f->tile[t]};
    if (!k.rows) /* as matmul.c: the family leaves the dtype to the reference */
        k = (kernels){&mi_kernels_scalar, mi_kernels_scalar.prep[t], mi_kernels_scalar.rows[t],
                      mi_kernels_scalar.tile[t]};
    return k;
}

static void prepare(const kernels *k, const float *x, int n, void *scratch, mi_act *a)
{
    memset(a, 0, sizeof *a);
    a->n = n;
    a->x = x;
    if (k->prep)
        k->prep(x, n, scratch, a);
}

/* One matrix with family f: returns the rows out of tolerance; adds the tile
 * results that differ from the row kernel's bits to *bits. */
static int check_matrix(const mi_kernel_family *f, const mi_tensor *W, int *bits)
{
    const int m = W->rows, n = W->cols, ldy = m + 2, t_dt = W->dtype;
    kernels k = kernels_of(f, t_dt), s = kernels_of(&mi_kernels_scalar, t_dt);
    float *x = malloc((size_t)MAXT * n * sizeof(float));
    float *ref = malloc((size_t)MAXT * m * sizeof(float)), *sref = malloc((size_t)m * sizeof(float));
    float *base = malloc((size_t)MAXT * ldy * sizeof(float)), *radd = malloc((size_t)MAXT * m * sizeof(float));
    float *y = malloc((size_t)MAXT * ldy * sizeof(float));
    size_t ab = (MI_ACT_BYTES(n) + 63) & ~(size_t)63;
    char *scratch, *sscratch;
    if (posix_memalign((void **)&scratch, 64, ab * MAXT) || posix_memalign((void **)&sscratch, 64, ab))
        abort();
    mi_act a[MAXT], sa;
    int bad = 0;
    for (int t = 0; t < MAXT; t++) {
        fill_row(x + (size_t)t * n, n, t);
        prepare(&k, x + (size_t)t * n, n, scratch + ab * t, &a[t]);
        k.rows(ref + (size_t)t * m, W, 0, m, &a[t], 0);
        for (int r = 0; r < ldy; r++)
            base[(size_t)t * ldy + r] = frand();
        memcpy(radd + (size_t)t * m, base + (size_t)t * ldy, (size_t)m * sizeof(float));
        k.rows(radd + (size_t)t * m, W, 0, m, &a[t], 1);
        /* the scalar reference, within float summation order */
        prepare(&s, x + (size_t)t * n, n, sscratch, &sa);
        s.rows(sref, W, 0, m, &sa, 0);
        for (int r = 0; r < m; r++) {
            double tol = 2e-6 * abs_dot(W, r, x + (size_t)t * n) * (1.0 + log2((double)n)) + 1e-30;
            float got = ref[(size_t)t * m + r];
            if (!(fabs((double)got - sref[r]) <= tol)) {
                if (bad < 3)
                    printf("\n  %s %s %dx%d row %d of x %d: %.9g vs scalar %.9g (tol %.3g)", k.f->name,
                           mi_dtype_name(t_dt), m, n, r, t, got, sref[r], tol);
                bad++;
            }
        }
    }
    /* T rows starting at activation row o: each group position meets several rows */
    for (int T = 1; T <= MAXT; T++)
        for (int o = 0; o + T <= MAXT; o += (MAXT - T > 3 ? 3 : 1)) {
            int r0 = m > 2 ? 1 : 0, r1 = m > 3 ? m - 1 : m;
            for (int pass = 0; pass < 3; pass++) { /* all rows; a subset; adding into y */
                int a0 = pass == 1 ? r0 : 0, a1 = pass == 1 ? r1 : m;
                for (int i = 0; i < T * ldy; i++)
                    y[i] = pass == 2 ? base[(size_t)o * ldy + i] : -1234.5f;
                k.tile(y, ldy, W, a0, a1, a + o, T, pass == 2);
                for (int t = 0; t < T; t++) {
                    const float *want = (pass == 2 ? radd : ref) + (size_t)(o + t) * m + a0;
                    const float *yt = y + (size_t)t * ldy;
                    int wrong = memcmp(yt, want, (size_t)(a1 - a0) * sizeof(float)) != 0;
                    for (int r = a1 - a0; r < ldy; r++) /* nothing written past the rows asked for */
                        wrong |= yt[r] != (pass == 2 ? base[(size_t)(o + t) * ldy + r] : -1234.5f);
                    if (wrong && *bits < 3)
                        printf("\n  %s %s %dx%d: tile T %d (from x %d) rows [%d, %d) pass %d: row of x %d differs",
                               k.f->name, mi_dtype_name(t_dt), m, n, T, o, a0, a1, pass, o + t);
                    *bits += wrong;
                }
            }
        }
    free(x);
    free(ref);
    free(sref);
    free(base);
    free(radd);
    free(y);
    free(scratch);
    free(sscratch);
    return bad;
}

static void check_family(const mi_kernel_family *f)
{
    const int cols_q[] = {32, 96, 160, 224, 288, 416, 2080};
    const int cols_k[] = {256, 768, 2304};
    const int cols_f[] = {1, 7, 16, 31, 33, 77, 288, 1000};
    const int rows_list[] = {1, 5, 13, 35}; /* 35: kernels that take rows in chunks of 16, and three more */
    int bad = 0, bits = 0, own = 0;
    for (int t = 0; t < MI_N_DTYPES; t++) {
        const int *cols = mi_dtype_kquant(t) ? cols_k : mi_dtype_blocked(t) ? cols_q : cols_f;
        int n_cols = mi_dtype_kquant(t) ? 3 : mi_dtype_blocked(t) ? 7 : 8;
        kernels k = kernels_of(f, t);
        if (!k.tile) {
            printf("\n    %s: no tile kernel for %s", f->name, mi_dtype_name(t));
            bad++;
            continue;
        }
        own += f->tile[t] != NULL;
        for (int ci = 0; ci < n_cols; ci++)
            for (int ri = 0; ri < 4; ri++) {
                if (ri == 3 && ci % 2) /* the long ones on every other width */
                    continue;
                void *mem;
                mi_tensor W = random_tensor(t, rows_list[ri], cols[ci], &mem);
                bad += check_matrix(f, &W, &bits);
                free(mem);
            }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(bits, 0);
    printf("\n    %s: %d dtypes with tile kernels of its own, T = 1..9 bit-identical to T = 1", f->name, own);
}

#ifdef MI_TEST_MATMUL
/* Through matmul.c with the active family: each row of y = x W^T at T
 * positions (row tiles of ~32 KB, tile kernels, 1 and 2 threads, adding or
 * not) equal to that position's product alone. */
static void check_matmul(const mi_kernel_family *f)
{
    const int Ts[] = {2, 5, 9, 67};
    int bits = 0;
    char err[256];
    if (mi_kernels_use(f->name, err) != 0)
        return;
    for (int t = 0; t < MI_N_DTYPES; t++) {
        int m = 301, n = mi_dtype_kquant(t) ? 1280 : 1056, ldx = n + 5, ldy = m + 3;
        void *mem;
        mi_tensor W = random_tensor(t, m, n, &mem);
        float *x = malloc((size_t)67 * ldx * sizeof(float)), *y = malloc((size_t)67 * ldy * sizeof(float));
        float *one = malloc((size_t)m * sizeof(float));
        for (int i = 0; i < 67; i++)
            fill_row(x + (size_t)i * ldx, n, i);
        for (int th = 1; th <= 2; th++) {
            mi_set_threads(th);
            for (int ti = 0; ti < 4; ti++)
                for (int add = 0; add <= 1; add++) {
                    int T = Ts[ti];
                    for (int i = 0; i < T * ldy; i++)
                        y[i] = 0.25f * (float)(i % 11);
                    mi_matmul_ld(y, ldy, x, ldx, &W, T, add);
                    for (int i = 0; i < T; i++) {
                        for (int r = 0; r < m; r++)
                            one[r] = 0.25f * (float)((i * ldy + r) % 11);
                        mi_matmul_ld(one, m, x + (size_t)i * ldx, ldx, &W, 1, add);
                        bits += memcmp(one, y + (size_t)i * ldy, (size_t)m * sizeof(float)) != 0;
                    }
                }
        }
        mi_set_threads(1);
        free(x);
        free(y);
        free(one);
        free(mem);
    }
    CU_ASSERT_EQUAL(bits, 0);
    mi_kernels_use("auto", err);
}
#endif

void test_kernel_tiles(void)
{
    int n;
    const mi_kernel_family *const *fs = mi_kernel_families(&n);
    for (int i = 0; i < n; i++) {
        if (!fs[i]->available())
            continue;
        check_family(fs[i]);
#ifdef MI_TEST_MATMUL
        check_matmul(fs[i]);
#endif
    }
}
