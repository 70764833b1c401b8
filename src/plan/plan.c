/* A plan as data: names, send lists, shards, memory per rank, validation
 * and serialization (see plan.h). No policy: the planners are src/planner/. */
#include "meshinfer/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

static const char *planner_names[MI_N_PLANNERS] = {"layerwise", "roundrobin", "random", "greedy", "tp",
                                                   "somegather", "hybrid", "exact"};

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

void mi_plan_alloc_layers(mi_plan *plan)
{
    plan->layers = mi_calloc((size_t)plan->cfg.n_layers, sizeof(mi_layer_plan), "plan layers");
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


void mi_plan_emb_rows(const mi_plan *plan, int rank, int *v0, int *n)
{
    *v0 = *n = 0;
    for (int i = 0; plan->split_vocab && i < plan->n_cls; i++)
        if (plan->cls[i].rank == rank) {
            *v0 = plan->cls[i].v0;
            *n = plan->cls[i].n;
        }
}

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
            if (lp->ffn[i].rank == rank && mi_config_is_moe(c)) {
                /* the experts [v0, v0+n), the router, and the shared expert with the first slice */
                s->nf = c->hidden_dim;
                s->n_experts = lp->ffn[i].n;
                for (int e = 0; e < lp->ffn[i].n && e < MI_MAX_EXPERTS; e++)
                    s->experts[e] = (unsigned char)(lp->ffn[i].v0 + e);
                s->no_shared = lp->ffn[i].v0 != 0;
            } else if (lp->ffn[i].rank == rank) {
                s->f0 = lp->ffn[i].v0;
                s->nf = lp->ffn[i].n;
            }
        for (int i = 0; i < plan->n_cols; i++)
            if (plan->cols[i].rank == rank) {
                /* CATS: this rank's residual columns are its rows of wo and w2 */
                s->proj = MI_PROJ_ROWS;
                s->o0 = plan->cols[i].v0;
                s->no = plan->cols[i].n;
                s->w2_rows = 1;
            }
    }
    spec->embeddings = rank == 0 && plan->n_cols == 0 && !plan->split_vocab;
    mi_plan_emb_rows(plan, rank, &spec->emb_v0, &spec->emb_nv);
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
        a->n_cols != b->n_cols || a->split_vocab != b->split_vocab)
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

int mi_plan_ffn_units(const mi_config *c)
{
    return mi_config_is_moe(c) ? c->n_experts : c->hidden_dim;
}

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
        if (s[i].n < 1)
            return mi_set_error(err, "plan: %s%s slice %d is empty (%d); slices must cover [0, %d) in order", where,
                                what, i, s[i].n, total);
        /* what goes wrong, named: a unit held twice, held nowhere, or past the model's */
        if (s[i].v0 < next)
            return mi_set_error(err, "plan: %s%s [%d, %d) are placed twice (slice %d starts at %d, inside the one "
                                     "before; slices must cover [0, %d) in order)", where, what, s[i].v0,
                                next < s[i].v0 + s[i].n ? next : s[i].v0 + s[i].n, i, s[i].v0, total);
        if (s[i].v0 > next)
            return mi_set_error(err, "plan: %s%s [%d, %d) are placed on no rank (slice %d starts at %d; slices must "
                                     "cover [0, %d) in order)", where, what, next, s[i].v0 < total ? s[i].v0 : total,
                                i, s[i].v0, total);
        if (s[i].v0 + s[i].n > total)
            return mi_set_error(err, "plan: %s%s slice %d [%d, %d) goes past the model's %d", where, what, i, s[i].v0,
                                s[i].v0 + s[i].n, total);
        if (seen[s[i].rank]++)
            return mi_set_error(err, "plan: %s%s has two slices on rank %d", where, what, s[i].rank);
        next += s[i].n;
    }
    if (next != total)
        return mi_set_error(err, "plan: %s%s slices cover [0, %d) but the model has %d", where, what, next, total);
    return 0;
}

/* CATS: every rank owns one slice of the residual, one run of whole KV
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
    /* experts are placed whole (head-level planners); somegather's column split and FFN-shard pruning
     * have no expert form */
    for (int l = 0; l < c->n_layers && mi_config_is_moe(c); l++)
        if (plan->planner == MI_PLANNER_SOMEGATHER || plan->layers[l].ffn_pruned)
            return mi_set_error(err, "%s cannot split an MoE layer%s; use a head-level planner (layerwise, "
                                     "roundrobin, random, greedy, tp, hybrid)", plan->planner == MI_PLANNER_SOMEGATHER
                                ? "somegather" : "FFN-shard pruning", plan->planner == MI_PLANNER_SOMEGATHER
                                ? " by residual columns" : "");
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
        if (check_slices(lp->ffn, lp->n_ffn, mi_plan_ffn_units(c), n, mi_config_is_moe(c) ? "experts" : "FFN", l,
                         err))
            return -1;
        /* Voltron tensor parallelism with block dtypes: a rank's columns of
         * w2 (its FFN slice) and of a split wo (its heads) must be whole blocks */
        int fa = mi_ffn_align(c, l), ka = mi_kv_align(c, l);
        if (plan->planner == MI_PLANNER_SOMEGATHER) /* wo and w2 split by rows: blocks stay whole */
            fa = ka = 1;
        if (mi_config_is_moe(c)) /* whole experts: their blocks stay whole */
            fa = 1;
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
    if (plan->split_vocab && (plan->planner == MI_PLANNER_SOMEGATHER || c->family == MI_FAMILY_PATCHTST))
        return mi_set_error(err, "plan: the vocabulary is split by rows for head-level plans of language models "
                                 "(%s)", c->family == MI_FAMILY_PATCHTST ? "a time-series model has patches, not "
                                 "tokens" : "somegather already holds the embeddings by columns on every rank");
    if (plan->logits_k < 0 || plan->logits_k > c->vocab_size)
        return mi_set_error(err, "plan: %d logit candidates per classifier slice is outside [0, %d] (the "
                                 "vocabulary)", plan->logits_k, c->vocab_size);
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

/* ------------------------------------------------------- serialization */

int *mi_plan_serialize(const mi_plan *plan, size_t *n_ints)
{
    const mi_config *c = &plan->cfg;
    size_t n = 11 + (size_t)plan->n_cls * 3 + 3 + 3 * (size_t)plan->n_cols + 2 * MI_N_PRUNED_XCH;
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
    *q++ = plan->split_vocab;
    *q++ = plan->logits_k;
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
        /* the weight dtypes travel with the plan: Voltron's computation
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
    NEXT(plan->split_vocab);
    NEXT(plan->logits_k);
    NEXT(plan->n_cls);
    if (plan->n_cls < 1 || plan->n_cls > MI_MAX_RANKS)
        goto bad;
    plan->cls = mi_malloc((size_t)plan->n_cls * sizeof(mi_slice), "plan classifier slices");
    for (int s = 0; s < plan->n_cls; s++) {
        NEXT(plan->cls[s].rank);
        NEXT(plan->cls[s].v0);
        NEXT(plan->cls[s].n);
    }
    mi_plan_alloc_layers(plan);
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
