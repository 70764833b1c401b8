/* Planners, plan validation, shards and serialization (see plan.h). */
#include "meshinfer/plan.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/sampler.h"
#include "planners.h"

static const char *planner_names[MI_N_PLANNERS] = {"layerwise", "roundrobin", "random", "greedy", "tp",
                                                   "somegather", "hybrid"};

const char *mi_planner_name(mi_planner p)
{
    return (unsigned)p < MI_N_PLANNERS ? planner_names[p] : "?";
}

int mi_planner_parse(const char *name, mi_planner *p)
{
    for (int i = 0; i < MI_N_PLANNERS; i++)
        if (!strcmp(name, planner_names[i])) {
            *p = (mi_planner)i;
            return 0;
        }
    return -1;
}

static const char *xch_names[MI_N_XCH] = {"attn_in", "heads", "ffn_in", "hidden", "final"};

const char *mi_xch_name(int k)
{
    return k >= 0 && k < MI_N_XCH ? xch_names[k] : "?";
}

int mi_xch_parse(const char *name)
{
    for (int i = 0; i < MI_N_XCH; i++)
        if (!strcmp(name, xch_names[i]))
            return i;
    return -1;
}

static size_t n_keep(const mi_plan *plan)
{
    return (size_t)plan->cfg.n_layers * MI_N_PRUNED_XCH * (size_t)plan->n_ranks;
}

void mi_plan_free_keep(mi_plan *plan)
{
    if (plan->keep)
        for (size_t i = 0; i < n_keep(plan); i++)
            free(plan->keep[i].cols);
    free(plan->keep);
    plan->keep = NULL;
}

void mi_plan_free(mi_plan *plan)
{
    if (plan->layers)
        for (int l = 0; l < plan->cfg.n_layers; l++)
            free(plan->layers[l].ffn);
    mi_plan_free_keep(plan);
    free(plan->layers);
    free(plan->cls);
    free(plan->cols);
    memset(plan, 0, sizeof *plan);
}

const mi_keep *mi_plan_keep(const mi_plan *plan, int l, int x, int rank)
{
    if (!plan->keep || x < 0 || x >= MI_N_PRUNED_XCH)
        return NULL;
    return &plan->keep[((size_t)l * MI_N_PRUNED_XCH + (size_t)x) * (size_t)plan->n_ranks + (size_t)rank];
}

void mi_plan_fill_keep(mi_plan *plan)
{
    for (int l = 0; l < plan->cfg.n_layers; l++)
        for (int x = 0; x < MI_N_PRUNED_XCH; x++)
            for (int r = 0; r < plan->n_ranks; r++) {
                mi_keep *k = (mi_keep *)mi_plan_keep(plan, l, x, r);
                if (k->n >= 0)
                    continue;
                int c0, n;
                mi_plan_owned(plan, l, x, r, &c0, &n);
                free(k->cols);
                k->cols = mi_malloc((size_t)(n ? n : 1) * sizeof(int), "send list");
                for (int i = 0; i < n; i++)
                    k->cols[i] = c0 + i;
                k->n = n;
            }
}

void mi_plan_owned(const mi_plan *plan, int l, int x, int rank, int *c0, int *n)
{
    const mi_config *c = &plan->cfg;
    *c0 = *n = 0;
    if (x == MI_XCH_HEADS) {
        int w = mi_kv_group(c) * c->head_dim, first = -1, cnt = 0;
        for (int k = 0; k < c->n_kv_heads; k++)
            if (plan->layers[l].kv_rank[k] == rank) {
                if (first < 0)
                    first = k;
                cnt++;
            }
        if (first >= 0) {
            *c0 = first * w;
            *n = cnt * w;
        }
    } else if (x == MI_XCH_HIDDEN) {
        for (int i = 0; i < plan->layers[l].n_ffn; i++)
            if (plan->layers[l].ffn[i].rank == rank) {
                *c0 = plan->layers[l].ffn[i].v0;
                *n = plan->layers[l].ffn[i].n;
            }
    } else {
        for (int i = 0; i < plan->n_cols; i++)
            if (plan->cols[i].rank == rank) {
                *c0 = plan->cols[i].v0;
                *n = plan->cols[i].n;
            }
    }
}

/* ------------------------------------------------------- unit sizes */

/* Bytes of weights of one KV-head group of layer l (its query heads' wq
 * rows, wk, wv rows), in the model's dtypes, and of its KV cache (fp32) for
 * n_pos positions. The projection and the FFN (with its norm) likewise. */
static double head_weight_bytes(const mi_config *c, int l)
{
    return (double)mi_head_group_bytes(c, l);
}
static double head_kv_bytes(const mi_config *c, int n_pos)
{
    return 4.0 * 2.0 * (double)n_pos * c->head_dim;
}
static double proj_bytes(const mi_config *c, int l) { return (double)mi_proj_bytes(c, l, c->n_kv_heads); }
static double ffn_bytes(const mi_config *c, int l, int nf) { return (double)mi_ffn_bytes(c, l, nf) + 4.0 * c->dim; }

void mi_plan_shard(const mi_plan *plan, int rank, mi_shard_spec *spec)
{
    const mi_config *c = &plan->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        mi_layer_spec *s = &spec->layers[l];
        memset(s, 0, sizeof *s);
        for (int k = 0; k < c->n_kv_heads; k++)
            if (lp->kv_rank[k] == rank)
                s->kv[s->n_kv++] = (unsigned char)k;
        if (lp->proj_rank == rank)
            s->proj = MI_PROJ_FULL;
        else if (lp->proj_rank < 0 && s->n_kv > 0 && plan->planner != MI_PLANNER_SOMEGATHER)
            s->proj = MI_PROJ_HEADS;
        for (int i = 0; i < lp->n_ffn; i++)
            if (lp->ffn[i].rank == rank) {
                s->f0 = lp->ffn[i].v0;
                s->nf = lp->ffn[i].n;
            }
        for (int i = 0; i < plan->n_cols; i++)
            if (plan->cols[i].rank == rank) {
                /* seed 002: this rank's residual columns are its rows of wo and w2 */
                s->proj = MI_PROJ_ROWS;
                s->o0 = plan->cols[i].v0;
                s->no = plan->cols[i].n;
                s->w2_rows = 1;
            }
    }
    spec->embeddings = rank == 0 && plan->n_cols == 0;
    spec->emb_c0 = spec->emb_nc = 0;
    for (int i = 0; i < plan->n_cols; i++)
        if (plan->cols[i].rank == rank) {
            spec->emb_c0 = plan->cols[i].v0;
            spec->emb_nc = plan->cols[i].n;
        }
    spec->cls_v0 = spec->cls_nv = 0;
    for (int i = 0; i < plan->n_cls; i++)
        if (plan->cls[i].rank == rank) {
            spec->cls_v0 = plan->cls[i].v0;
            spec->cls_nv = plan->cls[i].n;
        }
}

void mi_plan_rank_memory(const mi_plan *plan, int rank, size_t *weight_bytes, size_t *kv_bytes)
{
    mi_layer_spec *layers = mi_malloc((size_t)plan->cfg.n_layers * sizeof *layers, "layer specs");
    mi_shard_spec spec = {.layers = layers};
    mi_plan_shard(plan, rank, &spec);
    if (weight_bytes)
        *weight_bytes = mi_shard_weight_bytes(&plan->cfg, &spec);
    if (kv_bytes) {
        int h = plan->kv_positions > 0 ? plan->kv_positions : plan->cfg.seq_len;
        *kv_bytes = mi_shard_kv_bytes(&plan->cfg, &spec) / (size_t)plan->cfg.seq_len * (size_t)h;
    }
    free(layers);
}

double mi_plan_rank_bytes_at(const mi_plan *plan, int rank, int n_pos)
{
    size_t w, kv;
    mi_plan p = *plan;
    p.kv_positions = plan->cfg.seq_len;
    mi_plan_rank_memory(&p, rank, &w, &kv);
    return (double)w + (double)kv / plan->cfg.seq_len * n_pos;
}

int mi_plan_fullest_rank(const mi_plan *plan, const mi_cluster *cl, int n_pos, double *frac)
{
    int best = 0;
    double bf = -1;
    for (int r = 0; r < plan->n_ranks && r < cl->n_devices; r++) {
        double b = cl->dev[r].mem_bytes, f = b > 0 ? mi_plan_rank_bytes_at(plan, r, n_pos) / b : 0.0;
        if (f > bf) {
            bf = f;
            best = r;
        }
    }
    *frac = bf;
    return best;
}

int mi_plan_same_placement(const mi_plan *a, const mi_plan *b)
{
    const mi_config *c = &a->cfg;
    if (a->n_ranks != b->n_ranks || a->n_cls != b->n_cls || c->n_layers != b->cfg.n_layers ||
        a->n_cols != b->n_cols)
        return 0;
    for (int i = 0; i < a->n_cols; i++)
        if (memcmp(&a->cols[i], &b->cols[i], sizeof(mi_slice)))
            return 0;
    for (int i = 0; i < a->n_cls; i++)
        if (memcmp(&a->cls[i], &b->cls[i], sizeof(mi_slice)))
            return 0;
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *x = &a->layers[l], *y = &b->layers[l];
        if (x->proj_rank != y->proj_rank || x->n_ffn != y->n_ffn ||
            memcmp(x->kv_rank, y->kv_rank, (size_t)c->n_kv_heads * sizeof(int)))
            return 0;
        for (int i = 0; i < x->n_ffn; i++)
            if (memcmp(&x->ffn[i], &y->ffn[i], sizeof(mi_slice)))
                return 0;
    }
    return 1;
}

/* ------------------------------------------------------- validation */

static int check_slices(const mi_slice *s, int n, int total, int n_ranks, const char *what, int layer, char *err)
{
    char where[32] = "";
    if (layer >= 0)
        snprintf(where, sizeof where, "layer %d: ", layer);
    if (n < 1)
        return mi_set_error(err, "plan: %s%s has no slices", where, what);
    int next = 0;
    unsigned char seen[MI_MAX_RANKS] = {0};
    for (int i = 0; i < n; i++) {
        if (s[i].rank < 0 || s[i].rank >= n_ranks)
            return mi_set_error(err, "plan: %s%s slice on rank %d, but the job has %d ranks", where, what,
                                s[i].rank, n_ranks);
        if (s[i].v0 != next || s[i].n < 1)
            return mi_set_error(err, "plan: %s%s slices must cover [0, %d) in order without gaps (slice %d starts "
                                     "at %d, expected %d)", where, what, total, i, s[i].v0, next);
        if (seen[s[i].rank]++)
            return mi_set_error(err, "plan: %s%s has two slices on rank %d", where, what, s[i].rank);
        next += s[i].n;
    }
    if (next != total)
        return mi_set_error(err, "plan: %s%s slices cover [0, %d) but the model has %d", where, what, next, total);
    return 0;
}

/* Seed 002: every rank owns one slice of the residual, one run of whole KV
 * heads and one FFN slice, and its send lists lie inside what it owns. */
static int validate_somegather(const mi_plan *plan, char *err)
{
    const mi_config *c = &plan->cfg;
    int n = plan->n_ranks;
    if (check_slices(plan->cols, plan->n_cols, c->dim, n, "residual columns", -1, err))
        return -1;
    if (plan->n_cols != n)
        return mi_set_error(err, "plan: somegather needs residual columns on every one of the %d ranks (%d slices)",
                            n, plan->n_cols);
    for (int i = 0; i < MI_N_PRUNED_XCH; i++)
        if (!(plan->prune[i] >= 0 && plan->prune[i] < 1))
            return mi_set_error(err, "plan: pruning ratio %g of exchange %s is outside [0, 1)", plan->prune[i],
                                mi_xch_name(i));
    if (plan->prune_mode != MI_PRUNE_AWARE && plan->prune_mode != MI_PRUNE_MAGNITUDE)
        return mi_set_error(err, "plan: unknown pruning mode %d", plan->prune_mode);
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        if (lp->proj_rank != -1 || lp->speculate)
            return mi_set_error(err, "plan: layer %d: somegather has no projection rank and no speculation", l);
        if (lp->n_ffn != n)
            return mi_set_error(err, "plan: layer %d: somegather needs an FFN slice on every rank", l);
        for (int r = 0; r < n; r++) {
            int first = -1, last = -1;
            for (int k = 0; k < c->n_kv_heads; k++)
                if (lp->kv_rank[k] == r) {
                    if (first < 0)
                        first = k;
                    else if (last != k - 1)
                        return mi_set_error(err, "plan: layer %d: rank %d's KV heads are not one run (somegather "
                                                 "ranks hold contiguous heads)", l, r);
                    last = k;
                }
            if (first < 0)
                return mi_set_error(err, "plan: layer %d: rank %d holds no attention head (somegather gives every "
                                         "rank heads)", l, r);
        }
        for (int x = 0; x < MI_N_PRUNED_XCH && plan->keep; x++)
            for (int r = 0; r < n; r++) {
                const mi_keep *k = mi_plan_keep(plan, l, x, r);
                int o0, on;
                mi_plan_owned(plan, l, x, r, &o0, &on);
                if (k->n < 0 || k->n > on)
                    return mi_set_error(err, "plan: layer %d exchange %s: rank %d sends %d columns but owns %d", l,
                                        mi_xch_name(x), r, k->n, on);
                for (int i = 0; i < k->n; i++) {
                    if (k->cols[i] < o0 || k->cols[i] >= o0 + on)
                        return mi_set_error(err, "plan: layer %d exchange %s: rank %d's send list has column %d, "
                                                 "outside its columns [%d, %d)", l, mi_xch_name(x), r, k->cols[i],
                                            o0, o0 + on);
                    if (i > 0 && k->cols[i] <= k->cols[i - 1])
                        return mi_set_error(err, "plan: layer %d exchange %s: rank %d's send list has column %d %s "
                                                 "(columns are listed once each, increasing)", l, mi_xch_name(x), r,
                                            k->cols[i], k->cols[i] == k->cols[i - 1] ? "twice" : "out of order");
                }
            }
    }
    return 0;
}

int mi_plan_wire(const mi_plan *plan, int l)
{
    return l < 0 || !plan->layers ? plan->wire : mi_wire_narrower(plan->layers[l].wire, plan->wire);
}

int mi_plan_ffn_kept(const mi_plan *plan, int l, int u0, int n, int *r0, int *rn)
{
    uint64_t m = plan->layers && l >= 0 ? plan->layers[l].ffn_pruned : 0;
    int S = plan->ffn_shard, k = 0;
    if (!m || S <= 0) {
        r0[0] = u0, rn[0] = n;
        return n > 0;
    }
    for (int u = u0; u < u0 + n;) {
        int s = u / S, end = (s + 1) * S < u0 + n ? (s + 1) * S : u0 + n;
        if (!(m >> s & 1)) {
            if (k > 0 && r0[k - 1] + rn[k - 1] == u)
                rn[k - 1] += end - u;
            else
                r0[k] = u, rn[k++] = end - u;
        }
        u = end;
    }
    return k;
}

int mi_plan_ffn_kept_units(const mi_plan *plan, int l, int u0, int n)
{
    int r0[MI_MAX_PRUNE_RUNS], rn[MI_MAX_PRUNE_RUNS], k = mi_plan_ffn_kept(plan, l, u0, n, r0, rn), units = 0;
    for (int i = 0; i < k; i++)
        units += rn[i];
    return units;
}

int mi_plan_validate(const mi_plan *plan, const mi_cluster *cl, char *err)
{
    const mi_config *c = &plan->cfg;
    int n = plan->n_ranks;
    if (n < 1 || n > MI_MAX_RANKS)
        return mi_set_error(err, "plan: %d ranks is outside [1, %d]", n, MI_MAX_RANKS);
    if (plan->wire != MI_F32 && plan->wire != MI_F16 && plan->wire != MI_Q8_0)
        return mi_set_error(err, "plan: wire dtype %s is not one of fp32, fp16, q8_0", mi_dtype_name(plan->wire));
    int S = plan->ffn_shard;
    if (S && (S < 0 || S % 32 || c->hidden_dim % S || c->hidden_dim / S < 2 || c->hidden_dim / S > 64))
        return mi_set_error(err, "plan: FFN pruning shards of %d units do not divide hidden_dim %d into 2 to 64 "
                                 "shards of whole 32-unit blocks", S, c->hidden_dim);
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        uint64_t m = lp->ffn_pruned;
        if (m && (!S || (c->hidden_dim / S < 64 && m >> (c->hidden_dim / S)) ||
                  __builtin_popcountll(m) > c->hidden_dim / S / 2))
            return mi_set_error(err, "plan: layer %d prunes FFN shards outside its %d, or more than half of them", l,
                                S ? c->hidden_dim / S : 0);
        if (lp->wire != MI_F32 && lp->wire != MI_F16 && lp->wire != MI_Q8_0)
            return mi_set_error(err, "plan: layer %d: wire dtype %s is not one of fp32, fp16, q8_0", l,
                                mi_dtype_name(lp->wire));
        for (int k = 0; k < c->n_kv_heads; k++)
            if (lp->kv_rank[k] < 0 || lp->kv_rank[k] >= n)
                return mi_set_error(err, "plan: layer %d: KV head %d on rank %d, but the job has %d ranks", l, k,
                                    lp->kv_rank[k], n);
        if (lp->proj_rank < -1 || lp->proj_rank >= n)
            return mi_set_error(err, "plan: layer %d: projection on rank %d, but the job has %d ranks", l,
                                lp->proj_rank, n);
        if (check_slices(lp->ffn, lp->n_ffn, c->hidden_dim, n, "FFN", l, err))
            return -1;
        /* seed 003 tensor parallelism with block dtypes: a rank's columns of
         * w2 (its FFN slice) and of a split wo (its heads) must be whole blocks */
        int fa = mi_ffn_align(c, l), ka = mi_kv_align(c, l);
        if (plan->planner == MI_PLANNER_SOMEGATHER) /* wo and w2 split by rows: blocks stay whole */
            fa = ka = 1;
        for (int i = 0; i < lp->n_ffn && fa > 1; i++)
            if (lp->ffn[i].v0 % fa || lp->ffn[i].n % fa)
                return mi_set_error(err, "plan: layer %d: rank %d's FFN slice [%d, %d) cuts the %s blocks of w2 (FFN "
                                         "slices must start and end on multiples of %d)", l, lp->ffn[i].rank,
                                    lp->ffn[i].v0, lp->ffn[i].v0 + lp->ffn[i].n, mi_dtype_name(c->dtype[l][MI_W2]), fa);
        for (int k = 0; k < c->n_kv_heads && lp->proj_rank < 0 && ka > 1; k++) {
            int start = k == 0 || lp->kv_rank[k - 1] != lp->kv_rank[k];
            int end = k + 1 == c->n_kv_heads || lp->kv_rank[k + 1] != lp->kv_rank[k];
            if ((start && k % ka) || (end && (k + 1) % ka))
                return mi_set_error(err, "plan: layer %d: rank %d holds KV heads that cut the %s blocks of its wo "
                                         "columns (with a split projection each rank's heads must be runs that start "
                                         "and end on multiples of %d heads)", l, lp->kv_rank[k],
                                    mi_dtype_name(c->dtype[l][MI_WO]), ka);
        }
        if (lp->speculate && (l == c->n_layers - 1 || lp->proj_rank < 0 || lp->n_ffn != 1))
            return mi_set_error(err, "plan: layer %d cannot speculate into the next layer (it needs a next layer, "
                                     "one projection rank and one FFN rank)", l);
        if (lp->accept_permille < 0 || lp->accept_permille > 1000)
            return mi_set_error(err, "plan: layer %d: acceptance %d permille is outside [0, 1000]", l,
                                lp->accept_permille);
    }
    if (check_slices(plan->cls, plan->n_cls, c->vocab_size, n, "classifier", -1, err))
        return -1;
    if ((plan->planner == MI_PLANNER_SOMEGATHER) != (plan->n_cols > 0))
        return mi_set_error(err, "plan: residual-column slices belong to somegather plans, and only to them");
    if (plan->n_cols > 0 && validate_somegather(plan, err))
        return -1;
    if (!cl)
        return 0;
    if (cl->n_devices != n)
        return mi_set_error(err, "cluster lists %d devices but the plan has %d ranks", cl->n_devices, n);
    for (int r = 0; r < n; r++) {
        size_t w, kv;
        mi_plan_rank_memory(plan, r, &w, &kv);
        double need = (double)w + (double)kv;
        if (need > cl->dev[r].mem_bytes)
            return mi_set_error(err, "plan does not fit: device %s (rank %d) needs %.0f bytes (weights %zu + KV "
                                     "cache %zu for %d positions) but its budget is %.0f bytes: short by %.0f bytes",
                                cl->dev[r].name, r, need, w, kv, plan->kv_positions > 0 ? plan->kv_positions
                                                                                        : c->seq_len,
                                cl->dev[r].mem_bytes, need - cl->dev[r].mem_bytes);
    }
    return 0;
}

/* ------------------------------------------------------- planners */

typedef struct {
    const mi_config *c;
    const mi_cluster *cl;
    int n_workers;
    int workers[MI_MAX_RANKS];
    double busy[MI_MAX_RANKS]; /* predicted compute seconds per token */
    double mem[MI_MAX_RANKS];  /* bytes placed */
    int kv_pos;                /* KV positions budgeted per head */
} placer;

static double unit_time(const placer *p, int rank, double bytes)
{
    return bytes / (p->cl->mem_bw * p->cl->dev[rank].speed);
}

static void alloc_layers(mi_plan *plan)
{
    const mi_config *c = &plan->cfg;
    plan->layers = mi_calloc((size_t)c->n_layers, sizeof(mi_layer_plan), "plan layers");
}

static void set_single_ffn(mi_plan *plan, int l, int rank)
{
    mi_layer_plan *lp = &plan->layers[l];
    lp->n_ffn = 1;
    lp->ffn = mi_malloc(sizeof(mi_slice), "plan FFN slices");
    lp->ffn[0] = (mi_slice){rank, 0, plan->cfg.hidden_dim};
}

int mi_split_units(int total, const double *weight, int n, int *count)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += weight ? weight[i] : 1.0;
    int m = 0, next = 0;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        count[i] = 0;
        if (next >= total)
            continue;
        acc += weight ? weight[i] : 1.0;
        int end = i == n - 1 ? total : (int)(acc / sum * total + 0.5);
        int left = n - 1 - i; /* keep one unit for each later part when possible */
        if (end > total - left && total - left > next)
            end = total - left;
        if (end <= next)
            end = next + 1;
        if (end > total)
            end = total;
        count[i] = end - next;
        next = end;
        m++;
    }
    return m;
}

/* Split [0, total) over ranks in proportion to their speed (mi_split_units). */
static int split_by_speed(const placer *p, int total, const int *ranks, int n, mi_slice *out)
{
    double *speed = mi_malloc((size_t)n * sizeof(double), "speeds");
    int *count = mi_malloc((size_t)n * sizeof(int), "split counts");
    for (int i = 0; i < n; i++)
        speed[i] = p->cl->dev[ranks[i]].speed;
    int m = mi_split_units(total, speed, n, count), next = 0;
    for (int i = 0; i < m; i++) {
        out[i] = (mi_slice){ranks[i], next, count[i]};
        next += count[i];
    }
    free(speed);
    free(count);
    return m;
}

static void plan_layerwise(mi_plan *plan, placer *p)
{
    const mi_config *c = p->c;
    double sum = 0;
    for (int i = 0; i < p->n_workers; i++)
        sum += p->cl->dev[p->workers[i]].speed;
    /* layer l goes to the worker whose share of the speed covers its midpoint */
    for (int l = 0; l < c->n_layers; l++) {
        double mid = (l + 0.5) / c->n_layers * sum, acc = 0;
        int w = p->workers[p->n_workers - 1];
        for (int i = 0; i < p->n_workers; i++) {
            acc += p->cl->dev[p->workers[i]].speed;
            if (mid < acc) {
                w = p->workers[i];
                break;
            }
        }
        mi_layer_plan *lp = &plan->layers[l];
        for (int k = 0; k < c->n_kv_heads; k++)
            lp->kv_rank[k] = w;
        lp->proj_rank = w;
        set_single_ffn(plan, l, w);
    }
}

static void plan_roundrobin(mi_plan *plan, placer *p)
{
    const mi_config *c = p->c;
    int t = 0;
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer_plan *lp = &plan->layers[l];
        for (int k = 0; k < c->n_kv_heads; k++)
            lp->kv_rank[k] = p->workers[t++ % p->n_workers];
        lp->proj_rank = p->workers[t++ % p->n_workers];
        set_single_ffn(plan, l, p->workers[t++ % p->n_workers]);
    }
}

static void plan_random(mi_plan *plan, placer *p, uint64_t seed)
{
    const mi_config *c = p->c;
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer_plan *lp = &plan->layers[l];
        for (int k = 0; k < c->n_kv_heads; k++)
            lp->kv_rank[k] = p->workers[(int)(mi_rand_f32(&st) * p->n_workers) % p->n_workers];
        lp->proj_rank = p->workers[(int)(mi_rand_f32(&st) * p->n_workers) % p->n_workers];
        set_single_ffn(plan, l, p->workers[(int)(mi_rand_f32(&st) * p->n_workers) % p->n_workers]);
    }
}

/* The worker that can take `bytes` and minimises busy + time (+ extra[w]);
 * -1 if none has room. */
static int best_fit(const placer *p, double bytes, double work_bytes, const double *extra)
{
    int best = -1;
    double best_cost = DBL_MAX;
    for (int i = 0; i < p->n_workers; i++) {
        int w = p->workers[i];
        if (p->mem[w] + bytes > p->cl->dev[w].mem_bytes)
            continue;
        double cost = p->busy[w] + unit_time(p, w, work_bytes) + (extra ? extra[w] : 0.0);
        if (cost < best_cost - 1e-15) {
            best_cost = cost;
            best = w;
        }
    }
    return best;
}

static int no_room(const placer *p, const char *what, int l, double bytes, char *err)
{
    int most = p->workers[0];
    for (int i = 1; i < p->n_workers; i++) {
        int w = p->workers[i];
        if (p->cl->dev[w].mem_bytes - p->mem[w] > p->cl->dev[most].mem_bytes - p->mem[most])
            most = w;
    }
    double free_b = p->cl->dev[most].mem_bytes - p->mem[most];
    return mi_set_error(err, "plan does not fit: layer %d %s needs %.0f bytes, but the device with the most free "
                             "memory, %s (rank %d), has %.0f bytes free: short by %.0f bytes",
                        l, what, bytes, p->cl->dev[most].name, most, free_b, bytes - free_b);
}

/* Seed 000's greedy placement: FFN and projection first (the big blocks,
 * balanced by predicted time), then the heads of each layer spread so that the
 * layer's attention finishes soonest; memory budgets are hard constraints. */
static int spec_ok(const mi_plan_options *opt, int l)
{
    if (!opt->speculate)
        return 0;
    double a = opt->acceptance ? opt->acceptance[l] : 1.0;
    return a >= opt->min_acceptance;
}

static int plan_greedy(mi_plan *plan, placer *p, const mi_plan_options *opt, char *err)
{
    const mi_config *c = p->c;
    double extra[MI_MAX_RANKS];
    for (int l = 0; l < c->n_layers; l++) {
        double fb = ffn_bytes(c, l, c->hidden_dim), pb = proj_bytes(c, l);
        int f = best_fit(p, fb, fb, NULL);
        if (f < 0)
            return no_room(p, "FFN", l, fb, err);
        set_single_ffn(plan, l, f);
        p->mem[f] += fb;
        p->busy[f] += unit_time(p, f, fb);
        /* keeping wo with the FFN saves sending Z across a link */
        for (int i = 0; i < p->n_workers; i++)
            extra[p->workers[i]] = p->workers[i] == f ? 0.0 : mi_cluster_latency(p->cl, p->workers[i], f);
        int r = best_fit(p, pb, pb, extra);
        if (r < 0)
            return no_room(p, "output projection", l, pb, err);
        plan->layers[l].proj_rank = r;
        p->mem[r] += pb;
        p->busy[r] += unit_time(p, r, pb);
    }
    double hkv = head_kv_bytes(c, p->kv_pos);
    for (int l = 0; l < c->n_layers; l++) {
        double hw = head_weight_bytes(c, l);
        double hwork = hw + head_kv_bytes(c, c->seq_len / 2); /* mean KV read over a full context */
        double layer_att[MI_MAX_RANKS] = {0};
        /* Seed 000: a layer whose input is speculated only has to finish its
         * attention within the previous layer's FFN, so inside that window its
         * heads go where memory is most free rather than where they finish first. */
        double window = 0;
        if (l > 0 && spec_ok(opt, l - 1)) {
            int f = plan->layers[l - 1].ffn[0].rank;
            window = unit_time(p, f, ffn_bytes(c, l - 1, c->hidden_dim));
        }
        for (int k = 0; k < c->n_kv_heads; k++) {
            int best = -1;
            double best_key = DBL_MAX, best_tie = DBL_MAX;
            for (int i = 0; i < p->n_workers; i++) {
                int w = p->workers[i];
                if (p->mem[w] + hw + hkv > p->cl->dev[w].mem_bytes)
                    continue;
                double t = unit_time(p, w, hwork);
                double key = layer_att[w] + t, tie = p->busy[w] + t;
                if (window > 0 && key <= window) {
                    key = 0; /* fits the window: rank by memory use instead */
                    tie = p->mem[w] / p->cl->dev[w].mem_bytes;
                }
                if (key < best_key - 1e-12 || (key < best_key + 1e-12 && tie < best_tie)) {
                    best = w;
                    best_key = key;
                    best_tie = tie;
                }
            }
            if (best < 0)
                return no_room(p, "KV head", l, hw + hkv, err);
            plan->layers[l].kv_rank[k] = best;
            layer_att[best] += unit_time(p, best, hwork);
            p->busy[best] += unit_time(p, best, hwork);
            p->mem[best] += hw + hkv;
        }
    }
    return 0;
}

static void plan_tp(mi_plan *plan, placer *p)
{
    const mi_config *c = p->c;
    mi_slice tmp[MI_MAX_RANKS];
    int nw = p->n_workers;
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer_plan *lp = &plan->layers[l];
        /* contiguous KV-head groups, in proportion to speed; with block
         * dtypes in units of whole blocks of wo and w2 columns (so with
         * stories15M's 48-wide heads, pairs of heads) */
        int ka = mi_kv_align(c, l), fa = mi_ffn_align(c, l);
        int m = split_by_speed(p, c->n_kv_heads / ka, p->workers, nw, tmp);
        for (int i = 0; i < m; i++)
            for (int k = tmp[i].v0 * ka; k < (tmp[i].v0 + tmp[i].n) * ka; k++)
                lp->kv_rank[k] = tmp[i].rank;
        lp->proj_rank = nw > 1 ? -1 : p->workers[0];
        lp->n_ffn = split_by_speed(p, c->hidden_dim / fa, p->workers, nw, tmp);
        for (int i = 0; i < lp->n_ffn; i++) {
            tmp[i].v0 *= fa;
            tmp[i].n *= fa;
        }
        lp->ffn = mi_malloc((size_t)lp->n_ffn * sizeof(mi_slice), "plan FFN slices");
        memcpy(lp->ffn, tmp, (size_t)lp->n_ffn * sizeof(mi_slice));
    }
    plan->n_cls = split_by_speed(p, c->vocab_size, p->workers, nw, tmp);
    plan->cls = mi_malloc((size_t)plan->n_cls * sizeof(mi_slice), "plan classifier slices");
    memcpy(plan->cls, tmp, (size_t)plan->n_cls * sizeof(mi_slice));
}

/* Seed 002 "Partitioning strategy on top of somegather": D = all ranks, each
 * with an equal share of the KV heads (whole groups of query heads), of the
 * residual columns, of the FFN units and of the vocabulary. */
static int plan_somegather(mi_plan *plan, int D, char *err)
{
    const mi_config *c = &plan->cfg;
    char ok[128] = ""; /* the rank counts that work */
    for (int d = 1, o = 0; d <= c->n_kv_heads && o < (int)sizeof ok - 8; d++)
        if (c->n_kv_heads % d == 0)
            o += snprintf(ok + o, sizeof ok - (size_t)o, "%s%d", o ? ", " : "", d);
    if (D > c->n_kv_heads)
        return mi_set_error(err, "somegather on %d ranks: the model has only %d %s (every rank needs at least one "
                                 "head): run on %s ranks", D, c->n_kv_heads,
                            c->n_kv_heads < c->n_heads ? "KV-head groups" : "heads", ok);
    if (c->n_kv_heads % D) {
        return mi_set_error(err, "somegather on %d ranks: %d does not divide the model's %d %s (every rank gets an "
                                 "equal share of whole heads%s, as an unequal share would make the largest the "
                                 "bottleneck of every exchange): run on %s ranks", D, D, c->n_kv_heads,
                            c->n_kv_heads < c->n_heads ? "KV heads" : "heads",
                            c->n_kv_heads < c->n_heads ? " with the query heads that share each KV head" : "", ok);
    }
    int per = c->n_kv_heads / D;
    plan->n_cols = D;
    plan->cols = mi_malloc((size_t)D * sizeof(mi_slice), "plan columns");
    for (int r = 0; r < D; r++)
        plan->cols[r] = (mi_slice){r, c->dim / D * r, c->dim / D};
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer_plan *lp = &plan->layers[l];
        for (int k = 0; k < c->n_kv_heads; k++)
            lp->kv_rank[k] = k / per;
        lp->proj_rank = -1;
        lp->n_ffn = D;
        lp->ffn = mi_malloc((size_t)D * sizeof(mi_slice), "plan FFN slices");
        for (int r = 0; r < D; r++) {
            int a = (int)((long)c->hidden_dim * r / D), b = (int)((long)c->hidden_dim * (r + 1) / D);
            lp->ffn[r] = (mi_slice){r, a, b - a};
        }
    }
    plan->n_cls = D;
    plan->cls = mi_malloc((size_t)D * sizeof(mi_slice), "plan classifier slices");
    for (int r = 0; r < D; r++) {
        int a = (int)((long)c->vocab_size * r / D), b = (int)((long)c->vocab_size * (r + 1) / D);
        plan->cls[r] = (mi_slice){r, a, b - a};
    }
    return 0;
}

int mi_plan_make(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, mi_plan *plan, char *err)
{
    double t0 = mi_now();
    memset(plan, 0, sizeof *plan);
    int n = cl->n_devices;
    if (n < 1 || n > MI_MAX_RANKS)
        return mi_set_error(err, "plan: %d ranks is outside [1, %d]", n, MI_MAX_RANKS);
    plan->cfg = *c;
    plan->n_ranks = n;
    plan->planner = opt->planner;
    int cw = opt->controller_works;
    if (cw < 0)
        cw = opt->planner == MI_PLANNER_TP || opt->planner == MI_PLANNER_SOMEGATHER ||
             opt->planner == MI_PLANNER_HYBRID;
    if (n == 1)
        cw = 1;
    if (opt->planner == MI_PLANNER_SOMEGATHER && !cw)
        return mi_set_error(err, "somegather gives every rank a share, the controller (rank 0) too: drop "
                                 "--controller-works 0");
    plan->controller_works = cw;
    plan->kv_positions = opt->kv_positions > 0 && opt->kv_positions < c->seq_len ? opt->kv_positions : c->seq_len;
    plan->wire = opt->wire;
    placer p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.cl = cl;
    p.kv_pos = plan->kv_positions;
    for (int r = cw ? 0 : 1; r < n; r++)
        p.workers[p.n_workers++] = r;
    /* the controller always holds the embeddings and final norm */
    p.mem[0] = (double)mi_embedding_bytes(c) + 4.0 * c->dim;
    alloc_layers(plan);
    int rc = 0;
    switch (opt->planner) {
    case MI_PLANNER_LAYERWISE: plan_layerwise(plan, &p); break;
    case MI_PLANNER_ROUNDROBIN: plan_roundrobin(plan, &p); break;
    case MI_PLANNER_RANDOM: plan_random(plan, &p, opt->seed); break;
    case MI_PLANNER_GREEDY:
        if (!c->shared_classifier)
            p.mem[0] += (double)mi_classifier_bytes(c, c->vocab_size);
        rc = plan_greedy(plan, &p, opt, err);
        break;
    case MI_PLANNER_TP: plan_tp(plan, &p); break;
    case MI_PLANNER_SOMEGATHER: rc = plan_somegather(plan, n, err); break;
    case MI_PLANNER_HYBRID: rc = mi_plan_hybrid(plan, cl, opt, err); break;
    default: rc = mi_set_error(err, "plan: unknown planner %d", (int)opt->planner);
    }
    if (rc == 0 && !plan->cls) {
        plan->n_cls = 1;
        plan->cls = mi_malloc(sizeof(mi_slice), "plan classifier slices");
        plan->cls[0] = (mi_slice){0, 0, c->vocab_size};
    }
    if (rc == 0 && opt->planner == MI_PLANNER_SOMEGATHER && opt->prune > 0) {
        const double ratio[MI_N_PRUNED_XCH] = {opt->prune, opt->prune, opt->prune, opt->prune};
        rc = mi_plan_prune(plan, opt->weights_path, ratio, MI_PRUNE_AWARE, err);
    }
    if (rc == 0 && opt->speculate && opt->planner != MI_PLANNER_SOMEGATHER)
        mi_plan_mark_speculation(plan, cl, opt->acceptance, opt->min_acceptance);
    plan->plan_seconds = mi_now() - t0;
    if (rc == 0)
        rc = mi_plan_validate(plan, cl, err);
    if (rc)
        mi_plan_free(plan);
    return rc;
}

double mi_plan_spec_saving(const mi_plan *plan, const mi_cluster *cl, int l, double a)
{
    const mi_config *c = &plan->cfg;
    const mi_layer_plan *lp = &plan->layers[l];
    if (l + 1 >= c->n_layers || lp->proj_rank < 0 || lp->n_ffn != 1)
        return -1.0;
    double hwork = head_weight_bytes(c, l + 1) + head_kv_bytes(c, c->seq_len / 2);
    int f = lp->ffn[0].rank;
    double t_ffn = ffn_bytes(c, l, c->hidden_dim) / (cl->mem_bw * cl->dev[f].speed);
    /* the next layer's attention ends when its slowest head rank ends */
    double t_att = 0;
    const mi_layer_plan *next = &plan->layers[l + 1];
    for (int r = 0; r < plan->n_ranks; r++) {
        int nk = 0;
        for (int k = 0; k < c->n_kv_heads; k++)
            nk += next->kv_rank[k] == r;
        double t = nk * hwork / (cl->mem_bw * cl->dev[r].speed);
        if (t > t_att)
            t_att = t;
    }
    double extra = mi_cluster_latency(cl, lp->proj_rank, f) + (double)mi_wire_row_bytes(plan->wire, (size_t)c->dim) /
                                                                 cl->bandwidth;
    return a * (t_ffn < t_att ? t_ffn : t_att) - extra;
}

int mi_plan_mark_speculation(mi_plan *plan, const mi_cluster *cl, const double *acceptance, double min_acceptance)
{
    const mi_config *c = &plan->cfg;
    int marked = 0;
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer_plan *lp = &plan->layers[l];
        lp->speculate = 0;
        lp->accept_permille = 0;
        if (l == c->n_layers - 1 || lp->proj_rank < 0 || lp->n_ffn != 1)
            continue;
        double a = acceptance ? acceptance[l] : 1.0;
        if (a < min_acceptance || mi_plan_spec_saving(plan, cl, l, a) <= 0)
            continue;
        lp->speculate = 1;
        lp->accept_permille = (int)(a * 1000.0 + 0.5);
        marked++;
    }
    return marked;
}

/* ------------------------------------------------------- serialization */

int *mi_plan_serialize(const mi_plan *plan, size_t *n_ints)
{
    const mi_config *c = &plan->cfg;
    size_t n = 9 + (size_t)plan->n_cls * 3 + 3 + 3 * (size_t)plan->n_cols + 2 * MI_N_PRUNED_XCH;
    for (int l = 0; l < c->n_layers; l++)
        n += (size_t)c->n_kv_heads + 7 + MI_N_LAYER_MATS + 3 * (size_t)plan->layers[l].n_ffn;
    if (plan->keep)
        for (size_t i = 0; i < n_keep(plan); i++)
            n += 1 + (size_t)plan->keep[i].n;
    int *b = mi_malloc(n * sizeof(int), "plan buffer"), *q = b;
    *q++ = plan->n_ranks;
    *q++ = c->n_layers;
    *q++ = c->n_kv_heads;
    *q++ = (int)plan->planner;
    *q++ = plan->controller_works;
    *q++ = plan->kv_positions > 0 ? plan->kv_positions : c->seq_len;
    *q++ = plan->wire;
    *q++ = plan->ffn_shard;
    *q++ = plan->n_cls;
    for (int i = 0; i < plan->n_cls; i++) {
        *q++ = plan->cls[i].rank;
        *q++ = plan->cls[i].v0;
        *q++ = plan->cls[i].n;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        for (int k = 0; k < c->n_kv_heads; k++)
            *q++ = lp->kv_rank[k];
        *q++ = lp->proj_rank;
        *q++ = lp->speculate;
        *q++ = lp->accept_permille;
        *q++ = lp->wire;
        *q++ = (int)(uint32_t)lp->ffn_pruned;
        *q++ = (int)(uint32_t)(lp->ffn_pruned >> 32);
        /* the weight dtypes travel with the plan: seed 003's computation
         * scaling re-places to the same shards in lower dtypes */
        for (int m = 0; m < MI_N_LAYER_MATS; m++)
            *q++ = c->dtype[l][m];
        *q++ = lp->n_ffn;
        for (int i = 0; i < lp->n_ffn; i++) {
            *q++ = lp->ffn[i].rank;
            *q++ = lp->ffn[i].v0;
            *q++ = lp->ffn[i].n;
        }
    }
    *q++ = plan->n_cols;
    for (int i = 0; i < plan->n_cols; i++) {
        *q++ = plan->cols[i].rank;
        *q++ = plan->cols[i].v0;
        *q++ = plan->cols[i].n;
    }
    _Static_assert(sizeof(double) == 2 * sizeof(int), "a pruning ratio travels as two ints");
    /* the ratios bit for bit (two ints each): rounding them made 0.99999999,
     * accepted by the planner, arrive as 1 and fail validation on the workers */
    for (int i = 0; i < MI_N_PRUNED_XCH; i++, q += 2)
        memcpy(q, &plan->prune[i], sizeof(double));
    *q++ = plan->prune_mode;
    *q++ = plan->keep != NULL;
    if (plan->keep)
        for (size_t i = 0; i < n_keep(plan); i++) {
            *q++ = plan->keep[i].n;
            memcpy(q, plan->keep[i].cols, (size_t)plan->keep[i].n * sizeof(int));
            q += plan->keep[i].n;
        }
    *n_ints = n;
    return b;
}

int mi_plan_deserialize(const int *b, size_t n, const mi_config *c, mi_plan *plan, char *err)
{
    memset(plan, 0, sizeof *plan);
    size_t i = 0;
#define NEXT(v)                                                   \
    do {                                                          \
        if (i >= n)                                               \
            goto bad;                                             \
        (v) = b[i++];                                             \
    } while (0)
    int n_layers, n_kv, planner;
    plan->cfg = *c;
    NEXT(plan->n_ranks);
    NEXT(n_layers);
    NEXT(n_kv);
    if (n_layers != c->n_layers || n_kv != c->n_kv_heads) {
        return mi_set_error(err, "plan is for %d layers and %d KV heads but the model has %d and %d", n_layers, n_kv,
                            c->n_layers, c->n_kv_heads);
    }
    NEXT(planner);
    plan->planner = (mi_planner)planner;
    NEXT(plan->controller_works);
    NEXT(plan->kv_positions);
    if (plan->kv_positions < 1 || plan->kv_positions > c->seq_len)
        goto bad;
    NEXT(plan->wire);
    NEXT(plan->ffn_shard);
    NEXT(plan->n_cls);
    if (plan->n_cls < 1 || plan->n_cls > MI_MAX_RANKS)
        goto bad;
    plan->cls = mi_malloc((size_t)plan->n_cls * sizeof(mi_slice), "plan classifier slices");
    for (int s = 0; s < plan->n_cls; s++) {
        NEXT(plan->cls[s].rank);
        NEXT(plan->cls[s].v0);
        NEXT(plan->cls[s].n);
    }
    alloc_layers(plan);
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer_plan *lp = &plan->layers[l];
        for (int k = 0; k < c->n_kv_heads; k++)
            NEXT(lp->kv_rank[k]);
        NEXT(lp->proj_rank);
        NEXT(lp->speculate);
        NEXT(lp->accept_permille);
        NEXT(lp->wire);
        int lo, hi;
        NEXT(lo);
        NEXT(hi);
        lp->ffn_pruned = (uint64_t)(uint32_t)lo | (uint64_t)(uint32_t)hi << 32;
        for (int m = 0; m < MI_N_LAYER_MATS; m++) {
            int t;
            NEXT(t);
            if (t < 0 || t >= MI_N_DTYPES)
                goto bad;
            plan->cfg.dtype[l][m] = (unsigned char)t;
        }
        NEXT(lp->n_ffn);
        if (lp->n_ffn < 1 || lp->n_ffn > MI_MAX_RANKS)
            goto bad;
        lp->ffn = mi_malloc((size_t)lp->n_ffn * sizeof(mi_slice), "plan FFN slices");
        for (int s = 0; s < lp->n_ffn; s++) {
            NEXT(lp->ffn[s].rank);
            NEXT(lp->ffn[s].v0);
            NEXT(lp->ffn[s].n);
        }
    }
    NEXT(plan->n_cols);
    if (plan->n_cols < 0 || plan->n_cols > MI_MAX_RANKS)
        goto bad;
    if (plan->n_cols > 0) {
        plan->cols = mi_malloc((size_t)plan->n_cols * sizeof(mi_slice), "plan columns");
        for (int s = 0; s < plan->n_cols; s++) {
            NEXT(plan->cols[s].rank);
            NEXT(plan->cols[s].v0);
            NEXT(plan->cols[s].n);
        }
    }
    for (int x = 0; x < MI_N_PRUNED_XCH; x++) {
        if (i + 2 > n)
            goto bad;
        memcpy(&plan->prune[x], b + i, sizeof(double));
        i += 2;
    }
    NEXT(plan->prune_mode);
    int has_keep;
    NEXT(has_keep);
    if (has_keep) {
        if (plan->n_ranks < 1 || plan->n_ranks > MI_MAX_RANKS)
            goto bad;
        plan->keep = mi_calloc(n_keep(plan), sizeof(mi_keep), "send lists");
        for (size_t k = 0; k < n_keep(plan); k++) {
            NEXT(plan->keep[k].n);
            if (plan->keep[k].n < 0 || (size_t)plan->keep[k].n > n - i)
                goto bad;
            plan->keep[k].cols = mi_malloc((size_t)(plan->keep[k].n ? plan->keep[k].n : 1) * sizeof(int), "send list");
            memcpy(plan->keep[k].cols, b + i, (size_t)plan->keep[k].n * sizeof(int));
            i += (size_t)plan->keep[k].n;
        }
    }
#undef NEXT
    if (i != n)
        goto bad;
    if (mi_config_validate(&plan->cfg, err) || mi_plan_validate(plan, NULL, err)) {
        mi_plan_free(plan);
        return -1;
    }
    return 0;
bad:
    mi_plan_free(plan);
    return mi_set_error(err, "plan: malformed plan data");
}
