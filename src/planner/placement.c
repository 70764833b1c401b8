/* The placement planners: layer-wise, round-robin, random, greedy
 * (HeadSplit's head-level placement under memory budgets), tensor parallel,
 * somegather (CATS), and the dispatch to hybrid (Voltron, hybrid.c); also
 * HeadSplit's choice of the transitions worth speculating (see planner.h). */
#include "meshinfer/planner.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/sampler.h"
#include "planners.h"

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
/* The bytes a token streams through the whole FFN of layer l (a mixture of experts holds all E experts
 * but runs k of them) */
static double whole_ffn_work(const mi_config *c, int l)
{
    return mi_config_is_moe(c) ? mi_moe_piece_work(c, l, c->n_experts, 1) : ffn_bytes(c, l, c->hidden_dim);
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

static void set_single_ffn(mi_plan *plan, int l, int rank)
{
    mi_layer_plan *lp = &plan->layers[l];
    lp->n_ffn = 1;
    lp->ffn = mi_malloc(sizeof(mi_slice), "plan FFN slices");
    lp->ffn[0] = (mi_slice){rank, 0, mi_plan_ffn_units(&plan->cfg)};
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
        if (!mi_config_is_moe(c)) {
            set_single_ffn(plan, l, p->workers[t++ % p->n_workers]);
            continue;
        }
        /* experts dealt in turn: equal runs, one to each of the next workers */
        int np = c->n_experts < p->n_workers ? c->n_experts : p->n_workers, ranks[MI_MAX_RANKS], cnt[MI_MAX_RANKS];
        mi_split_units(c->n_experts, NULL, np, cnt);
        for (int i = 0; i < np; i++)
            ranks[i] = p->workers[t++ % p->n_workers];
        mi_moe_set_slices(plan, l, ranks, cnt, np, ranks[0]);
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
        if (!mi_config_is_moe(c)) {
            set_single_ffn(plan, l, p->workers[(int)(mi_rand_f32(&st) * p->n_workers) % p->n_workers]);
            continue;
        }
        /* every expert on a random worker; each worker's experts one run, expert 0's worker first */
        int cnt[MI_MAX_RANKS] = {0}, first = -1;
        for (int e = 0; e < c->n_experts; e++) {
            int i = (int)(mi_rand_f32(&st) * p->n_workers) % p->n_workers;
            cnt[i]++;
            if (first < 0)
                first = p->workers[i];
        }
        mi_moe_set_slices(plan, l, p->workers, cnt, p->n_workers, first);
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

/* HeadSplit's greedy placement: FFN and projection first (the big blocks,
 * balanced by predicted time), then the heads of each layer spread so that the
 * layer's attention finishes soonest; memory budgets are hard constraints. */
static int spec_ok(const mi_plan_options *opt, int l)
{
    if (!opt->speculate)
        return 0;
    double a = opt->acceptance ? opt->acceptance[l] : 1.0;
    return a >= opt->min_acceptance;
}

/* Expert parallelism in the greedy planner: the shared expert (with the
 * router, the norm and one expert) to the worker that fits it and finishes
 * soonest, then expert by expert to the worker that would finish soonest
 * with it (an expert's expected work is k/E of its bytes per token; a
 * worker's first expert brings the router), memory budgets counting every
 * expert held. Each worker's experts become one run, the shared expert's
 * worker's first. */
static int greedy_experts(mi_plan *plan, placer *p, int l, char *err)
{
    const mi_config *c = p->c;
    int cnt[MI_MAX_RANKS] = {0}, first;
    double sb = mi_moe_piece_bytes(c, l, 1, 1), sw = mi_moe_piece_work(c, l, 1, 1);
    first = best_fit(p, sb, sw, NULL);
    if (first < 0)
        return no_room(p, "experts (the router, the shared expert and one expert)", l, sb, err);
    p->mem[first] += sb;
    p->busy[first] += unit_time(p, first, sw);
    for (int i = 0; i < p->n_workers; i++)
        cnt[i] = p->workers[i] == first;
    double eb = (double)mi_experts_bytes(c, l, 1), ew = mi_moe_piece_work(c, l, 1, 0) - mi_moe_piece_work(c, l, 0, 0);
    double rb = mi_moe_piece_bytes(c, l, 0, 0), rw = mi_moe_piece_work(c, l, 0, 0); /* router and norm */
    for (int e = 1; e < c->n_experts; e++) {
        int best = -1;
        double best_cost = DBL_MAX;
        for (int i = 0; i < p->n_workers; i++) {
            int w = p->workers[i];
            double b = eb + (cnt[i] ? 0 : rb), t = p->busy[w] + unit_time(p, w, ew + (cnt[i] ? 0 : rw));
            if (p->mem[w] + b <= p->cl->dev[w].mem_bytes && t < best_cost - 1e-15) {
                best_cost = t;
                best = i;
            }
        }
        if (best < 0)
            return no_room(p, "expert", l, eb, err);
        int w = p->workers[best];
        p->mem[w] += eb + (cnt[best] ? 0 : rb);
        p->busy[w] += unit_time(p, w, ew + (cnt[best] ? 0 : rw));
        cnt[best]++;
    }
    mi_moe_set_slices(plan, l, p->workers, cnt, p->n_workers, first);
    return 0;
}

static int plan_greedy(mi_plan *plan, placer *p, const mi_plan_options *opt, char *err)
{
    const mi_config *c = p->c;
    double extra[MI_MAX_RANKS];
    for (int l = 0; l < c->n_layers; l++) {
        double fb = ffn_bytes(c, l, c->hidden_dim), pb = proj_bytes(c, l);
        int f;
        if (mi_config_is_moe(c)) {
            if (greedy_experts(plan, p, l, err))
                return -1;
            f = plan->layers[l].ffn[0].rank;
        } else {
            f = best_fit(p, fb, fb, NULL);
            if (f < 0)
                return no_room(p, "FFN", l, fb, err);
            set_single_ffn(plan, l, f);
            p->mem[f] += fb;
            p->busy[f] += unit_time(p, f, fb);
        }
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
        /* HeadSplit: a layer whose input is speculated only has to finish its
         * attention within the previous layer's FFN, so inside that window its
         * heads go where memory is most free rather than where they finish first. */
        double window = 0;
        if (l > 0 && spec_ok(opt, l - 1)) {
            int f = plan->layers[l - 1].ffn[0].rank;
            window = unit_time(p, f, whole_ffn_work(c, l - 1));
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
        if (mi_config_is_moe(c)) /* expert parallelism: experts by speed, whole (the first the shared one) */
            fa = 1;
        lp->n_ffn = split_by_speed(p, mi_plan_ffn_units(c) / fa, p->workers, nw, tmp);
        for (int i = 0; i < lp->n_ffn; i++) {
            tmp[i].v0 *= fa;
            tmp[i].n *= fa;
        }
        lp->ffn = mi_malloc((size_t)lp->n_ffn * sizeof(mi_slice), "plan FFN slices");
        memcpy(lp->ffn, tmp, (size_t)lp->n_ffn * sizeof(mi_slice));
    }
    if (plan->cls) /* a split vocabulary's slices: the same split */
        return;
    plan->n_cls = split_by_speed(p, c->vocab_size, p->workers, nw, tmp);
    plan->cls = mi_malloc((size_t)plan->n_cls * sizeof(mi_slice), "plan classifier slices");
    memcpy(plan->cls, tmp, (size_t)plan->n_cls * sizeof(mi_slice));
}

/* Bytes of n vocabulary rows on a rank that splits the vocabulary: its
 * embedding rows, its classifier rows unless tied (a view of the same rows),
 * the final norm, and the learned positions where the family has them. */
static double vocab_rows_bytes(const mi_config *c, int n)
{
    double d = c->dim;
    return (double)n * (double)mi_dtype_row_bytes(c->emb_dtype, (size_t)c->dim) +
           (c->shared_classifier ? 0.0 : (double)mi_classifier_bytes(c, n)) + 4.0 * d +
           (c->pos_embed ? 4.0 * d * c->seq_len : 0.0);
}

/* A split vocabulary (plan.h split_vocab): the classifier's rows over the
 * workers by speed, as tp splits them, each worker holding the embedding
 * rows of its classifier rows; their bytes charged before the layers are
 * placed, and none to rank 0 (unless it works and gets a slice). */
static void split_vocab(mi_plan *plan, placer *p)
{
    mi_slice tmp[MI_MAX_RANKS];
    plan->split_vocab = 1;
    plan->n_cls = split_by_speed(p, p->c->vocab_size, p->workers, p->n_workers, tmp);
    plan->cls = mi_malloc((size_t)plan->n_cls * sizeof(mi_slice), "plan classifier slices");
    memcpy(plan->cls, tmp, (size_t)plan->n_cls * sizeof(mi_slice));
    p->mem[0] = 0;
    for (int i = 0; i < plan->n_cls; i++)
        p->mem[tmp[i].rank] += vocab_rows_bytes(p->c, tmp[i].n);
}

/* CATS "Partitioning strategy on top of somegather": D = all ranks, each
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

/* mi_plan_make_with's time limit and report for the exact planner's fill
 * (planning runs on one thread) */
static double g_exact_limit_s;
static mi_exact_info *g_exact_info;

/* One plan, with the vocabulary split (split) or whole on rank 0. */
static int plan_once(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, int split, mi_plan *plan,
                     char *err)
{
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
    plan->logits_k = opt->logits_k;
    placer p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.cl = cl;
    p.kv_pos = plan->kv_positions;
    for (int r = cw ? 0 : 1; r < n; r++)
        p.workers[p.n_workers++] = r;
    /* the controller holds the embeddings and final norm, unless the vocabulary is split */
    p.mem[0] = (double)mi_embedding_bytes(c) + 4.0 * c->dim;
    mi_plan_alloc_layers(plan);
    if (split && opt->planner != MI_PLANNER_HYBRID) /* hybrid splits by its own phase's speeds */
        split_vocab(plan, &p);
    mi_plan_options hopt = *opt;
    hopt.split_vocab = split;
    int rc = 0;
    switch (opt->planner) {
    case MI_PLANNER_LAYERWISE: plan_layerwise(plan, &p); break;
    case MI_PLANNER_ROUNDROBIN: plan_roundrobin(plan, &p); break;
    case MI_PLANNER_RANDOM: plan_random(plan, &p, opt->seed); break;
    case MI_PLANNER_GREEDY:
        if (!c->shared_classifier && !split)
            p.mem[0] += (double)mi_classifier_bytes(c, c->vocab_size);
        rc = plan_greedy(plan, &p, opt, err);
        break;
    case MI_PLANNER_TP: plan_tp(plan, &p); break;
    case MI_PLANNER_SOMEGATHER: rc = plan_somegather(plan, n, err); break;
    case MI_PLANNER_HYBRID: rc = mi_plan_hybrid(plan, cl, &hopt, err); break;
    case MI_PLANNER_EXACT:
        rc = split ? mi_set_error(err, "exact planner: the embeddings and classifier do not fit rank 0, and it keeps "
                                       "the vocabulary whole there")
                   : mi_plan_exact_fill(plan, cl, g_exact_limit_s, g_exact_info, err);
        break;
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
    if (rc == 0)
        rc = mi_plan_validate(plan, cl, err);
    if (rc)
        mi_plan_free(plan);
    return rc;
}

int mi_plan_make_with(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, double exact_limit_s,
                      mi_exact_info *exact_info, mi_plan *plan, char *err)
{
    double t0 = mi_now();
    g_exact_limit_s = exact_limit_s;
    g_exact_info = exact_info;
    /* a head-level plan of a language model on several ranks can split its vocabulary: when asked,
     * or when the plan with the table whole on rank 0 does not fit (then the split one's error, if
     * it fails too, would only repeat the shortfall elsewhere: the first error stands) */
    int can = opt->planner != MI_PLANNER_SOMEGATHER && c->family != MI_FAMILY_PATCHTST && cl->n_devices > 1;
    int rc = plan_once(c, cl, opt, can && opt->split_vocab, plan, err);
    if (rc && can && !opt->split_vocab) {
        char err2[MI_ERRLEN];
        mi_plan split;
        if (plan_once(c, cl, opt, 1, &split, err2) == 0) {
            *plan = split;
            rc = 0;
        }
    }
    g_exact_limit_s = 0;
    g_exact_info = NULL;
    if (rc == 0)
        plan->plan_seconds = mi_now() - t0;
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
    double t_ffn = whole_ffn_work(c, l) / (cl->mem_bw * cl->dev[f].speed);
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

