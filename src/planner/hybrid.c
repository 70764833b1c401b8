/* Voltron §4.2.1 "Layer-wise Hybrid Parallelism" (Voltron): one pass over
 * the layers choosing, for each sublayer (attention, FFN), model parallelism
 * (the whole sublayer on the fastest device that has room) or tensor
 * parallelism (shards in proportion to the devices' speed), whichever the
 * cost model predicts faster for the phase being planned, under the memory
 * budgets. Prefill and decode are planned apart (a prompt's many positions
 * make compute dominate and favour fewer, faster devices; a decoded token's
 * one position makes every device's weight streaming count).
 *
 * A candidate is judged by compiling a one-layer plan (the layer with the
 * candidate, and the classifier as placed) into programs and predicting one
 * pass of the phase (cost.h): the very programs and messages the runtime
 * will run, not a formula beside them. */
#define _POSIX_C_SOURCE 200809L
#include "planners.h"

#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/planner.h"
#include "meshinfer/partition.h"

typedef struct {
    const mi_config *c;
    const mi_cluster *cl;
    int n;           /* ranks */
    int T, ctx;      /* the pass judged: positions and context */
    int kv_pos;      /* KV positions budgeted */
    double *left;    /* [n] bytes of budget still free */
    int order[MI_MAX_RANKS]; /* ranks, fastest first for this phase */
    double speed[MI_MAX_RANKS];
} hybrid;

/* A device's speed for the phase: weight elements per second of an fp32
 * product over the pass's positions (the dtype only scales it). */
static double phase_speed(const mi_device *d, int T)
{
    return 1.0 / (d->pass_s[MI_F32] + (T - 1) * d->pos_s[MI_F32]);
}

static double kv_bytes(const mi_config *c, int n_pos) { return 8.0 * n_pos * c->head_dim; }

/* Bytes of nk KV-head groups of layer l with their wo columns and cache. */
static double attn_bytes(const hybrid *h, int l, int nk)
{
    return (double)nk * ((double)mi_head_group_bytes(h->c, l) + kv_bytes(h->c, h->kv_pos)) +
           (double)mi_proj_bytes(h->c, l, nk) + 4.0 * h->c->dim;
}

static double ffn_units_bytes(const hybrid *h, int l, int nf)
{
    return (double)mi_ffn_bytes(h->c, l, nf) + 4.0 * h->c->dim;
}

/* Predicted seconds of one pass of a one-layer plan: layer l as lp, the
 * classifier as in plan. */
static double judge(const hybrid *h, const mi_plan *plan, int l, const mi_layer_plan *lp, int ph)
{
    mi_plan one = *plan;
    one.cfg.n_layers = 1;
    memcpy(one.cfg.dtype[0], plan->cfg.dtype[l], sizeof one.cfg.dtype[0]);
    memcpy(one.cfg.moe_dtype[0], plan->cfg.moe_dtype[l], sizeof one.cfg.moe_dtype[0]);
    mi_layer_plan layer = *lp;
    one.layers = &layer;
    one.keep = NULL;
    mi_programs p;
    char err[MI_ERRLEN];
    if (mi_programs_compile(&one, &p, err))
        return 1e30; /* a layout the scheme cannot run is never chosen */
    mi_prediction pr;
    mi_predict_pass(&one, &p, h->cl, ph, h->T, h->ctx, &pr);
    mi_programs_free(&p);
    return pr.token_s;
}

/* Tensor parallelism of `units` (in aligned groups of `align`) over the
 * devices with room for their share; shares by speed. Writes slices to out
 * and returns their count, 0 when no set of devices has room. */
static int tp_split(const hybrid *h, int groups, int align, double (*bytes)(const hybrid *, int, int), int l,
                    mi_slice *out)
{
    int use[MI_MAX_RANKS], nu = 0;
    for (int i = 0; i < h->n; i++)
        use[nu++] = i;
    for (;;) {
        double w[MI_MAX_RANKS];
        int cnt[MI_MAX_RANKS];
        for (int i = 0; i < nu; i++)
            w[i] = h->speed[use[i]];
        int m = mi_split_units(groups, w, nu, cnt), bad = -1, next = 0, k = 0;
        for (int i = 0; i < nu && bad < 0; i++) {
            if (!cnt[i])
                continue;
            if (bytes(h, l, cnt[i] * align) > h->left[use[i]])
                bad = i;
            out[k++] = (mi_slice){use[i], next * align, cnt[i] * align};
            next += cnt[i];
        }
        if (bad < 0)
            return m;
        /* the device without room leaves the set; the others take its share */
        memmove(use + bad, use + bad + 1, (size_t)(nu - bad - 1) * sizeof(int));
        if (--nu == 0)
            return 0;
    }
}

static double attn_nk_bytes(const hybrid *h, int l, int nk) { return attn_bytes(h, l, nk); }
static double ffn_nf_bytes(const hybrid *h, int l, int nf) { return ffn_units_bytes(h, l, nf); }
/* n experts with the router, counted with the shared expert on every share when choosing who has room
 * (the one share that holds it is not known yet; what each holds is charged exactly after) */
static double experts_n_bytes(const hybrid *h, int l, int n) { return mi_moe_piece_bytes(h->c, l, n, 1); }

/* The fastest device with room for `need` bytes, or -1. */
static int mp_device(const hybrid *h, double need)
{
    for (int i = 0; i < h->n; i++)
        if (h->left[h->order[i]] >= need)
            return h->order[i];
    return -1;
}

/* Rank 0 keeps the embeddings and the classifier (it samples): whole on it
 * when it has room, else the classifier split by speed as the tp planner
 * does; a split vocabulary (split) splits both, each rank the embedding rows
 * of its classifier rows (a tied table's rows serve both). Their bytes come
 * off the ranks' room. */
static void place_vocab(mi_plan *plan, hybrid *h, int split)
{
    const mi_config *c = h->c;
    double cls = c->shared_classifier ? 0 : (double)mi_classifier_bytes(c, c->vocab_size);
    plan->split_vocab = split;
    if (!split)
        h->left[0] -= (double)mi_embedding_bytes(c) + 4.0 * c->dim;
    mi_slice tmp[MI_MAX_RANKS];
    if (!split && (cls <= h->left[0] || h->n == 1)) {
        h->left[0] -= cls;
        plan->n_cls = 1;
        tmp[0] = (mi_slice){0, 0, c->vocab_size};
    } else {
        int cnt[MI_MAX_RANKS], next = 0;
        plan->n_cls = mi_split_units(c->vocab_size, h->speed, h->n, cnt);
        for (int r = 0; r < plan->n_cls; r++) {
            tmp[r] = (mi_slice){r, next, cnt[r]};
            double b = (double)mi_classifier_bytes(c, cnt[r]);
            if (split) /* its embedding rows too (a tied classifier is those rows), the norm, learned positions */
                b = (double)cnt[r] * (double)mi_dtype_row_bytes(c->emb_dtype, (size_t)c->dim) +
                    (c->shared_classifier ? 0.0 : b) + 4.0 * c->dim + (c->pos_embed ? 4.0 * c->dim * c->seq_len : 0.0);
            h->left[r] -= b;
            next += cnt[r];
        }
    }
    plan->cls = mi_malloc((size_t)plan->n_cls * sizeof(mi_slice), "plan classifier slices");
    memcpy(plan->cls, tmp, (size_t)plan->n_cls * sizeof(mi_slice));
}

int mi_plan_hybrid(mi_plan *plan, const mi_cluster *cl, const mi_plan_options *opt, char *err)
{
    const mi_config *c = &plan->cfg;
    int n = plan->n_ranks;
    hybrid h = {c, cl, n, 1, 0, plan->kv_positions, NULL, {0}, {0}};
    int ph = opt->prefill ? MI_PHASE_PREFILL : MI_PHASE_DECODE;
    if (opt->prefill) {
        h.T = opt->prefill_T > 0 ? opt->prefill_T : 64;
        if (h.T > c->seq_len)
            h.T = c->seq_len;
    } else {
        h.ctx = plan->kv_positions / 2;
    }
    h.left = mi_malloc((size_t)n * sizeof(double), "budgets");
    for (int r = 0; r < n; r++) {
        h.left[r] = cl->dev[r].mem_bytes;
        h.speed[r] = phase_speed(&cl->dev[r], h.T);
        h.order[r] = r;
    }
    for (int i = 1; i < n; i++) /* fastest first; rank order breaks ties */
        for (int j = i; j > 0 && h.speed[h.order[j]] > h.speed[h.order[j - 1]]; j--) {
            int t = h.order[j];
            h.order[j] = h.order[j - 1];
            h.order[j - 1] = t;
        }
    place_vocab(plan, &h, opt->split_vocab && n > 1);
    if (!plan->controller_works && n > 1)
        h.left[0] = -1; /* --controller-works no: rank 0 holds no layer (no room is how both choices see it) */

    int rc = 0;
    for (int l = 0; l < c->n_layers && !rc; l++) {
        mi_layer_plan *lp = &plan->layers[l];
        int ka = mi_kv_align(c, l), fa = mi_ffn_align(c, l);
        /* candidates for attention, judged with the FFN on the device that
         * takes the attention under MP (a fixed FFN for both) */
        mi_layer_plan mp = {0}, tp = {0};
        mi_slice ffn_fixed;
        int d_att = mp_device(&h, attn_bytes(&h, l, c->n_kv_heads));
        mi_slice att_tp[MI_MAX_RANKS];
        int n_att_tp = tp_split(&h, c->n_kv_heads / ka, ka, attn_nk_bytes, l, att_tp);
        if (d_att < 0 && !n_att_tp) {
            rc = mi_set_error(err, "plan does not fit: no device has room for layer %d's attention (%.0f bytes "
                                   "whole) nor a share of it", l, attn_bytes(&h, l, c->n_kv_heads));
            break;
        }
        ffn_fixed = (mi_slice){d_att >= 0 ? d_att : att_tp[0].rank, 0, mi_plan_ffn_units(c)};
        double t_mp = 1e30, t_tp = 1e30;
        if (d_att >= 0) {
            for (int k = 0; k < c->n_kv_heads; k++)
                mp.kv_rank[k] = d_att;
            mp.proj_rank = d_att;
            mp.n_ffn = 1;
            mp.ffn = &ffn_fixed;
            t_mp = judge(&h, plan, l, &mp, ph);
        }
        if (n_att_tp > 1) {
            for (int i = 0; i < n_att_tp; i++)
                for (int k = att_tp[i].v0; k < att_tp[i].v0 + att_tp[i].n; k++)
                    tp.kv_rank[k] = att_tp[i].rank;
            tp.proj_rank = -1;
            tp.n_ffn = 1;
            tp.ffn = &ffn_fixed;
            t_tp = judge(&h, plan, l, &tp, ph);
        }
        const mi_layer_plan *att = t_tp < t_mp ? &tp : &mp;
        memcpy(lp->kv_rank, att->kv_rank, sizeof lp->kv_rank);
        lp->proj_rank = att->proj_rank;
        for (int r = 0; r < n; r++) {
            int nk = 0;
            for (int k = 0; k < c->n_kv_heads; k++)
                nk += lp->kv_rank[k] == r;
            if (nk)
                h.left[r] -= attn_bytes(&h, l, nk);
        }
        /* then the FFN, with the attention chosen. A mixture of experts: model parallelism (every expert
         * on one device) or expert parallelism (whole experts in proportion to speed, the shared expert
         * with the first share); tensor parallelism inside each expert is not offered (an expert is a
         * narrow FFN, 1408 units in Qwen1.5-MoE: splitting it adds a reduction without reading fewer
         * bytes than placing whole experts apart) */
        int moe = mi_config_is_moe(c), units = mi_plan_ffn_units(c);
        double whole = moe ? mi_moe_piece_bytes(c, l, units, 1) : ffn_units_bytes(&h, l, c->hidden_dim);
        int d_ffn = mp_device(&h, whole);
        mi_slice ffn_tp[MI_MAX_RANKS], ffn_mp = {d_ffn, 0, units};
        int n_ffn_tp = moe ? tp_split(&h, units, 1, experts_n_bytes, l, ffn_tp)
                           : tp_split(&h, c->hidden_dim / fa, fa, ffn_nf_bytes, l, ffn_tp);
        if (d_ffn < 0 && !n_ffn_tp) {
            rc = mi_set_error(err, "plan does not fit: no device has room for layer %d's FFN (%.0f bytes whole) "
                                   "nor a share of it", l, whole);
            break;
        }
        mi_layer_plan cand = *lp;
        t_mp = t_tp = 1e30;
        if (d_ffn >= 0) {
            cand.n_ffn = 1;
            cand.ffn = &ffn_mp;
            t_mp = judge(&h, plan, l, &cand, ph);
        }
        if (n_ffn_tp > 1) {
            cand.n_ffn = n_ffn_tp;
            cand.ffn = ffn_tp;
            t_tp = judge(&h, plan, l, &cand, ph);
        }
        const mi_slice *fs = t_tp < t_mp ? ffn_tp : &ffn_mp;
        lp->n_ffn = t_tp < t_mp ? n_ffn_tp : 1;
        lp->ffn = mi_malloc((size_t)lp->n_ffn * sizeof(mi_slice), "plan FFN slices");
        memcpy(lp->ffn, fs, (size_t)lp->n_ffn * sizeof(mi_slice));
        for (int i = 0; i < lp->n_ffn; i++)
            h.left[lp->ffn[i].rank] -= moe ? mi_moe_piece_bytes(c, l, lp->ffn[i].n, lp->ffn[i].v0 == 0)
                                           : ffn_units_bytes(&h, l, lp->ffn[i].n);
    }
    free(h.left);
    return rc;
}
