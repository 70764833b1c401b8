/* Voltron §4.3, runtime scaling: the controller that, between decode steps,
 * lowers the precision of weights (computation scaling) or of activation
 * messages (communication scaling) when TPOT runs over --tpot-ms, and undoes
 * the newest lowering when the pressure has gone (see control.h
 * session_after_step). Rank 0 only; the runtime carries a decision out as a
 * re-placement to the same placement. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/control.h"

#define WINDOW 5           /* steps whose median is TPOT now (a median: one slow step, a page fault or
                              another process on the core, is no trend) */
#define DIAG 8             /* steps between a diagnosis's two polls of compute times */
#define SLOWED 1.3         /* compute per step this far over a device's baseline: the device slowed */
#define PROBE_UNDER 0.6    /* TPOT under this share of the target: room to undo a lowering */
#define RECOVERED 0.6     /* a link taking this share of its time per byte when its messages were lowered */
#define AIM 0.9            /* computation scaling aims at this share of the target (a margin for noise) */

/* What lowering layer l from dtype `from` to `to` (the next rung of its
 * chain, mi_precision_chain: scaling lowers a layer's seven matrices
 * together) costs in perplexity (--importance: the rise it adds), or,
 * without an importance file, a cost that lowers the last layers first. */
static double step_cost(const mi_session *ss, int l, int from, int to)
{
    if (!ss->scaling.imp)
        return 1.0 - 1e-3 * l;
    double a = mi_importance_rise(ss->scaling.imp, l, from);
    return mi_importance_rise(ss->scaling.imp, l, to) - (isnan(a) ? 0 : a);
}

/* What lowering layer l's messages costs (Voltron §4.3.2: an activation is
 * as important as the weights that produce it, here the layer's two
 * precision steps together), or without --importance, the last layers first. */
static double message_cost(const mi_session *ss, int l)
{
    if (!ss->scaling.imp)
        return 1.0 - 1e-3 * l;
    return ss->scaling.imp->rise[l][MI_Q8_0] + ss->scaling.imp->rise[l][MI_Q4_0];
}

typedef session_wires wires;

static void wires_get(const mi_plan *p, wires *w)
{
    w->wire = p->wire;
    for (int l = 0; l < p->cfg.n_layers; l++)
        w->layer[l] = (unsigned char)p->layers[l].wire;
}

static void wires_set(mi_plan *p, const wires *w)
{
    p->wire = w->wire;
    for (int l = 0; l < p->cfg.n_layers; l++)
        p->layers[l].wire = w->layer[l];
}

/* "messages of layers 5 4 -> fp16": the layers whose messages travel in
 * another dtype in plan p than under `from`, and the dtype they get. */
static void describe_wires(const wires *from, const mi_plan *p, char *out, size_t n)
{
    size_t o = (size_t)snprintf(out, n, "messages of layers");
    int to = -1;
    for (int l = p->cfg.n_layers - 1; l >= 0 && o < n; l--) {
        int was = mi_wire_narrower(from->layer[l], from->wire);
        if (mi_plan_wire(p, l) != was) {
            o += (size_t)snprintf(out + o, n - o, " %d", l);
            to = mi_plan_wire(p, l);
        }
    }
    if (o < n && to >= 0)
        snprintf(out + o, n - o, " -> %s", mi_dtype_name(to));
}

/* Install the plan's wire and weight dtypes as they now are (a
 * re-placement to the same placement: layers whose dtypes changed are
 * re-encoded, or reloaded when raised) and recompile its programs. */
static void install(mi_session *ss, int n_pos)
{
    ss->scaling.busy_valid = 0;
    mi_programs_free(&ss->prog);
    char err[MI_ERRLEN];
    if (mi_programs_compile(&ss->plan, &ss->prog, err))
        mi_fatal("runtime scaling: %s", err);
    mi_runtime_replan(ss->rt, &ss->plan, &ss->prog, n_pos);
}

/* The plan is still valid with these dtypes (blocked dtypes need tensor-
 * parallel column shards on whole blocks of 32). */
static int plan_ok(mi_session *ss)
{
    char err[MI_ERRLEN];
    return !mi_config_validate(&ss->plan.cfg, err) && !mi_plan_validate(&ss->plan, NULL, err);
}

/* The programs in force with every exchange in its layer's wire dtype as the
 * plan now says (a scaling decision changes dtypes, never the placement, and
 * programs depend on the placement only: recompiling them was most of a
 * decision's time); the dtypes they had go to saved[n_xchg], for unwire. */
static void rewire(mi_session *ss, int *saved)
{
    for (int i = 0; i < ss->prog.n_xchg; i++) {
        saved[i] = ss->prog.xchg[i].wire;
        ss->prog.xchg[i].wire = mi_plan_wire(&ss->plan, ss->prog.xchg[i].layer);
    }
}

static void unwire(mi_session *ss, const int *saved)
{
    for (int i = 0; i < ss->prog.n_xchg; i++)
        ss->prog.xchg[i].wire = saved[i];
}

/* Predicted TPOT at n_pos with the plan's dtypes as they now are, on cl. */
static double predict(mi_session *ss, const mi_cluster *cl, int n_pos)
{
    int *saved = mi_malloc((size_t)(ss->prog.n_xchg + 1) * sizeof(int), "wire dtypes");
    rewire(ss, saved);
    mi_prediction pr;
    mi_predict(&ss->plan, &ss->prog, cl, n_pos, &pr);
    unwire(ss, saved);
    free(saved);
    return pr.token_s;
}

/* Every rank's compute seconds per step since the last poll (the poll ends
 * there and a new one starts). */
static void poll(mi_session *ss, int k, double *per_step, double *poll_ms)
{
    double t0 = mi_now(), c[MI_MAX_RANKS];
    mi_runtime_poll_compute(ss->rt, c);
    for (int r = 0; r < ss->size && per_step; r++)
        per_step[r] = k > ss->scaling.poll_k ? (c[r] - ss->scaling.poll_c[r]) / (k - ss->scaling.poll_k) : 0.0;
    memcpy(ss->scaling.poll_c, c, (size_t)ss->size * sizeof(double));
    ss->scaling.poll_k = k;
    if (poll_ms)
        *poll_ms = (mi_now() - t0) * 1e3;
}

/* Each rank's measured compute per step against the cost model's for the
 * plan in force; ranks the model gives almost nothing (0). */
static void ratios(mi_session *ss, const double *per_step, int n_pos, double *ratio)
{
    /* the prediction is kept until the plan changes or the context grows by a quarter (attention
     * grows with it): a walk of every rank's program is most of a decision's time otherwise */
    if (!ss->scaling.busy_valid || n_pos > 1.25 * ss->scaling.busy_pos) {
        mi_prediction pr;
        mi_predict(&ss->plan, &ss->prog, &ss->cl, n_pos, &pr);
        for (int r = 0; r < ss->size; r++)
            ss->scaling.busy_pred[r] = pr.busy_s[r] > 0.05 * pr.token_s ? pr.busy_s[r] : 0.0;
        ss->scaling.busy_valid = 1;
        ss->scaling.busy_pos = n_pos;
    }
    for (int r = 0; r < ss->size; r++)
        ratio[r] = ss->scaling.busy_pred[r] > 0 ? per_step[r] / ss->scaling.busy_pred[r] : 0.0;
}

/* "layers 7 6 -> q4_0, 5 -> q8_0": the layers whose dtypes differ, by the dtype they get. */
static void describe(unsigned char (*from)[MI_N_LAYER_MATS], unsigned char (*to)[MI_N_LAYER_MATS], int L, char *out,
                     size_t n)
{
    size_t o = (size_t)snprintf(out, n, "layers");
    int first = 1;
    for (int t = 0; t < MI_N_DTYPES; t++) {
        int any = 0;
        for (int l = L - 1; l >= 0 && o < n; l--)
            if (memcmp(from[l], to[l], sizeof from[l]) && to[l][MI_WQ] == t) {
                o += (size_t)snprintf(out + o, n - o, "%s %d", !any && !first ? "," : "", l);
                any = 1;
                first = 0;
            }
        if (any && o < n)
            o += (size_t)snprintf(out + o, n - o, " -> %s", mi_dtype_name(t));
    }
}

static double median(const float *x, int n)
{
    float v[16];
    memcpy(v, x, (size_t)n * sizeof *v);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            float t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A precision move (layer l to dtype t) is a negative number; pruning moves
 * are numbered from L: L + l * 64 + shard. */
#define DTYPE_MOVE(l, t) (-1 - ((l) * MI_N_DTYPES + (t)))
#define PRUNE_MOVE(L, l, s) ((L) + (l) * MI_MAX_PRUNE_SHARDS + (s))
/* room for the moves of n_layers (MI_MAX_LAYERS is 1024: sized by it, the array was a fresh mapping
 * of 300 KB, faulted in page by page at every decision) */
#define MAX_MOVES(L) ((size_t)(L) * (MI_N_RUNGS + MI_MAX_PRUNE_SHARDS))

typedef struct {
    unsigned char dtype[MI_MAX_LAYERS][MI_N_LAYER_MATS];
    uint64_t pruned[MI_MAX_LAYERS];
    int ffn_shard;
} weights_state;

/* (the layers a plan has, not MI_MAX_LAYERS: a decision copies these a dozen times) */
static void weights_get(const mi_plan *p, weights_state *w)
{
    memcpy(w->dtype, p->cfg.dtype, (size_t)p->cfg.n_layers * sizeof w->dtype[0]);
    for (int l = 0; l < p->cfg.n_layers; l++)
        w->pruned[l] = p->layers[l].ffn_pruned;
    w->ffn_shard = p->ffn_shard;
}

static void weights_set(mi_plan *p, const weights_state *w)
{
    memcpy(p->cfg.dtype, w->dtype, (size_t)p->cfg.n_layers * sizeof w->dtype[0]);
    for (int l = 0; l < p->cfg.n_layers; l++)
        p->layers[l].ffn_pruned = w->pruned[l];
    p->ffn_shard = w->ffn_shard;
}

typedef struct {
    float rise;
    int move;
} ranked_move;

static int by_rise(const void *a, const void *b)
{
    const ranked_move *x = a, *y = b;
    return x->rise < y->rise ? -1 : x->rise > y->rise ? 1 : x->move - y->move;
}

/* The layers rank r holds, as single steps in the order computation scaling
 * takes them (Voltron §4.3.1: "lowers the precision of the least important
 * shards, then prunes them"): first precision steps down each layer's chain
 * (mi_precision_chain: fp16, q8_0, q6_K, q5_K, q4_K, q4_0, the rungs the
 * layer can hold and --importance measured), always the cheapest next one
 * among r's layers (a layer's rungs in order; a step the plan cannot take, a
 * tensor-parallel shard not on whole blocks, rules the layer out); then, with
 * prune and an importance file that ranks FFN shards, the FFN shards r
 * computes, least important first, at most half of a layer's shards pruned
 * (none of a layer whose w2 ends in a k-quant whose super-blocks the shards
 * would cut). mv receives the steps (at most MAX_MOVES(n_layers): DTYPE_MOVE
 * for a precision step, PRUNE_MOVE for a shard); the plan is left as it was.
 * Returns the number of steps. */
static int weight_moves(mi_session *ss, int r, int prune, int *mv)
{
    mi_config *c = &ss->plan.cfg;
    int L = c->n_layers, n = 0, held[MI_MAX_LAYERS], pos[MI_MAX_LAYERS], f0[MI_MAX_LAYERS], nf[MI_MAX_LAYERS];
    int chain[MI_MAX_LAYERS][MI_N_RUNGS], len[MI_MAX_LAYERS];
    const mi_importance *imp = ss->scaling.imp;
    int S = imp ? imp->ffn_shard : 0;
    /* q4_0 below q4_K (the same bytes) where a device multiplies it faster, or where pruning
     * follows with shards that would cut a k-quant's super-blocks */
    int q4_0_last = mi_q4_0_faster(&ss->cl) || (prune && S > 0 && S % MI_QK_K != 0);
    mi_layer_spec *ls = mi_malloc((size_t)L * sizeof *ls, "layer specs");
    mi_shard_spec sp = {0};
    sp.layers = ls;
    mi_plan_shard(&ss->plan, r, &sp);
    for (int l = 0; l < L; l++) {
        held[l] = ls[l].n_kv || ls[l].proj || ls[l].nf;
        pos[l] = 0;
        len[l] = mi_precision_chain(c, l, imp, q4_0_last, chain[l]);
        /* FFN shards pruned at run time leave w2 with fewer columns: a k-quant needs them whole 256s */
        int kept = c->hidden_dim - __builtin_popcountll(ss->plan.layers[l].ffn_pruned) * ss->plan.ffn_shard;
        if (kept % MI_QK_K) {
            int k = 0;
            for (int i = 0; i < len[l]; i++)
                if (!mi_dtype_kquant(chain[l][i]))
                    chain[l][k++] = chain[l][i];
            len[l] = k;
        }
        f0[l] = ls[l].f0, nf[l] = ls[l].nf;
    }
    free(ls);
    unsigned char orig[MI_MAX_LAYERS][MI_N_LAYER_MATS];
    memcpy(orig, c->dtype, (size_t)L * sizeof orig[0]);
    /* the config's own check (blocked dtypes need dim and hidden_dim in whole blocks) is the same
     * for every layer: asked once per dtype, not at every step (it was a third of a decision) */
    int cfg_ok[MI_N_DTYPES];
    char err[MI_ERRLEN];
    for (int t = 0; t < MI_N_DTYPES; t++) {
        memset(c->dtype[0], t, sizeof c->dtype[0]);
        cfg_ok[t] = !mi_config_validate(c, err);
        memcpy(c->dtype[0], orig[0], sizeof orig[0]);
    }
    for (;;) {
        int best = -1;
        double bc = 0;
        for (int l = 0; l < L; l++) {
            if (!held[l] || pos[l] >= len[l])
                continue;
            double x = step_cost(ss, l, c->dtype[l][MI_WQ], chain[l][pos[l]]);
            if (best < 0 || x < bc)
                best = l, bc = x;
        }
        if (best < 0)
            break;
        unsigned char keep[MI_N_LAYER_MATS];
        int t = chain[best][pos[best]];
        memcpy(keep, c->dtype[best], sizeof keep);
        memset(c->dtype[best], t, sizeof keep);
        /* only a layer split across ranks (tensor parallelism) can cut blocks */
        const mi_layer_plan *lp = &ss->plan.layers[best];
        int split = lp->n_ffn > 1 || lp->proj_rank < 0;
        if (!cfg_ok[t] || (split && mi_plan_validate(&ss->plan, NULL, err))) {
            memcpy(c->dtype[best], keep, sizeof keep);
            held[best] = 0;
            continue;
        }
        pos[best]++;
        mv[n++] = DTYPE_MOVE(best, t);
    }
    int fin[MI_MAX_LAYERS]; /* w2's dtype after every precision step */
    for (int l = 0; l < L; l++)
        fin[l] = c->dtype[l][MI_W2];
    memcpy(c->dtype, orig, (size_t)L * sizeof orig[0]);
    if (!prune || S <= 0 || (ss->plan.ffn_shard && ss->plan.ffn_shard != S))
        return n;
    ranked_move *rk = mi_malloc((size_t)L * MI_MAX_PRUNE_SHARDS * sizeof *rk, "pruning moves");
    int nr = 0, count[MI_MAX_LAYERS];
    for (int l = 0; l < L; l++) {
        uint64_t m = ss->plan.layers[l].ffn_pruned;
        count[l] = __builtin_popcountll(m);
        for (int s = 0; s < imp->n_shards && nf[l] > 0 && S % mi_dtype_block(fin[l]) == 0; s++)
            if (!(m >> s & 1) && s * S < f0[l] + nf[l] && (s + 1) * S > f0[l])
                rk[nr++] = (ranked_move){imp->prune[l][s], PRUNE_MOVE(L, l, s)};
    }
    qsort(rk, (size_t)nr, sizeof *rk, by_rise);
    for (int i = 0; i < nr; i++) {
        int l = (rk[i].move - L) / MI_MAX_PRUNE_SHARDS;
        if (2 * (count[l] + 1) <= imp->n_shards)
            count[l]++, mv[n++] = rk[i].move;
    }
    free(rk);
    return n;
}

/* The plan's weights: orig with the first k steps of mv taken. */
static void take_moves(mi_session *ss, const weights_state *orig, const int *mv, int k)
{
    mi_plan *p = &ss->plan;
    int L = p->cfg.n_layers;
    weights_set(p, orig);
    for (int i = 0; i < k; i++)
        if (mv[i] < 0) {
            int x = -1 - mv[i];
            memset(p->cfg.dtype[x / MI_N_DTYPES], x % MI_N_DTYPES, sizeof p->cfg.dtype[0]);
        } else {
            int l = (mv[i] - L) / MI_MAX_PRUNE_SHARDS, s = (mv[i] - L) % MI_MAX_PRUNE_SHARDS;
            p->layers[l].ffn_pruned |= (uint64_t)1 << s;
            p->ffn_shard = ss->scaling.imp->ffn_shard;
        }
}

/* ", FFN shards of layers 5 (2) 3 (1) pruned" (how many each): appended to out (n bytes)
 * for the layers whose pruned shards differ between from and the plan. */
static void describe_pruned(const weights_state *from, const mi_plan *p, char *out, size_t n)
{
    /* describe() wrote "layers" alone when no dtype changed */
    size_t o = strcmp(out, "layers") ? strlen(out) : 0;
    int any = 0, more = 0;
    for (int l = p->cfg.n_layers - 1; l >= 0 && o < n; l--) {
        int a = __builtin_popcountll(from->pruned[l]), b = __builtin_popcountll(p->layers[l].ffn_pruned);
        if (a == b)
            continue;
        o += (size_t)snprintf(out + o, n - o, "%s %d (%d)", any ? "" : o ? ", FFN shards of layers" :
                              "FFN shards of layers", l, b > a ? b - a : a - b);
        more = b > a;
        any = 1;
    }
    if (any && o < n)
        snprintf(out + o, n - o, " %s", more ? "pruned" : "back");
}

/* Computation scaling on slowed rank r: of its steps (weight_moves), the
 * fewest (binary search) with which the cost model, with r slowed as
 * measured and scaled to the TPOT measured, meets AIM x target (all of them
 * if none does). Changes ss->plan's dtypes and pruned shards and fills d's
 * predicted_ms (the caller describes the change). Returns
 * the steps taken (0: nothing left to lower). */
static int lower_weights(mi_session *ss, int r, double slow, double now, int n_pos, session_decision *d)
{
    mi_config *c = &ss->plan.cfg;
    int *mv = mi_malloc(MAX_MOVES(c->n_layers) * sizeof *mv, "scaling moves"), n = weight_moves(ss, r, 1, mv);
    if (n == 0) {
        free(mv);
        return 0;
    }
    weights_state orig;
    weights_get(&ss->plan, &orig);
    /* the cluster as it now is: r's compute slower by what was measured */
    mi_cluster cl = ss->cl;
    mi_device *dev = mi_malloc((size_t)cl.n_devices * sizeof *dev, "devices");
    memcpy(dev, ss->cl.dev, (size_t)cl.n_devices * sizeof *dev);
    for (int t = 0; t < MI_N_DTYPES; t++)
        dev[r].pass_s[t] *= slow, dev[r].pos_s[t] *= slow;
    dev[r].kv_s *= slow, dev[r].op_s *= slow, dev[r].vec_s *= slow;
    cl.dev = dev;
    double pred = predict(ss, &cl, n_pos), scale = pred > 0 ? now / pred : 1.0;
    int lo = 1, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        take_moves(ss, &orig, mv, mid);
        if (scale * predict(ss, &cl, n_pos) <= AIM * ss->scaling.tpot_target_s)
            hi = mid;
        else
            lo = mid + 1;
    }
    take_moves(ss, &orig, mv, lo);
    d->predicted_ms = scale * predict(ss, &cl, n_pos) * 1e3;
    free(dev);
    free(mv);
    return lo;
}

int session_scale_memory(mi_session *ss, int r, int pos0, int need, double limit)
{
    if (ss->scaling.tpot_target_s <= 0 || ss->phases.installed_prefill || ss->scaling.n_decisions >= SESSION_MAX_DECISIONS)
        return 0;
    double t0 = mi_now();
    mi_config *c = &ss->plan.cfg;
    /* pruned shards stay in memory (packed, not freed): precision steps only */
    int *mv = mi_malloc(MAX_MOVES(c->n_layers) * sizeof *mv, "scaling moves"), n = weight_moves(ss, r, 0, mv), k;
    weights_state orig;
    weights_get(&ss->plan, &orig);
    double before = mi_plan_rank_bytes_at(&ss->plan, r, need);
    for (k = 1; k <= n; k++) {
        take_moves(ss, &orig, mv, k);
        if (mi_plan_rank_bytes_at(&ss->plan, r, need) <= limit)
            break;
    }
    free(mv);
    if (k > n) { /* lowering everything it holds is not enough: re-placement's turn */
        weights_set(&ss->plan, &orig);
        return 0;
    }
    session_decision dd;
    memset(&dd, 0, sizeof dd);
    dd.token = ss->scaling.n_tokens;
    dd.weights = 1;
    dd.rank = r;
    dd.slowdown = 1.0;
    dd.wire_from = dd.wire_to = ss->plan.wire;
    snprintf(dd.trigger, sizeof dd.trigger, "the KV cache of %d positions would take %s (rank %d) to %.3f MB, over "
             "its %.3f MB", need, ss->cl.dev[r].name, r, before / 1e6, limit / 1e6);
    describe(orig.dtype, c->dtype, c->n_layers, dd.change, sizeof dd.change);
    dd.decide_us = (mi_now() - t0) * 1e6;
    double t1 = mi_now();
    install(ss, pos0);
    dd.apply_ms = (mi_now() - t1) * 1e3;
    /* memory does not come back within a sequence: this lowering is not undone
     * by a probe, and undoing an earlier one would raise these layers again */
    ss->scaling.n_undo = 0;
    ss->scaling.decisions[ss->scaling.n_decisions++] = dd;
    fprintf(stderr, "meshinfer: scaling at position %d: %s -> lowered %s (decided in %.0f us, installed in %.1f ms)\n",
            need, dd.trigger, dd.change, dd.decide_us, dd.apply_ms);
    return 1;
}

/* Bytes a decode step moves with the plan's wires as they now are. */
static double step_bytes(mi_session *ss)
{
    int *saved = mi_malloc((size_t)(ss->prog.n_xchg + 1) * sizeof(int), "wire dtypes");
    rewire(ss, saved);
    double b = mi_programs_bytes(&ss->prog, MI_PHASE_DECODE, NULL, NULL);
    unwire(ss, saved);
    free(saved);
    return b;
}

/* A step's time with fewer bytes: Voltron §4.3.2 "estimates the expected
 * communication overhead ... under the current signal strength". The link
 * as it is now is measured, not modelled: comm_s is the step time no rank
 * spent computing (TPOT minus the largest compute per step of the last
 * poll), and it scales with the bytes moved. */
static double with_bytes(double now, double comm_s, double bytes_now, double bytes)
{
    return now - comm_s + (bytes_now > 0 ? comm_s * bytes / bytes_now : 0.0);
}

/* Communication scaling (Voltron §4.3.2): one step down the wire ladder
 * (fp32 -> fp16 -> q8_0) for the messages of the fewest layers, least
 * important first (message_cost), with which the step, its communication
 * scaled by the bytes (with_bytes), meets AIM x target (binary search); when
 * even all of them miss it, every message, the embeddings' and logits' too,
 * goes down that step. With need_gain (a slowed device has nothing left to
 * lower), only if that takes over 2% off TPOT. Changes the plan's wires and
 * fills d's wire_to, change and predicted_ms, and *per_byte with the
 * links' seconds per byte now (comm_s over the bytes before). Returns 0
 * (plan untouched) when nothing is lowered. */
static int lower_wire(mi_session *ss, double now, double comm_s, int need_gain, session_decision *d,
                      double *per_byte)
{
    mi_plan *p = &ss->plan;
    int L = p->cfg.n_layers, to = mi_wire_lower(p->wire), cand[MI_MAX_LAYERS], n = 0;
    if (to < 0)
        return 0;
    for (int l = 0; l < L; l++)
        if (mi_plan_wire(p, l) == p->wire)
            cand[n++] = l;
    for (int i = 1; i < n; i++) /* least important first (insertion: a few dozen layers) */
        for (int j = i; j > 0 && message_cost(ss, cand[j]) < message_cost(ss, cand[j - 1]); j--) {
            int t = cand[j];
            cand[j] = cand[j - 1], cand[j - 1] = t;
        }
    wires orig;
    wires_get(p, &orig);
    double b0 = step_bytes(ss), low;
    *per_byte = b0 > 0 ? comm_s / b0 : 0;
    int lo = 1, hi = n;
#define TAKE(k)                                                     \
    do {                                                            \
        wires_set(p, &orig);                                        \
        for (int i_ = 0; i_ < (k); i_++)                            \
            p->layers[cand[i_]].wire = to;                          \
    } while (0)
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        TAKE(mid);
        if (with_bytes(now, comm_s, b0, step_bytes(ss)) <= AIM * ss->scaling.tpot_target_s)
            hi = mid;
        else
            lo = mid + 1;
    }
    TAKE(n ? lo : 0);
#undef TAKE
    low = with_bytes(now, comm_s, b0, n ? step_bytes(ss) : b0);
    int uniform = !n || (lo == n && low > AIM * ss->scaling.tpot_target_s);
    if (uniform) { /* every message one step down: the layers' own dtypes are the plan's again */
        p->wire = to;
        for (int l = 0; l < L; l++)
            if (p->layers[l].wire == to)
                p->layers[l].wire = MI_F32;
        low = with_bytes(now, comm_s, b0, step_bytes(ss));
    }
    if (need_gain && !(low < 0.98 * now)) {
        wires_set(p, &orig);
        return 0;
    }
    d->wire_to = to;
    d->predicted_ms = low * 1e3;
    d->change[0] = 0; /* every message ("") or, described by the caller, some layers' */
    return 1;
}

/* The step time no rank spent computing: TPOT now minus the largest compute
 * per step of a poll (per). */
static double comm_of(const mi_session *ss, double now, const double *per)
{
    double most = 0;
    for (int r = 0; r < ss->size; r++)
        most = fmax(most, per[r]);
    return fmax(0.0, now - most);
}

/* A diagnosis spans two polls of every rank's compute time DIAG steps
 * apart: the first (at step k, or when the last is stale) opens it; the
 * second, DIAG or more steps later, gives per[] and returns 1. */
static int second_poll(mi_session *ss, int k, double *per, double *poll_ms)
{
    if (ss->scaling.poll_k < 0 || k - ss->scaling.poll_k > 2 * DIAG) {
        poll(ss, k, NULL, NULL);
        return 0;
    }
    if (k - ss->scaling.poll_k < DIAG)
        return 0;
    poll(ss, k, per, poll_ms);
    ss->scaling.poll_k = -1;
    return 1;
}

/* Whether the newest lowering can be undone now (see control.h): TPOT well
 * under the target; for lowered weights, their device computes within SLOWED
 * (or the square root of its slowdown then) of its baseline again (two polls
 * DIAG steps apart: returns 0 while they are pending); for a lowered wire, the cost model's TPOT with the
 * higher dtype, scaled to what is measured, under AIM x target. Fills d's
 * trigger. */
static int room_to_undo(mi_session *ss, int k, double now, int n_pos, session_decision *d)
{
    const struct session_undo *u = &ss->scaling.undo[ss->scaling.n_undo - 1];
    double target = ss->scaling.tpot_target_s;
    if (now < PROBE_UNDER * target) {
        snprintf(d->trigger, sizeof d->trigger, "TPOT %.2f ms, under %.0f%% of the %.2f ms target for %d steps",
                 now * 1e3, 100 * PROBE_UNDER, target * 1e3, k - ss->scaling.last_change);
        return 1;
    }
    if (u->rank >= 0) {
        double per[MI_MAX_RANKS], ratio[MI_MAX_RANKS];
        if (!second_poll(ss, k, per, &d->poll_ms))
            return 0;
        ratios(ss, per, n_pos, ratio);
        /* the baseline in force was measured with the device slowed by u->slow */
        double s = ss->scaling.base_ratio[u->rank] > 0 ? ratio[u->rank] / ss->scaling.base_ratio[u->rank] : u->slow;
        /* recovered: at least half-way back to its baseline, on a log scale (3.7x when
         * lowered and 2.8x now is noise, not recovery) */
        if (s > fmax(SLOWED, sqrt(u->slow))) {
            ss->scaling.probe_k = k + 2 * DIAG; /* still slowed: look again later, not every few steps */
            return 0;
        }
        d->rank = u->rank;
        d->slowdown = s;
        snprintf(d->trigger, sizeof d->trigger, "%s (rank %d) computes %.2fx its baseline (%.2fx when its layers were "
                 "lowered); TPOT %.2f ms", ss->cl.dev[u->rank].name, u->rank, s, u->slow, now * 1e3);
        return 1;
    }
    /* a lowered wire: what the step would take with the bytes as before, the link as it is now
     * (measured over two polls DIAG steps apart, as a slowed device's recovery is) */
    if (ss->scaling.poll_k < 0 || k - ss->scaling.poll_k > 2 * DIAG) {
        poll(ss, k, NULL, NULL);
        return 0;
    }
    if (k - ss->scaling.poll_k < DIAG)
        return 0;
    double per[MI_MAX_RANKS];
    poll(ss, k, per, &d->poll_ms);
    ss->scaling.poll_k = -1;
    wires w;
    wires_get(&ss->plan, &w);
    double comm = comm_of(ss, now, per), b_now = step_bytes(ss);
    wires_set(&ss->plan, &u->wires);
    double b_up = step_bytes(ss);
    wires_set(&ss->plan, &w);
    double after = with_bytes(now, comm, b_now, b_up);
    /* the step time not computing also holds latency and waiting, which do not grow with the
     * bytes, so `after` is pessimistic: a link whose time per byte fell by RECOVERED since the
     * lowering has recovered (a probe: if it had not, the next waits twice as long) */
    double per_byte = b_now > 0 ? comm / b_now : 0;
    int recovered = u->comm_per_byte > 0 && per_byte <= RECOVERED * u->comm_per_byte;
    if (after > AIM * target && !recovered) {
        ss->scaling.probe_k = k + 2 * DIAG; /* the link is still slow: look again later */
        return 0;
    }
    d->predicted_ms = after * 1e3;
    if (after <= AIM * target)
        snprintf(d->trigger, sizeof d->trigger, "TPOT %.2f ms, %.2f ms of it not computing; with %.2fx the bytes it "
                 "would take %.2f ms, under %.0f%% of the %.2f ms target", now * 1e3, comm * 1e3,
                 b_now > 0 ? b_up / b_now : 0, after * 1e3, 100 * AIM, target * 1e3);
    else
        snprintf(d->trigger, sizeof d->trigger, "TPOT %.2f ms; the links take %.2fx the time per byte they took when "
                 "the messages were lowered: recovered", now * 1e3, per_byte / u->comm_per_byte);
    return 1;
}

/* A decision's first run faulted in the pages it touches (its stack frames,
 * the undo record, code): on this VM 20-30 us a page, 0.1-0.4 ms for a
 * decision whose work takes tens of us. So once the baseline is taken, every
 * path a decision takes runs once on the plan as it is and is undone, and the
 * undo records are written, while no target is at stake. */
static void warm_up(mi_session *ss, double now, int n_pos)
{
    for (int i = 0; i < SESSION_MAX_DECISIONS; i++)
        memset(&ss->scaling.undo[i], 0, sizeof ss->scaling.undo[i]);
    weights_state w;
    wires ww;
    weights_get(&ss->plan, &w);
    wires_get(&ss->plan, &ww);
    session_decision d;
    double per_byte;
    for (int r = 0; r < ss->size; r++)
        lower_weights(ss, r, 2.0, now, n_pos, &d);
    weights_set(&ss->plan, &w);
    lower_wire(ss, now, 0.5 * now, 0, &d, &per_byte);
    wires_set(&ss->plan, &ww);
}

/* The baseline: every rank's compute per step (steps 8-16 at first, and
 * again after weights were lowered) against the cost model's for the plan in
 * force, so that a later slowdown is told from the model's own error (an
 * uncalibrated model is far off for quantized kernels). Returns 1 while a
 * baseline is being measured (no decision then). */
static int measure_baseline(mi_session *ss, int k, int n_pos)
{
    if (!ss->scaling.has_base && !ss->scaling.rebase_k)
        ss->scaling.rebase_k = 8, ss->scaling.rebase_rank = -1, ss->scaling.rebase_slow = 1;
    if (!ss->scaling.rebase_k)
        return 0;
    if (k == ss->scaling.rebase_k) {
        poll(ss, k, NULL, NULL);
    } else if (k == ss->scaling.rebase_k + DIAG) {
        double per[MI_MAX_RANKS];
        poll(ss, k, per, NULL);
        ratios(ss, per, n_pos, ss->scaling.base_ratio);
        if (ss->scaling.rebase_rank >= 0)
            ss->scaling.base_ratio[ss->scaling.rebase_rank] /= ss->scaling.rebase_slow;
        if (!ss->scaling.has_base) { /* said once: what later slowdowns are measured against */
            fprintf(stderr, "meshinfer: scaling: baseline after token %d, compute per step:", k);
            for (int r = 0; r < ss->size; r++)
                fprintf(stderr, " rank %d %.3f ms", r, per[r] * 1e3);
            fputc('\n', stderr);
            warm_up(ss, median(ss->scaling.token_ms + k - WINDOW, WINDOW) / 1e3, n_pos);
        }
        ss->scaling.has_base = 1;
        ss->scaling.rebase_k = 0;
        ss->scaling.poll_k = -1;
    }
    return 1;
}

/* TPOT is over the target: a diagnosis over two polls DIAG steps apart (the
 * first opens it), then computation scaling when a device slowed enough to
 * explain it, else communication scaling. Returns 1 with a decision in *dd
 * (and *t0, *decided: when the decision began and was taken), 0 for none. */
static int diagnose_and_lower(mi_session *ss, int k, double now, int n_pos, session_decision *dd, double *t0,
                              double *decided)
{
    double per[MI_MAX_RANKS], ratio[MI_MAX_RANKS];
    int k0 = ss->scaling.poll_k;
    if (!second_poll(ss, k, per, &dd->poll_ms))
        return 0;
    *t0 = mi_now();
    ratios(ss, per, n_pos, ratio);
    /* the device whose compute grew the most past its baseline, in seconds
     * per step; it is the cause only if that growth is at least half the
     * overshoot (a device 1.4x slower on a small share of the work is not
     * why TPOT went over) */
    int slow = -1;
    double worst = 0, grew = 0;
    for (int r = 0; r < ss->size; r++) {
        double x = ss->scaling.base_ratio[r] > 0 ? ratio[r] / ss->scaling.base_ratio[r] : 0;
        double g = x > 1 ? per[r] * (1 - 1 / x) : 0;
        if (g > grew || slow < 0)
            grew = g, worst = x, slow = r;
    }
    /* the overshoot over the same steps as the polls (a slowdown that began
     * inside the window is diluted alike in both) */
    double span = 0;
    for (int i = k0; i < k; i++)
        span += ss->scaling.token_ms[i] / ((k - k0) * 1e3);
    int device = slow >= 0 && worst >= SLOWED && grew >= 0.5 * (span - ss->scaling.tpot_target_s);
    struct session_undo *u = &ss->scaling.undo[ss->scaling.n_undo];
    memcpy(u->dtype, ss->plan.cfg.dtype, (size_t)ss->cfg.n_layers * sizeof u->dtype[0]);
    for (int l = 0; l < ss->cfg.n_layers; l++)
        u->ffn_pruned[l] = ss->plan.layers[l].ffn_pruned;
    u->ffn_shard = ss->plan.ffn_shard;
    memcpy(u->base_ratio, ss->scaling.base_ratio, sizeof u->base_ratio);
    wires_get(&ss->plan, &u->wires);
    u->rank = -1;
    u->slow = 1;
    u->comm_per_byte = 0;
    if (ss->scaling.last_was_probe && k - ss->scaling.last_change <= 2 * DIAG)
        ss->scaling.hold *= 2; /* the probe failed */
    if (device && lower_weights(ss, slow, worst, now, n_pos, dd) > 0) {
        *decided = mi_now();
        weights_state was;
        memcpy(was.dtype, u->dtype, (size_t)ss->cfg.n_layers * sizeof was.dtype[0]);
        memcpy(was.pruned, u->ffn_pruned, (size_t)ss->cfg.n_layers * sizeof was.pruned[0]);
        describe(was.dtype, ss->plan.cfg.dtype, ss->cfg.n_layers, dd->change, sizeof dd->change);
        describe_pruned(&was, &ss->plan, dd->change, sizeof dd->change);
        dd->weights = 1;
        dd->rank = slow;
        dd->slowdown = worst;
        u->rank = slow;
        u->slow = worst;
        snprintf(dd->trigger, sizeof dd->trigger, "TPOT %.2f ms over the %.2f ms target; %s (rank %d) computes %.2fx "
                 "its baseline", now * 1e3, ss->scaling.tpot_target_s * 1e3, ss->cl.dev[slow].name, slow, worst);
        /* the lowered kernels' speed is measured, not assumed: a new baseline, r still slowed */
        ss->scaling.rebase_k = k + WINDOW;
        ss->scaling.rebase_rank = slow;
        ss->scaling.rebase_slow = worst;
    } else if (lower_wire(ss, now, comm_of(ss, now, per), device, dd, &u->comm_per_byte)) {
        /* no device slowed enough to explain it: the time went to the links,
         * which fewer bytes relieve */
        *decided = mi_now();
        if (ss->plan.wire == u->wires.wire) /* some layers' messages, not every one */
            describe_wires(&u->wires, &ss->plan, dd->change, sizeof dd->change);
        dd->slowdown = worst;
        if (device)
            snprintf(dd->trigger, sizeof dd->trigger, "TPOT %.2f ms over the %.2f ms target; %s (rank %d) computes "
                     "%.2fx its baseline but holds nothing left to lower", now * 1e3, ss->scaling.tpot_target_s * 1e3,
                     ss->cl.dev[slow].name, slow, worst);
        else
            snprintf(dd->trigger, sizeof dd->trigger, "TPOT %.2f ms over the %.2f ms target; no device's compute "
                     "explains it (most: rank %d, %.2fx its baseline, +%.2f ms a step)", now * 1e3,
                     ss->scaling.tpot_target_s * 1e3, slow, worst, grew * 1e3);
    } else {
        ss->scaling.last_change = k; /* nothing left that helps: diagnose again later, not every step */
        return 0;
    }
    ss->scaling.n_undo++;
    return 1;
}

/* The pressure has gone: undo the newest lowering (a probe; if TPOT goes
 * back over the target soon after, the next probe waits twice as long, so a
 * lasting slowdown is not probed every few tokens). Returns 1 with the
 * decision in *dd, 0 when a memory re-placement since forbids it. */
static int undo_newest(mi_session *ss, session_decision *dd)
{
    const struct session_undo *u = &ss->scaling.undo[ss->scaling.n_undo - 1];
    weights_state cur, was;
    weights_get(&ss->plan, &cur);
    memcpy(was.dtype, u->dtype, sizeof was.dtype);
    memcpy(was.pruned, u->ffn_pruned, sizeof was.pruned);
    was.ffn_shard = u->ffn_shard;
    wires curw;
    wires_get(&ss->plan, &curw);
    dd->restore = 1;
    dd->weights = memcmp(cur.dtype, was.dtype, (size_t)ss->cfg.n_layers * sizeof cur.dtype[0]) != 0 ||
                  memcmp(cur.pruned, was.pruned, (size_t)ss->cfg.n_layers * sizeof *cur.pruned) != 0;
    dd->wire_to = u->wires.wire;
    weights_set(&ss->plan, &was);
    wires_set(&ss->plan, &u->wires);
    ss->scaling.n_undo--;
    if (!plan_ok(ss)) { /* a memory re-placement since: keep what is in force */
        weights_set(&ss->plan, &cur);
        wires_set(&ss->plan, &curw);
        return 0;
    }
    if (!dd->weights && curw.wire == u->wires.wire) /* some layers' messages go back up */
        describe_wires(&curw, &ss->plan, dd->change, sizeof dd->change);
    memcpy(ss->scaling.base_ratio, u->base_ratio, sizeof ss->scaling.base_ratio);
    if (dd->weights) {
        describe(cur.dtype, ss->plan.cfg.dtype, ss->cfg.n_layers, dd->change, sizeof dd->change);
        describe_pruned(&cur, &ss->plan, dd->change, sizeof dd->change);
    }
    return 1;
}

/* A decision taken: installed, recorded and said in one line. */
static void apply_decision(mi_session *ss, int k, int n_pos, session_decision *dd, double t0, double decided, int w)
{
    dd->token = k;
    /* the decision, not the formatting of its log line (printf's code, cold after a decode step,
     * was a third of it); a probe's polls are reported apart (poll_ms), as a diagnosis's are */
    dd->decide_us = ((decided > 0 ? decided : mi_now()) - t0) * 1e6 - (dd->restore ? dd->poll_ms * 1e3 : 0.0);
    double t1 = mi_now();
    install(ss, n_pos);
    dd->apply_ms = (mi_now() - t1) * 1e3;
    ss->scaling.last_change = k;
    ss->scaling.last_was_probe = dd->restore;
    ss->scaling.poll_k = -1;
    ss->scaling.decisions[ss->scaling.n_decisions++] = *dd;
    if (dd->weights)
        fprintf(stderr, "meshinfer: scaling after token %d: %s -> %s %s (decided in %.0f us after a %.1f ms poll, "
                        "installed in %.1f ms)\n", k, dd->trigger, dd->restore ? "restored" : "lowered", dd->change,
                dd->decide_us, dd->poll_ms, dd->apply_ms);
    else if (dd->change[0])
        fprintf(stderr, "meshinfer: scaling after token %d: %s -> %s %s (decided in %.0f us, installed in %.1f ms)\n",
                k, dd->trigger, dd->restore ? "restored" : "lowered", dd->change, dd->decide_us, dd->apply_ms);
    else
        fprintf(stderr, "meshinfer: scaling after token %d: %s -> messages %s to %s (decided in %.0f us, installed in "
                        "%.1f ms)\n", k, dd->trigger, mi_dtype_name(w), mi_dtype_name(dd->wire_to), dd->decide_us,
                dd->apply_ms);
}

void session_after_step(mi_session *ss, double step_s, int n_pos)
{
    if (ss->scaling.n_tokens < SESSION_MAX_TOKENS)
        ss->scaling.token_ms[ss->scaling.n_tokens] = (float)(step_s * 1e3);
    int k = ++ss->scaling.n_tokens;
    if (ss->scaling.tpot_target_s <= 0 || ss->phases.installed_prefill || k < WINDOW || k > SESSION_MAX_TOKENS ||
        ss->scaling.n_decisions >= SESSION_MAX_DECISIONS)
        return;
    if (measure_baseline(ss, k, n_pos))
        return;
    double t0 = mi_now(), decided = 0;
    double now = median(ss->scaling.token_ms + k - WINDOW, WINDOW) / 1e3;
    int w = ss->plan.wire;
    session_decision dd;
    memset(&dd, 0, sizeof dd);
    dd.rank = -1;
    dd.slowdown = 1.0;
    dd.wire_from = dd.wire_to = w;
    int decision = 0;
    if (now > ss->scaling.tpot_target_s && k - ss->scaling.last_change >= WINDOW)
        decision = diagnose_and_lower(ss, k, now, n_pos, &dd, &t0, &decided);
    else if (ss->scaling.n_undo > 0 && k - ss->scaling.last_change >= ss->scaling.hold && k >= ss->scaling.probe_k && now <= ss->scaling.tpot_target_s &&
             room_to_undo(ss, k, now, n_pos, &dd))
        decision = undo_newest(ss, &dd);
    if (decision)
        apply_decision(ss, k, n_pos, &dd, t0, decided, w);
}
