/* The step schedule of a plan and its cost model (see plan.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/plan.h"

typedef struct {
    unsigned char has[MI_MAX_RANKS];
} rankset;

static void set_clear(rankset *s) { memset(s, 0, sizeof *s); }

static mi_step *push(mi_schedule *s, int *cap, mi_step_kind kind, int layer, int root)
{
    if (s->n_steps == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        mi_step *ns = realloc(s->steps, (size_t)*cap * sizeof *ns);
        if (!ns)
            mi_fatal("out of memory building the schedule");
        s->steps = ns;
    }
    mi_step *st = &s->steps[s->n_steps++];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->layer = layer;
    st->root = root;
    return st;
}

static void set_members(mi_step *st, const rankset *m, int n_ranks)
{
    st->n_members = 0;
    for (int r = 0; r < n_ranks; r++)
        if (m->has[r])
            st->members[st->n_members++] = r;
}

static int lowest(const rankset *s, int n)
{
    for (int r = 0; r < n; r++)
        if (s->has[r])
            return r;
    return -1;
}

/* Make sure every rank in `need` holds the current residual: one broadcast
 * from a holder to the ranks that lack it. */
static void ensure(mi_schedule *s, int *cap, rankset *holders, const rankset *need, int n, int layer)
{
    rankset missing;
    set_clear(&missing);
    int any = 0;
    for (int r = 0; r < n; r++)
        if (need->has[r] && !holders->has[r]) {
            missing.has[r] = 1;
            any = 1;
        }
    if (!any)
        return;
    int root = lowest(holders, n);
    missing.has[root] = 1;
    mi_step *st = push(s, cap, MI_STEP_BCAST, layer, root);
    set_members(st, &missing, n);
    for (int r = 0; r < n; r++)
        holders->has[r] |= missing.has[r];
}

int mi_schedule_build(const mi_plan *plan, mi_schedule *s)
{
    const mi_config *c = &plan->cfg;
    int n = plan->n_ranks, cap = 0;
    memset(s, 0, sizeof *s);
    rankset holders, need, heads;
    set_clear(&holders);
    holders.has[0] = 1; /* the controller embeds the tokens */
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        set_clear(&heads);
        for (int k = 0; k < c->n_kv_heads; k++)
            heads.has[lp->kv_rank[k]] = 1;
        need = heads;
        if (lp->proj_rank >= 0)
            need.has[lp->proj_rank] = 1;
        mi_step *st;
        if (l > 0 && plan->layers[l - 1].speculate) {
            /* attention already ran on Z; the DECIDE step gave every member X */
            st = push(s, &cap, MI_STEP_ATTN_CHECK, l, -1);
        } else {
            ensure(s, &cap, &holders, &need, n, l);
            st = push(s, &cap, MI_STEP_ATTN, l, -1);
        }
        set_members(st, &heads, n);
        if (lp->proj_rank >= 0) {
            rankset g = heads;
            g.has[lp->proj_rank] = 1;
            st = push(s, &cap, MI_STEP_GATHER, l, lp->proj_rank);
            set_members(st, &g, n);
            st = push(s, &cap, MI_STEP_PROJ, l, lp->proj_rank);
            st->n_members = 1;
            st->members[0] = lp->proj_rank;
            set_clear(&holders);
            holders.has[lp->proj_rank] = 1;
        } else {
            st = push(s, &cap, MI_STEP_PROJ_PARTIAL, l, lowest(&heads, n));
            set_members(st, &heads, n);
            holders = heads;
        }
        rankset f;
        set_clear(&f);
        for (int i = 0; i < lp->n_ffn; i++)
            f.has[lp->ffn[i].rank] = 1;
        if (lp->speculate) {
            const mi_layer_plan *nx = &plan->layers[l + 1];
            int fr = lp->ffn[0].rank;
            rankset h1, sb, dec;
            set_clear(&h1);
            for (int k = 0; k < c->n_kv_heads; k++)
                h1.has[nx->kv_rank[k]] = 1;
            sb = h1;
            sb.has[lp->proj_rank] = 1;
            sb.has[fr] = 1;
            st = push(s, &cap, MI_STEP_SPEC_BCAST, l, lp->proj_rank);
            set_members(st, &sb, n);
            st = push(s, &cap, MI_STEP_SPEC_ATTN, l + 1, -1);
            set_members(st, &h1, n);
            st = push(s, &cap, MI_STEP_FFN, l, fr);
            st->n_members = 1;
            st->members[0] = fr;
            dec = h1;
            dec.has[fr] = 1;
            if (nx->proj_rank >= 0)
                dec.has[nx->proj_rank] = 1;
            st = push(s, &cap, MI_STEP_DECIDE, l, fr);
            set_members(st, &dec, n);
            holders = dec;
            continue;
        }
        ensure(s, &cap, &holders, &f, n, l);
        st = push(s, &cap, lp->n_ffn == 1 ? MI_STEP_FFN : MI_STEP_FFN_PARTIAL, l, lowest(&f, n));
        set_members(st, &f, n);
        holders = f;
    }
    rankset cls;
    set_clear(&cls);
    for (int i = 0; i < plan->n_cls; i++)
        cls.has[plan->cls[i].rank] = 1;
    ensure(s, &cap, &holders, &cls, n, -1);
    cls.has[0] = 1; /* logits are gathered at the controller */
    mi_step *st = push(s, &cap, MI_STEP_LOGITS, -1, 0);
    set_members(st, &cls, n);
    return 0;
}

void mi_schedule_free(mi_schedule *s)
{
    free(s->steps);
    memset(s, 0, sizeof *s);
}

static int count_kv(const mi_plan *plan, int l, int rank)
{
    int n = 0;
    for (int k = 0; k < plan->cfg.n_kv_heads; k++)
        n += plan->layers[l].kv_rank[k] == rank;
    return n;
}

static int cls_rows(const mi_plan *plan, int rank)
{
    for (int i = 0; i < plan->n_cls; i++)
        if (plan->cls[i].rank == rank)
            return plan->cls[i].n;
    return 0;
}

size_t mi_step_floats(const mi_plan *plan, const mi_step *st, int member)
{
    const mi_config *c = &plan->cfg;
    switch (st->kind) {
    case MI_STEP_BCAST:
    case MI_STEP_SPEC_BCAST:
    case MI_STEP_PROJ_PARTIAL:
    case MI_STEP_FFN_PARTIAL: return (size_t)c->dim;
    case MI_STEP_DECIDE: return (size_t)c->dim + 1;
    case MI_STEP_GATHER: return (size_t)count_kv(plan, st->layer, member) * mi_kv_group(c) * c->head_dim;
    case MI_STEP_LOGITS: return (size_t)cls_rows(plan, member);
    default: return 0;
    }
}

double mi_step_bytes(const mi_plan *plan, const mi_step *st, int member)
{
    size_t n = mi_step_floats(plan, st, member);
    if (st->kind == MI_STEP_DECIDE) /* the flag stays a 4-byte float */
        return (double)mi_wire_row_bytes(plan->wire, n - 1) + 4.0;
    return (double)mi_wire_row_bytes(plan->wire, n);
}

void mi_wire_slice(int dim, int n_members, int j, int *c0, int *len)
{
    int nb = (dim + MI_QK - 1) / MI_QK;
    int a = (int)((long)nb * j / n_members) * MI_QK, b = (int)((long)nb * (j + 1) / n_members) * MI_QK;
    if (b > dim)
        b = dim;
    if (a > dim)
        a = dim;
    *c0 = a;
    *len = b - a;
}

/* Bytes member `me` sends (= receives) when n members reduce dim values
 * (plan.h): with two, the whole vector each way; with more, a reduce-scatter
 * and an allgather of mi_wire_slice's slices. For two members the slices add
 * up to the whole vector, so one formula serves both. */
static double scatter_gather_bytes(int wire, int dim, int n, int me)
{
    int c0, mine;
    mi_wire_slice(dim, n, me, &c0, &mine);
    double b = 0;
    for (int j = 0; j < n; j++) {
        int len;
        mi_wire_slice(dim, n, j, &c0, &len);
        if (j != me)
            b += (double)mi_wire_row_bytes(wire, (size_t)len) + (double)mi_wire_row_bytes(wire, (size_t)mine);
    }
    return b;
}

double mi_plan_bytes(const mi_plan *plan, const mi_schedule *s, double *sent, double *recv)
{
    int n = plan->n_ranks;
    if (sent)
        memset(sent, 0, (size_t)n * sizeof(double));
    if (recv)
        memset(recv, 0, (size_t)n * sizeof(double));
    double total = 0;
    for (int i = 0; i < s->n_steps; i++) {
        const mi_step *st = &s->steps[i];
        if (st->n_members < 2)
            continue;
        int reduce = st->kind == MI_STEP_PROJ_PARTIAL || st->kind == MI_STEP_FFN_PARTIAL;
        if (reduce) {
            for (int j = 0; j < st->n_members; j++) {
                double b = scatter_gather_bytes(plan->wire, plan->cfg.dim, st->n_members, j);
                if (sent) sent[st->members[j]] += b;
                if (recv) recv[st->members[j]] += b;
                total += b;
            }
            continue;
        }
        int root = st->root >= 0 ? st->root : st->members[0];
        for (int j = 0; j < st->n_members; j++) {
            int m = st->members[j];
            if (m == root)
                continue;
            double b = mi_step_bytes(plan, st, m);
            int to_root = st->kind == MI_STEP_GATHER || st->kind == MI_STEP_LOGITS || reduce;
            int from_root = st->kind == MI_STEP_BCAST || st->kind == MI_STEP_SPEC_BCAST ||
                            st->kind == MI_STEP_DECIDE || reduce;
            if (to_root) {
                if (sent) sent[m] += b;
                if (recv) recv[root] += b;
                total += b;
            }
            if (from_root) {
                if (sent) sent[root] += b;
                if (recv) recv[m] += b;
                total += b;
            }
        }
    }
    return total;
}

void mi_plan_predict(const mi_plan *plan, const mi_schedule *s, const mi_cluster *cl, int ctx, mi_prediction *p)
{
    const mi_config *c = &plan->cfg;
    int n = plan->n_ranks;
    memset(p, 0, sizeof *p);
    double ready[MI_MAX_RANKS] = {0};
    double hd = c->head_dim;
#define COMPUTE(r, bytes)                                                        \
    do {                                                                         \
        double t_ = (bytes) / (cl->mem_bw * cl->dev[(r)].speed);                 \
        ready[(r)] += t_;                                                        \
        p->busy_s[(r)] += t_;                                                    \
    } while (0)
    for (int i = 0; i < s->n_steps; i++) {
        const mi_step *st = &s->steps[i];
        int root = st->root >= 0 ? st->root : (st->n_members ? st->members[0] : 0);
        double start = 0, lat = 0, maxb = 0;
        for (int j = 0; j < st->n_members; j++) {
            int m = st->members[j];
            if (ready[m] > start)
                start = ready[m];
            if (m != root) {
                double l = mi_cluster_latency(cl, root, m);
                if (l > lat)
                    lat = l;
                double b = mi_step_bytes(plan, st, m);
                if (b > maxb)
                    maxb = b;
            }
        }
        double rounds = st->n_members > 1 ? ceil(log2((double)st->n_members)) : 0;
        double msg = lat + maxb / cl->bandwidth;
        switch (st->kind) {
        case MI_STEP_BCAST:
        case MI_STEP_SPEC_BCAST:
        case MI_STEP_DECIDE:
            for (int j = 0; j < st->n_members; j++)
                ready[st->members[j]] = start + rounds * msg;
            break;
        case MI_STEP_GATHER:
        case MI_STEP_LOGITS:
            if (st->kind == MI_STEP_LOGITS)
                for (int j = 0; j < st->n_members; j++) {
                    int m = st->members[j];
                    double rows = (double)mi_step_floats(plan, st, m);
                    if (rows > 0)
                        COMPUTE(m, (double)mi_classifier_bytes(c, (int)rows));
                    if (ready[m] > start)
                        start = ready[m];
                }
            for (int j = 0; j < st->n_members; j++)
                ready[st->members[j]] = start + (st->n_members > 1 ? msg : 0);
            break;
        case MI_STEP_ATTN:
        case MI_STEP_SPEC_ATTN:
        case MI_STEP_ATTN_CHECK: {
            /* a checked speculative attention is recomputed only when rejected */
            double share = 1.0;
            if (st->kind == MI_STEP_ATTN_CHECK)
                share = 1.0 - plan->layers[st->layer - 1].accept_permille / 1000.0;
            for (int j = 0; j < st->n_members; j++) {
                int m = st->members[j], nk = count_kv(plan, st->layer, m);
                COMPUTE(m, share * nk * ((double)mi_head_group_bytes(c, st->layer) + 4.0 * 2.0 * ctx * hd));
            }
            break;
        }
        case MI_STEP_PROJ: COMPUTE(root, (double)mi_proj_bytes(c, st->layer, c->n_kv_heads)); break;
        case MI_STEP_PROJ_PARTIAL:
        case MI_STEP_FFN_PARTIAL: {
            double end = 0;
            for (int j = 0; j < st->n_members; j++) {
                int m = st->members[j];
                double bytes;
                if (st->kind == MI_STEP_PROJ_PARTIAL) {
                    bytes = (double)mi_proj_bytes(c, st->layer, count_kv(plan, st->layer, m));
                } else {
                    bytes = 0;
                    const mi_layer_plan *lp = &plan->layers[st->layer];
                    for (int k = 0; k < lp->n_ffn; k++)
                        if (lp->ffn[k].rank == m)
                            bytes = (double)mi_ffn_bytes(c, st->layer, lp->ffn[k].n);
                }
                COMPUTE(m, bytes);
                if (ready[m] > end)
                    end = ready[m];
            }
            /* one round of messages with two members, two with more (plan.h) */
            for (int j = 0; j < st->n_members; j++)
                ready[st->members[j]] = end + (st->n_members == 2 ? 1 : 2) * msg;
            break;
        }
        case MI_STEP_FFN: COMPUTE(root, (double)mi_ffn_bytes(c, st->layer, c->hidden_dim)); break;
        }
    }
#undef COMPUTE
    double end = 0;
    for (int r = 0; r < n; r++)
        if (ready[r] > end)
            end = ready[r];
    p->token_s = end;
    p->bytes_per_token = mi_plan_bytes(plan, s, NULL, NULL);
    for (int r = 0; r < n && r < MI_MAX_RANKS; r++)
        mi_plan_rank_memory(plan, r, &p->weight_bytes[r], &p->kv_bytes[r]);
}
