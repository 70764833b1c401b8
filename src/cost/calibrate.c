/* Measuring a device's compute model (see cost.h mi_calibrate_compute):
 * the regression of Voltron §4.2.1, fitted on this device's own kernels. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/cost.h"

#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/kernels.h"
#include "meshinfer/sampler.h"

#define N_T 4
static const int pass_T[N_T] = {1, 4, 16, 64}; /* decode, and prefill chunks up to the runtime's 64 */

/* n rounded up to whole blocks of 32: the blocked dtypes' rows are whole
 * blocks, and a per-element regression does not mind a few more columns. */
static int blocks(int n)
{
    return n < 32 ? 32 : (n + 31) / 32 * 32;
}

void mi_calib_defaults(mi_calib_options *o, const mi_config *c)
{
    memset(o, 0, sizeof *o);
    /* stories15M's shape unless a model is given: small enough for any device */
    o->dim = blocks(c ? c->dim : 288);
    o->hidden_dim = blocks(c ? c->hidden_dim : 768);
    o->head_dim = c ? c->head_dim : 48;
    o->group = c ? mi_kv_group(c) : 1;
    o->q_dim = blocks(c ? c->n_heads * c->head_dim : 288);
    o->kv_dim = blocks(c ? c->n_kv_heads * c->head_dim : 288);
    o->min_seconds = 0.05;
    o->work_bytes = 48e6;
}

/* Seconds per call of fn: the median of five runs of at least min_s/5
 * each. Not the best run: a memory-bound pass on a shared machine varies
 * by a third between runs, and a token is decoded in typical conditions,
 * not the luckiest. */
typedef void (*work_fn)(void *ctx);
static double time_best(work_fn fn, void *ctx, double min_s, int cpu)
{
    fn(ctx); /* warm: pages touched, caches as in steady running */
    double r[5];
    /* under a CPU quota the wall clock would give the quota's share of the core as the runs fell
     * in its periods; the thread's CPU clock gives the unthrottled speed, which the cluster file
     * states beside the quota (an emulated slowdown sleeps: its factor is applied instead) */
    double (*clock)(void) = cpu ? mi_cpu_now : mi_now, stretch = cpu ? mi_slowdown() : 1;
    for (int k = 0; k < 5; k++) {
        long n = 0;
        double t0 = clock(), t;
        do {
            double c0 = mi_now();
            fn(ctx);
            mi_slowdown_pay(c0); /* an emulated slower device measures as one */
            n++;
            t = clock() - t0;
        } while (t < min_s / 5);
        r[k] = t / n * stretch;
        for (int i = k; i > 0 && r[i] < r[i - 1]; i--) {
            double x = r[i];
            r[i] = r[i - 1];
            r[i - 1] = x;
        }
    }
    return r[2];
}

typedef struct {
    mi_tensor *w;
    int k, T;
    float *x, *y;
} mat_job;

static void run_mats(void *ctx)
{
    mat_job *j = ctx;
    for (int i = 0; i < j->k; i++)
        mi_matmul(j->y, j->x, &j->w[i], j->T);
}

typedef struct {
    float *out, *q, *kc, *vc, *att;
    int T, pos0, n_q, group, hd, S;
} attn_job;

static void run_attn(void *ctx)
{
    attn_job *j = ctx;
    mi_attention(j->out, j->q, j->kc, j->vc, j->T, j->pos0, j->n_q, j->group, j->hd, j->S, j->att);
}

typedef struct {
    float *a, *b, *g;
    const mi_rope_table *rope;
    int T, D, H, n_heads;
} vec_job;

/* a layer's elementwise work at T positions: two norms, RoPE on the
 * queries, SwiGLU */
static void run_vec(void *ctx)
{
    vec_job *j = ctx;
    mi_rmsnorm(j->b, j->a, j->g, j->T, j->D, 1e-5f);
    mi_rmsnorm(j->a, j->b, j->g, j->T, j->D, 1e-5f);
    mi_rope_apply(j->rope, j->a, j->T, 0, j->n_heads);
    mi_swiglu(j->a, j->b, (size_t)j->T * j->H);
}

static void fill(float *v, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++)
        v[i] = mi_rand_f32(rng) - 0.5f;
}

int mi_calibrate_compute(const mi_calib_options *o, mi_device *d, char *err)
{
    /* one layer's matrices [rows, cols]: wq wk wv wo w1 w3 w2 (small and
     * large products in the model's own proportion: a small one costs more
     * per weight in a prompt's passes) */
    const int shape0[7][2] = {{o->q_dim, o->dim},        {o->kv_dim, o->dim},        {o->kv_dim, o->dim},
                             {o->dim, o->q_dim},        {o->hidden_dim, o->dim},    {o->hidden_dim, o->dim},
                             {o->dim, o->hidden_dim}};
    for (int i = 0; i < 7; i++)
        if (shape0[i][0] < 1 || shape0[i][1] < 32 || shape0[i][1] % 32)
            return mi_set_error(err, "calibration shape %dx%d: columns must be whole blocks of 32", shape0[i][0],
                                shape0[i][1]);
    if (o->head_dim < 1 || o->group < 1 || o->min_seconds <= 0)
        return mi_set_error(err, "calibration: head_dim %d, group %d and time %g must be positive", o->head_dim,
                            o->group, o->min_seconds);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int maxT = pass_T[N_T - 1], wide = o->dim > o->hidden_dim ? o->dim : o->hidden_dim;
    if (o->q_dim > wide)
        wide = o->q_dim;
    wide = (wide + MI_QK_K - 1) / MI_QK_K * MI_QK_K; /* the k-quants' columns: whole super-blocks */
    float *x = mi_malloc((size_t)maxT * wide * sizeof(float), "calibration input");
    float *y = mi_malloc((size_t)maxT * wide * sizeof(float), "calibration output");
    float *row = mi_malloc((size_t)wide * sizeof(float), "calibration row");
    fill(x, (size_t)maxT * wide, &rng);
    for (int t = 0; t < MI_N_DTYPES; t++) {
        /* the k-quants' rows are whole super-blocks of 256: columns rounded to the nearest
         * (a per-element rate does not mind a few columns more or less, as blocks() says) */
        int shape[7][2], b = mi_dtype_block(t);
        for (int i = 0; i < 7; i++) {
            int cols = (shape0[i][1] + b / 2) / b * b;
            shape[i][0] = shape0[i][0], shape[i][1] = cols < b ? b : cols;
        }
        size_t layer = 0;
        double layer_elems = 0;
        for (int i = 0; i < 7; i++) {
            layer += mi_tensor_place_bytes(t, (size_t)shape[i][0], (size_t)shape[i][1]);
            layer_elems += (double)shape[i][0] * shape[i][1];
        }
        /* enough layers that a pass streams work_bytes from memory, as a
         * shard's weights are, not from a cache that holds one layer */
        int k = (int)(o->work_bytes / (double)layer) + 1;
        if (k > 64)
            k = 64;
        mi_tensor *w = mi_calloc((size_t)k * 7, sizeof *w, "calibration weights");
        unsigned char *mem = mi_malloc((size_t)k * layer, "calibration weights"), *p = mem;
        for (int i = 0; i < 7 * k; i++) {
            int R = shape[i % 7][0], C = shape[i % 7][1];
            w[i] = mi_tensor_shape(t, R, C);
            p += mi_tensor_place(&w[i], p);
            /* one row encoded, copied to the others: a kernel's time does not depend on the
             * values, and the k-quants' encoders (a search per sub-block) took most of
             * calibrate's time; every row still lies at its own address, streamed from memory */
            size_t qb = mi_dtype_q_row_bytes(t, (size_t)C);
            unsigned char *q0 = w[i].q;
            fill(row, (size_t)C, &rng);
            mi_quantize_row(t, row, C, q0, w[i].d);
            for (int r = 1; r < R; r++) {
                memcpy(q0 + (size_t)r * qb, q0, qb);
                if (w[i].d)
                    memcpy(w[i].d + (size_t)r * (C / MI_QK), w[i].d, (size_t)(C / MI_QK) * sizeof(float));
            }
        }
        double per[N_T];
        for (int i = 0; i < N_T; i++) {
            /* past 16 positions a pass is compute-bound (each weight read
             * once for all of them): a quarter of the layers at 64 measures
             * the same per element and saves three quarters of calibrate's
             * time */
            int kT = pass_T[i] <= 16 ? k : (k * 16 + pass_T[i] - 1) / pass_T[i];
            mat_job j = {w, 7 * kT, pass_T[i], x, y};
            per[i] = time_best(run_mats, &j, o->min_seconds, o->cpu_clock) / ((double)kT * layer_elems);
        }
        /* t(T) = pass + (T - 1) * pos: pass as measured at T = 1 (decode is
         * where a device spends most of a generation), pos the least-squares
         * slope through it */
        double num = 0, den = 0;
        for (int i = 1; i < N_T; i++) {
            num += (pass_T[i] - 1) * (per[i] - per[0]);
            den += (double)(pass_T[i] - 1) * (pass_T[i] - 1);
        }
        d->pass_s[t] = per[0];
        d->pos_s[t] = num / den > per[0] * 1e-3 ? num / den : per[0] * 1e-3;
        free(mem);
        free(w);
    }

    /* attention: one KV head with its query heads, over S cached positions */
    int S = 512, hd = o->head_dim, nq = o->group;
    attn_job a = {mi_malloc((size_t)16 * nq * hd * sizeof(float), "calibration"),
                  mi_malloc((size_t)16 * nq * hd * sizeof(float), "calibration"),
                  mi_malloc((size_t)S * hd * sizeof(float), "calibration"),
                  mi_malloc((size_t)S * hd * sizeof(float), "calibration"),
                  mi_malloc((size_t)S * sizeof(float), "calibration"), 1, S - 1, nq, nq, hd, S};
    fill(a.q, (size_t)16 * nq * hd, &rng);
    fill(a.kc, (size_t)S * hd, &rng);
    fill(a.vc, (size_t)S * hd, &rng);
    double t_sum = 0, x_sum = 0;
    for (int T = 1; T <= 16; T += 15) {
        a.T = T;
        a.pos0 = S - T;
        t_sum += time_best(run_attn, &a, o->min_seconds, o->cpu_clock);
        x_sum += (double)nq * hd * ((double)T * a.pos0 + (double)T * (T + 1) / 2.0);
    }
    d->kv_s = t_sum / x_sum;
    free(a.out);
    free(a.q);
    free(a.kc);
    free(a.vc);
    free(a.att);

    /* elementwise work per element per position: a prompt pass's norms,
     * RoPE, SwiGLU and adds over its op's columns */
    {
        int T = 64, D = o->dim, H = o->hidden_dim, Q = o->q_dim;
        float *a = mi_malloc((size_t)T * (H > Q ? H : Q) * sizeof(float), "calibration");
        float *b = mi_malloc((size_t)T * (H > Q ? H : Q) * sizeof(float), "calibration");
        float *g = mi_malloc((size_t)D * sizeof(float), "calibration");
        fill(a, (size_t)T * (H > Q ? H : Q), &rng);
        fill(b, (size_t)T * (H > Q ? H : Q), &rng);
        for (int i = 0; i < D; i++)
            g[i] = 1.0f;
        mi_rope_table rope;
        mi_rope_init(&rope, T, o->head_dim, 10000.0f);
        vec_job v = {a, b, g, &rope, T, D, H, Q / o->head_dim};
        d->vec_s = time_best(run_vec, &v, o->min_seconds / 2, o->cpu_clock) / ((double)T * (2.0 * D + H + Q));
        mi_rope_free(&rope);
        free(a);
        free(b);
        free(g);
    }

    /* a fixed cost per op: a matrix too small to be anything else */
    mi_tensor small = mi_tensor_shape(MI_F32, 32, 32);
    void *sm = mi_calloc(1, mi_tensor_place_bytes(MI_F32, 32, 32), "calibration");
    mi_tensor_place(&small, sm);
    mat_job j = {&small, 1, 1, x, y};
    double op = time_best(run_mats, &j, o->min_seconds / 4, o->cpu_clock) - 1024.0 * d->pass_s[MI_F32];
    d->op_s = op > 0 ? op : 0;
    free(sm);
    free(x);
    free(y);
    free(row);
    d->calibrated = 1;
    return 0;
}
