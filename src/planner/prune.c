/* CATS "communication-aware pruning": the send lists of a somegather
 * plan, from the model's weights (see plan.h mi_plan_prune).
 *
 * A column a rank sends in an exchange feeds weights on the receivers: a
 * residual column (attn_in, ffn_in) feeds, through the norm's gain g, column
 * c of wq, wk, wv (or w1, w3) on every rank; a head-output column feeds
 * column j of wo; a hidden unit feeds column u of w2. A receiver uses the
 * rows it holds, so the weight a column feeds on the *other* ranks is
 *   score(c) = |g_c| * sum over rows r not held by c's owner of |W[r][c]|
 * (without the gain for heads and hidden). The seed ranks columns by the sum
 * of the absolute outgoing weights and prunes the smallest; communication-
 * aware pruning sums only the weights on other ranks, because the owner keeps
 * using its own columns. Ordinary magnitude pruning (the seed's comparison)
 * sums all outgoing weights and drops the columns for everyone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/model.h"
#include "meshinfer/planner.h"

typedef struct {
    const mi_plan *plan;
    int l;
    double *S; /* [n_ranks][width]: sum of |W[r][c]| over the rows each rank holds */
    int width;
} scorer;

/* Add |row| of W to the sums of the rank that holds the row. */
static void add_rows(scorer *sc, const mi_tensor *W, const int *row_owner, float *tmp)
{
    for (int r = 0; r < W->rows; r++) {
        mi_tensor_row_f32(W, r, tmp);
        double *s = sc->S + (size_t)row_owner[r] * sc->width;
        for (int c = 0; c < W->cols; c++)
            s[c] += fabs((double)tmp[c]);
    }
}

/* Owner of column c in exchange x of layer l. */
static int col_owner(const mi_plan *plan, int l, int x, int c)
{
    for (int r = 0; r < plan->n_ranks; r++) {
        int c0, n;
        mi_plan_owned(plan, l, x, r, &c0, &n);
        if (c >= c0 && c < c0 + n)
            return r;
    }
    return 0;
}

typedef struct {
    double score;
    int col;
} ranked;

static int by_score(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? -1 : 1;
    return x->col - y->col; /* ties: the lower column is pruned first, deterministically */
}

static int by_col(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* Keep the highest-scoring (1 - ratio) of each rank's columns: at least the
 * fraction ratio is never sent (rounded up), so bytes shrink by at least r. */
static void choose(mi_plan *plan, int l, int x, const double *score, double ratio)
{
    for (int r = 0; r < plan->n_ranks; r++) {
        int c0, n;
        mi_plan_owned(plan, l, x, r, &c0, &n);
        int drop = (int)ceil(ratio * n - 1e-9);
        /* a ratio below 1 never leaves a rank sending nothing (1 is refused: it would send no column at all;
         * rounded up, 0.995 of 96 columns would be all 96) */
        if (n > 0 && drop >= n)
            drop = n - 1;
        ranked *v = mi_malloc((size_t)(n ? n : 1) * sizeof *v, "pruning ranks");
        for (int i = 0; i < n; i++)
            v[i] = (ranked){score[c0 + i], c0 + i};
        qsort(v, (size_t)n, sizeof *v, by_score);
        mi_keep *k = (mi_keep *)mi_plan_keep(plan, l, x, r);
        k->n = n - drop;
        k->cols = mi_malloc((size_t)(k->n > 0 ? k->n : 1) * sizeof(int), "send list");
        for (int i = 0; i < k->n; i++)
            k->cols[i] = v[drop + i].col;
        qsort(k->cols, (size_t)k->n, sizeof(int), by_col);
        free(v);
    }
}

/* Scores of exchange x's columns from the per-rank sums S and the gain g (NULL: 1). */
static void scores(const mi_plan *plan, int l, int x, const double *S, int width, const float *g, int mode,
                   double *out)
{
    for (int c = 0; c < width; c++) {
        int o = col_owner(plan, l, x, c);
        double s = 0;
        for (int r = 0; r < plan->n_ranks; r++)
            if (mode == MI_PRUNE_MAGNITUDE || r != o)
                s += S[(size_t)r * width + c];
        out[c] = s * (g ? fabs((double)g[c]) : 1.0);
    }
}

int mi_plan_prune(mi_plan *plan, const char *model_path, const double *ratio, int mode, char *err)
{
    const mi_config *c = &plan->cfg;
    if (plan->planner != MI_PLANNER_SOMEGATHER)
        return mi_set_error(err, "pruning applies to somegather plans (--planner somegather)");
    for (int x = 0; x < MI_N_PRUNED_XCH; x++)
        if (!(ratio[x] >= 0 && ratio[x] < 1))
            return mi_set_error(err, "pruning ratio %g of exchange %s is outside [0, 1)", ratio[x], mi_xch_name(x));
    if (mode != MI_PRUNE_AWARE && mode != MI_PRUNE_MAGNITUDE)
        return mi_set_error(err, "unknown pruning mode %d", mode);
    mi_plan_free_keep(plan);
    memcpy(plan->prune, ratio, sizeof plan->prune);
    plan->prune_mode = mode;
    int any = 0;
    for (int x = 0; x < MI_N_PRUNED_XCH; x++)
        any |= ratio[x] > 0;
    if (!any)
        return 0;
    mi_config fc;
    mi_model_file *mf = mi_model_open(model_path, &fc, err);
    if (!mf)
        return -1;
    int n = plan->n_ranks, g = mi_kv_group(c), hd = c->head_dim, nq = c->n_heads * hd;
    int widest = c->hidden_dim > nq ? c->hidden_dim : nq;
    if (c->dim > widest)
        widest = c->dim;
    plan->keep = mi_calloc((size_t)c->n_layers * MI_N_PRUNED_XCH * (size_t)n, sizeof(mi_keep), "send lists");
    double *S = mi_malloc((size_t)n * widest * sizeof(double), "pruning sums");
    double *score = mi_malloc((size_t)widest * sizeof(double), "pruning scores");
    float *tmp = mi_malloc((size_t)widest * sizeof(float), "weight row");
    int rows_max = c->hidden_dim > c->dim ? c->hidden_dim : c->dim;
    if (nq > rows_max)
        rows_max = nq;
    int *owner = mi_malloc((size_t)rows_max * sizeof(int), "row owners");
    mi_layer_spec *ls = mi_calloc((size_t)c->n_layers, sizeof *ls, "layer specs");
    int rc = 0;
    for (int l = 0; l < c->n_layers && rc == 0; l++) {
        /* one whole layer at a time: what a pruned device would never read */
        memset(ls, 0, (size_t)c->n_layers * sizeof *ls);
        ls[l] = mi_layer_spec_full(c);
        mi_shard_spec spec = {.layers = ls};
        mi_weight_source src = mi_weight_source_file(mf);
        mi_model m;
        if (mi_model_load(&m, &src, c, &spec, err)) {
            rc = -1;
            break;
        }
        const mi_layer *L = &m.layers[l];
        scorer sc = {plan, l, S, c->dim};
        if (ratio[MI_XCH_ATTN_IN] > 0) {
            memset(S, 0, (size_t)n * c->dim * sizeof(double));
            for (int i = 0; i < nq; i++)
                owner[i] = plan->layers[l].kv_rank[i / (g * hd)];
            add_rows(&sc, &L->wq, owner, tmp);
            for (int i = 0; i < c->n_kv_heads * hd; i++)
                owner[i] = plan->layers[l].kv_rank[i / hd];
            add_rows(&sc, &L->wk, owner, tmp);
            add_rows(&sc, &L->wv, owner, tmp);
            scores(plan, l, MI_XCH_ATTN_IN, S, c->dim, L->attention_norm, mode, score);
            choose(plan, l, MI_XCH_ATTN_IN, score, ratio[MI_XCH_ATTN_IN]);
        }
        if (ratio[MI_XCH_FFN_IN] > 0) {
            memset(S, 0, (size_t)n * c->dim * sizeof(double));
            for (int u = 0; u < c->hidden_dim; u++)
                owner[u] = col_owner(plan, l, MI_XCH_HIDDEN, u);
            add_rows(&sc, &L->w1, owner, tmp);
            add_rows(&sc, &L->w3, owner, tmp);
            scores(plan, l, MI_XCH_FFN_IN, S, c->dim, L->ffn_norm, mode, score);
            choose(plan, l, MI_XCH_FFN_IN, score, ratio[MI_XCH_FFN_IN]);
        }
        /* wo and w2 rows are residual columns, held by the column's owner */
        for (int i = 0; i < c->dim; i++)
            owner[i] = col_owner(plan, l, MI_XCH_ATTN_IN, i);
        if (ratio[MI_XCH_HEADS] > 0) {
            sc.width = nq;
            memset(S, 0, (size_t)n * nq * sizeof(double));
            add_rows(&sc, &L->wo, owner, tmp);
            scores(plan, l, MI_XCH_HEADS, S, nq, NULL, mode, score);
            choose(plan, l, MI_XCH_HEADS, score, ratio[MI_XCH_HEADS]);
        }
        if (ratio[MI_XCH_HIDDEN] > 0) {
            sc.width = c->hidden_dim;
            memset(S, 0, (size_t)n * c->hidden_dim * sizeof(double));
            add_rows(&sc, &L->w2, owner, tmp);
            scores(plan, l, MI_XCH_HIDDEN, S, c->hidden_dim, NULL, mode, score);
            choose(plan, l, MI_XCH_HIDDEN, score, ratio[MI_XCH_HIDDEN]);
        }
        mi_model_free(&m);
    }
    mi_model_close(mf);
    free(ls);
    free(owner);
    free(tmp);
    free(score);
    free(S);
    if (rc) {
        mi_plan_free_keep(plan);
        return -1;
    }
    /* exchanges left unpruned send everything they own */
    for (size_t k = 0; k < (size_t)c->n_layers * MI_N_PRUNED_XCH * (size_t)n; k++)
        if (!plan->keep[k].cols)
            plan->keep[k].n = -1;
    mi_plan_fill_keep(plan);
    return 0;
}

int mi_plan_keep_from_model(mi_plan *plan, const char *model_path, int *ranks, char *err)
{
    const mi_config *c = &plan->cfg;
    if (plan->planner != MI_PLANNER_SOMEGATHER)
        return 0;
    mi_config fc;
    mi_model_file *mf = mi_model_open(model_path, &fc, err);
    if (!mf)
        return -1;
    unsigned char *mask[4];
    for (int x = 0; x < 4; x++)
        mask[x] = mi_malloc((size_t)c->n_layers * (size_t)(x == 3 ? c->hidden_dim : c->dim), "pruning mask");
    double ratio = 0;
    int magnitude = 0;
    int rc = mi_model_read_masks(mf, mask, &ratio, &magnitude, ranks, err);
    mi_model_close(mf);
    if (rc == 1) {
        int n = plan->n_ranks;
        mi_plan_free_keep(plan);
        plan->keep = mi_calloc((size_t)c->n_layers * MI_N_PRUNED_XCH * (size_t)n, sizeof(mi_keep), "send lists");
        plan->prune_mode = magnitude ? MI_PRUNE_MAGNITUDE : MI_PRUNE_AWARE;
        for (int x = 0; x < MI_N_PRUNED_XCH; x++)
            plan->prune[x] = ratio;
        /* a mask names global columns: whichever rank owns one sends it or not */
        for (int l = 0; l < c->n_layers; l++)
            for (int x = 0; x < MI_N_PRUNED_XCH; x++) {
                const unsigned char *m = mask[x] + (size_t)l * (size_t)(x == 3 ? c->hidden_dim : c->dim);
                for (int r = 0; r < n; r++) {
                    int c0, nc;
                    mi_plan_owned(plan, l, x, r, &c0, &nc);
                    mi_keep *k = (mi_keep *)mi_plan_keep(plan, l, x, r);
                    k->cols = mi_malloc((size_t)(nc ? nc : 1) * sizeof(int), "send list");
                    for (int i = c0; i < c0 + nc; i++)
                        if (m[i])
                            k->cols[k->n++] = i;
                }
            }
    }
    for (int x = 0; x < 4; x++)
        free(mask[x]);
    return rc;
}
