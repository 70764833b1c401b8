/* The cost model over programs (see cost.h). */
#include "meshinfer/cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/model.h"

/* Seconds for E weight elements of dtype t over T positions on device d
 * (plan.h mi_device: the regression calibrate fits, or the roofline). */
static double mat_s(const mi_device *d, int t, double elems, int T)
{
    return elems * (d->pass_s[t] + (T - 1) * d->pos_s[t]);
}

double mi_op_compute_s(const mi_plan *plan, const mi_op *op, const mi_cluster *cl, int rank, int T, int ctx)
{
    if (mi_op_is_comm(op->kind) || op->kind == MI_OP_POST)
        return 0;
    const mi_config *c = &plan->cfg;
    const mi_device *d = &cl->dev[rank];
    double D = c->dim, hd = c->head_dim;
    int l = op->layer;
    /* elementwise work on the op's output columns, every position */
    double t = d->op_s + (double)T * (op->kind == MI_OP_NORM || op->kind == MI_OP_NORM_LOCAL ? c->dim : op->n) * d->vec_s;
    switch (op->kind) {
    case MI_OP_ATTN: {
        int g = mi_kv_group(c), nk = (op->n + g * c->head_dim - 1) / (g * c->head_dim);
        double share = 1.0;
        /* a checked speculative attention is recomputed only when rejected */
        if ((op->flags & MI_OPF_IF_REJECTED) && l > 0)
            share = 1.0 - plan->layers[l - 1].accept_permille / 1000.0;
        double w = mat_s(d, c->dtype[l][MI_WQ], nk * g * hd * D, T) + mat_s(d, c->dtype[l][MI_WK], nk * hd * D, T) +
                   mat_s(d, c->dtype[l][MI_WV], nk * hd * D, T);
        double cached = (double)T * ctx + (double)T * (T + 1) / 2.0;
        double heads = d->calibrated ? (double)nk * g : nk;
        return t + share * (w + heads * d->kv_s * hd * cached);
    }
    case MI_OP_PROJ: return t + mat_s(d, c->dtype[l][MI_WO], (double)op->n * op->ni, T);
    case MI_OP_FFN_UP: { /* pruned shards (Voltron §4.3.1) are not computed */
        double nk = mi_plan_ffn_kept_units(plan, l, op->c0, op->n);
        return t + mat_s(d, c->dtype[l][MI_W1], nk * D, T) + mat_s(d, c->dtype[l][MI_W3], nk * D, T);
    }
    case MI_OP_FFN_DOWN:
        return t + mat_s(d, c->dtype[l][MI_W2], (double)op->n * mi_plan_ffn_kept_units(plan, l, op->i0, op->ni), T);
    case MI_OP_MOE: {
        /* the router (all E experts' rows, on every expert rank); of the k experts a position runs, the
         * expected share among the ni this rank holds, k * ni / E (routing is not known ahead: a uniform
         * router's expectation); the shared expert where held */
        double h = c->hidden_dim, sh = op->flags & MI_OPF_SHARED ? c->shared_hidden_dim : 0;
        double k = (double)c->n_experts_used * op->ni / c->n_experts;
        const unsigned char *mt = c->moe_dtype[l];
        /* (routed: the router ran at the dispatch's root, ROUTE) */
        double router = op->flags & MI_OPF_ROUTED ? 0.0 : mat_s(d, mt[MI_MOE_ROUTER], (double)c->n_experts * D, T);
        return t + router +
               k * (mat_s(d, c->dtype[l][MI_W1], h * D, T) + mat_s(d, c->dtype[l][MI_W3], h * D, T) +
                    mat_s(d, c->dtype[l][MI_W2], h * D, T)) +
               mat_s(d, mt[MI_MOE_SW1], sh * D, T) + mat_s(d, mt[MI_MOE_SW3], sh * D, T) +
               mat_s(d, mt[MI_MOE_SW2], sh * D, T);
    }
    case MI_OP_LOGITS: return t + mat_s(d, c->cls_dtype, (double)op->n * D, 1); /* the last position only */
    case MI_OP_ROUTE: return t + mat_s(d, c->moe_dtype[l][MI_MOE_ROUTER], (double)c->n_experts * D, T);
    default: return t; /* norms, adds, embedding rows: small next to the weights */
    }
}

/* One simulated pass: the programs of a phase at T positions from ctx. */
typedef struct {
    const mi_programs *p;
    const mi_cluster *cl;
    int T;
    int T_logits; /* rows whose logits are wanted: 1, a batch's every row */
} sim;

/* One message of exchange xid from member a to member b: latency plus
 * transfer, in seconds (logits travel for the T_logits rows only). */
static double msg_s(const sim *s, int xid, int a, int b)
{
    const mi_programs *p = s->p;
    const mi_comm *cm = &p->comms[p->xchg[xid].comm];
    int A = cm->members[a], B = cm->members[b];
    double npos = p->xchg[xid].buf == MI_BUF_LOGITS ? s->T_logits : s->T, bytes = npos * mi_exchange_bytes(p, xid, a, b);
    double lat = mi_cluster_latency(s->cl, A, B);
    /* past the eager limit the sender waits for the receiver's go-ahead first */
    return lat * (bytes > s->cl->eager_bytes ? 3 : 1) + bytes / mi_cluster_bandwidth(s->cl, A, B);
}

/* Every member receives every other member's message of the exchange (one
 * round of an all-to-all: allgathers, one-round reductions). */
static void all_to_all(const sim *s, int xid, double *ready)
{
    const mi_programs *p = s->p;
    const mi_comm *cm = &p->comms[p->xchg[xid].comm];
    double next[MI_MAX_RANKS];
    for (int i = 0; i < cm->n_members; i++) {
        double t = ready[cm->members[i]];
        for (int j = 0; j < cm->n_members; j++)
            if (j != i && mi_exchange_bytes(p, xid, j, i) > 0) {
                double a = ready[cm->members[j]] + msg_s(s, xid, j, i);
                if (a > t)
                    t = a;
            }
        next[i] = t;
    }
    for (int i = 0; i < cm->n_members; i++)
        ready[cm->members[i]] = next[i];
}

/* Complete exchange xid, every member having reached it: the members'
 * clocks move as the runtime's messages would (collectives.c). Sends are
 * eager (a sender goes on at once); receivers wait for what they need. */
static void complete(const sim *s, int xid, const double *post, double *ready)
{
    const mi_programs *p = s->p;
    const mi_cluster *cl = s->cl;
    const mi_exchange *x = &p->xchg[xid];
    const mi_comm *cm = &p->comms[x->comm];
    int n = cm->n_members, root = x->root;
    if (n < 2)
        return;
    switch (x->kind) {
    case MI_OP_BCAST:
    case MI_OP_IBCAST:
    case MI_OP_DISPATCH: /* (a member's message, possibly empty, always travels) */
        for (int j = 0; j < n; j++)
            if (j != root) {
                double a = ready[cm->members[root]] + msg_s(s, xid, root, j);
                if (a > ready[cm->members[j]])
                    ready[cm->members[j]] = a;
            }
        break;
    case MI_OP_PUT: {
        /* an origin's put waits for the root's post, then travels */
        double t = ready[cm->members[root]];
        for (int j = 0; j < n; j++) {
            if (j == root)
                continue;
            int m = cm->members[j];
            double posted = post[xid] + mi_cluster_latency(cl, cm->members[root], m);
            if (posted > ready[m])
                ready[m] = posted;
            double a = ready[m] + msg_s(s, xid, j, root);
            if (a > t)
                t = a;
        }
        ready[cm->members[root]] = t;
        break;
    }
    case MI_OP_GATHERV:
    case MI_OP_COMBINE: {
        double t = ready[cm->members[root]];
        for (int j = 0; j < n; j++)
            if (j != root) {
                double a = ready[cm->members[j]] + msg_s(s, xid, j, root);
                if (a > t)
                    t = a;
            }
        ready[cm->members[root]] = t;
        break;
    }
    case MI_OP_ALLREDUCE:
        all_to_all(s, xid, ready);
        if (n > 2 && x->rounds != 1)
            all_to_all(s, xid, ready); /* the allgather after the reduce-scatter */
        break;
    default: all_to_all(s, xid, ready); break;
    }
}

/* A compute op with the logits of T_logits rows. */
static double op_s(const mi_plan *plan, const mi_op *op, const mi_cluster *cl, int r, int T, int T_logits, int ctx)
{
    double t = mi_op_compute_s(plan, op, cl, r, T, ctx);
    if (op->kind == MI_OP_LOGITS && T_logits > 1) {
        const mi_device *d = &cl->dev[r];
        double e = (double)op->n * plan->cfg.dim;
        t += mat_s(d, plan->cfg.cls_dtype, e, T_logits) - mat_s(d, plan->cfg.cls_dtype, e, 1);
    }
    return t;
}

static void predict_pass(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int phase, int T,
                         int T_logits, int ctx, mi_prediction *out);

void mi_predict_pass(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int phase, int T, int ctx,
                     mi_prediction *out)
{
    predict_pass(plan, p, cl, phase, T, 1, ctx, out);
}

double mi_predict_batch_step(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, int B)
{
    mi_prediction pr;
    predict_pass(plan, p, cl, B == 1 ? MI_PHASE_DECODE : MI_PHASE_PREFILL, B, B, ctx, &pr);
    return pr.token_s;
}

static void predict_pass(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int phase, int T,
                         int T_logits, int ctx, mi_prediction *out)
{
    sim s = {p, cl, T, T_logits};
    int n = plan->n_ranks;
    memset(out, 0, sizeof *out);
    double ready[MI_MAX_RANKS] = {0};
    int pc[MI_MAX_RANKS] = {0};
    double *post = mi_calloc((size_t)p->n_xchg + 1, sizeof(double), "post times");
    const mi_program *prog = p->prog[phase];
    /* the token's command reaches each worker one link latency after rank 0 sends it */
    for (int r = 1; r < n; r++)
        ready[r] = mi_cluster_latency(cl, 0, r);
    for (;;) {
        /* run every rank up to its next communication op (posts are local: they only start a clock) */
        int left = 0;
        for (int r = 0; r < n; r++) {
            while (pc[r] < prog[r].n_ops) {
                const mi_op *op = &prog[r].ops[pc[r]];
                if (op->kind == MI_OP_POST) {
                    post[op->xid] = ready[r];
                } else if (!mi_op_is_comm(op->kind)) {
                    double t = op_s(plan, op, cl, r, T, T_logits, ctx);
                    ready[r] += t;
                    out->busy_s[r] += t;
                } else {
                    break;
                }
                pc[r]++;
            }
            left += pc[r] < prog[r].n_ops;
        }
        if (!left)
            break;
        /* complete an exchange every member has reached (the programs come
         * from one global order, so the earliest pending one always is) */
        int done = 0;
        for (int r = 0; r < n && !done; r++) {
            if (pc[r] >= prog[r].n_ops)
                continue;
            int xid = prog[r].ops[pc[r]].xid;
            const mi_comm *cm = &p->comms[p->xchg[xid].comm];
            int all = 1;
            for (int j = 0; j < cm->n_members && all; j++) {
                int m = cm->members[j];
                all = pc[m] < prog[m].n_ops && prog[m].ops[pc[m]].xid == xid;
            }
            if (!all)
                continue;
            complete(&s, xid, post, ready);
            for (int j = 0; j < cm->n_members; j++)
                pc[cm->members[j]]++;
            done = 1;
        }
        if (!done)
            mi_fatal("internal error: the programs' communication ops do not match (cost model)");
    }
    free(post);
    /* the next token starts when rank 0 has its logits and every worker
     * would be ready by the time its next command arrives */
    double end = ready[0];
    for (int r = 1; r < n; r++) {
        double t = ready[r] - mi_cluster_latency(cl, 0, r);
        if (t > end)
            end = t;
    }
    out->token_s = end;
    out->bytes_per_token = mi_programs_bytes(p, phase, NULL, NULL);
    for (int r = 0; r < n && r < MI_MAX_RANKS; r++)
        mi_plan_rank_memory(plan, r, &out->weight_bytes[r], &out->kv_bytes[r]);
}

void mi_predict(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, mi_prediction *out)
{
    mi_predict_pass(plan, p, cl, MI_PHASE_DECODE, 1, ctx, out);
}

double mi_predict_ttft(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int n_prompt, int chunk)
{
    double t = 0;
    mi_prediction pr;
    if (chunk < 1)
        chunk = 1;
    for (int i = 0; i < n_prompt; i += chunk) {
        int T = n_prompt - i < chunk ? n_prompt - i : chunk;
        mi_predict_pass(plan, p, cl, MI_PHASE_PREFILL, T, i, &pr);
        t += pr.token_s;
    }
    return t;
}

double mi_predict_tpot(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx0, int n_steps)
{
    /* a step's time is linear in its context (attention), so the mean over
     * the steps is the step at the middle one */
    mi_prediction pr;
    mi_predict(plan, p, cl, ctx0 + (n_steps > 1 ? (n_steps - 1) / 2 : 0), &pr);
    return pr.token_s;
}

double mi_predict_delays(const mi_plan *plan, const mi_programs *p)
{
    /* a cluster whose only cost is one unit per link crossing */
    mi_cluster cl;
    mi_cluster_default(&cl, plan->n_ranks, 1e30);
    cl.latency_s = 1.0;
    cl.bandwidth = 1e300;
    cl.mem_bw = 1e300;
    cl.gflops = 1e300;
    mi_cluster_finish(&cl);
    free(cl.rtt_s);
    cl.rtt_s = NULL;
    mi_prediction pr;
    mi_predict(plan, p, &cl, 0, &pr);
    mi_cluster_free(&cl);
    return pr.token_s;
}

/* Rank r's share of rebuilding the exchanges of programs p (comms.c): the
 * communicators it is a member of and the windows of its PUT exchanges, each
 * at the cost calibrate measured (creation and freeing). */
static double setup_of(double two, double all, int m, int n)
{
    return n > 2 ? two + (all - two) * (m - 2) / (double)(n - 2) : two;
}

static double rebuild_s(const mi_programs *p, const mi_cluster *cl, int r)
{
    double t = 0;
    int n = cl->n_devices;
    for (int i = 0; i < p->n_comms; i++)
        if (p->comms[i].n_members >= 2 && mi_comm_index(&p->comms[i], r) >= 0)
            t += setup_of(cl->comm_setup_s, cl->comm_setup_all_s, p->comms[i].n_members, n);
    for (int x = 0; x < p->n_xchg; x++) {
        const mi_comm *cm = &p->comms[p->xchg[x].comm];
        if (p->xchg[x].kind == MI_OP_PUT && cm->n_members >= 2 && mi_comm_index(cm, r) >= 0)
            t += setup_of(cl->win_setup_s, cl->win_setup_all_s, cm->n_members, n);
    }
    return t;
}

double mi_plan_switch_s(const mi_plan *from, const mi_plan *to, const mi_cluster *cl, int n_pos)
{
    const mi_config *c = &to->cfg;
    int L = c->n_layers;
    mi_layer_spec *ls = mi_calloc(2 * (size_t)L, sizeof *ls, "layer specs");
    double worst = 0;
    /* the new placement's communicators and windows, built anew (a plan that does not compile has
     * none to build: its own error comes where it is installed) */
    mi_programs prog;
    char err[MI_ERRLEN];
    int rebuild = (cl->comm_setup_s > 0 || cl->win_setup_s > 0) && !mi_programs_compile(to, &prog, err);
    for (int r = 0; r < to->n_ranks; r++) {
        mi_shard_spec a = {.layers = ls}, b = {.layers = ls + L};
        mi_plan_shard(from, r, &a);
        mi_plan_shard(to, r, &b);
        /* what the runtime keeps in place (migrate.c): layers whose spec is unchanged, and the
         * embeddings and classifier when unchanged */
        for (int l = 0; l < L; l++)
            if (!memcmp(&a.layers[l], &b.layers[l], sizeof a.layers[l]))
                memset(&b.layers[l], 0, sizeof b.layers[l]);
        if (a.embeddings == b.embeddings && a.cls_v0 == b.cls_v0 && a.cls_nv == b.cls_nv &&
            a.emb_c0 == b.emb_c0 && a.emb_nc == b.emb_nc && a.emb_v0 == b.emb_v0 && a.emb_nv == b.emb_nv) {
            b.embeddings = 0;
            b.cls_nv = 0;
            b.emb_nc = 0;
            b.emb_nv = 0;
        }
        double t = (double)mi_shard_weight_bytes(c, &b) / cl->storage_bw;
        /* KV heads arriving from their old owners */
        for (int l = 0; l < L; l++)
            for (int k = 0; k < c->n_kv_heads; k++) {
                int o = from->layers[l].kv_rank[k];
                if (to->layers[l].kv_rank[k] == r && o != r)
                    t += 2.0 * n_pos * c->head_dim * sizeof(float) / mi_cluster_bandwidth(cl, o, r);
            }
        if (rebuild)
            t += rebuild_s(&prog, cl, r);
        if (t > worst)
            worst = t;
    }
    if (rebuild)
        mi_programs_free(&prog);
    free(ls);
    return worst;
}
