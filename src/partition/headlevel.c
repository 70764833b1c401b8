/* HeadSplit's head-level schemes (layerwise, roundrobin, random, greedy, tp)
 * compiled to per-rank programs (see partition.h).
 *
 * The residual stream lives on one rank at a time (or on several identical
 * copies): the controller embeds the tokens; before each block the ranks
 * that need the residual and lack it receive it by broadcast from a holder;
 * head outputs go to the projection rank by RMA (or, with wo split by heads,
 * partial projections are reduced); the FFN runs on one rank or as slices
 * whose partial sums are reduced; logits are gathered at rank 0, whole or
 * as each classifier slice's best candidates (plan.h logits_k). With a split
 * vocabulary the ranks holding classifier rows hold those embedding rows
 * too: each embeds the tokens among its rows and rank 0 gathers the rows.
 *
 * Inter-layer speculation (HeadSplit "Speculating across layers"): after the
 * projection of layer l the projection rank sends Z non-blocking to the FFN
 * rank and to layer l+1's head ranks, which start attention on Z while the
 * FFN runs; the FFN rank tests ||FFN(Z)|| / ||Z|| and broadcasts the decision
 * with the exact residual; layer l+1's heads recompute only if rejected.
 *
 * Every rank's program is the subsequence of one global order of steps that
 * it takes part in, so communication ops meet in the same order everywhere.
 * The two phases differ in two ways that only latency decides: decode
 * reduces partial sums in one round of messages (every member sends its whole
 * partial to every other: each message is small), prefill in two (reduce-
 * scatter then allgather: fewer bytes for many positions); and each RMA
 * window is exposed (POST) when the forward pass starts, so the origins'
 * puts never wait for the post message on the critical path. */
#include <string.h>

#include "meshinfer/common.h"
#include "program_build.h"

typedef struct {
    unsigned char has[MI_MAX_RANKS];
} rankset;

typedef struct {
    const mi_plan *plan;
    mi_programs *p;
    int n;
    int ph; /* the phase being compiled */
} hl;

static void set_clear(rankset *s) { memset(s, 0, sizeof *s); }

static int lowest(const rankset *s, int n)
{
    for (int r = 0; r < n; r++)
        if (s->has[r])
            return r;
    return -1;
}

static int members_of(const rankset *s, int n, int *m)
{
    int k = 0;
    for (int r = 0; r < n; r++)
        if (s->has[r])
            m[k++] = r;
    return k;
}

/* Every member of set s gets op (prefill program; decode shares it). */
static void to_all(hl *h, const rankset *s, mi_op op)
{
    for (int r = 0; r < h->n; r++)
        if (s->has[r])
            pb_op(h->p, h->ph, r, op);
}

static void to_one(hl *h, int r, mi_op op)
{
    pb_op(h->p, h->ph, r, op);
}

/* A communication op over the ranks of s, root `root` (world rank or -1),
 * moving buf; returns the exchange for the caller to fill. The op goes to
 * every member. */
static mi_exchange *comm_step(hl *h, int kind, const rankset *s, int root, int buf, int layer, int flags)
{
    int m[MI_MAX_RANKS] = {0}, k = members_of(s, h->n, m);
    int comm = pb_comm(h->p, m, k);
    int ri = -1;
    for (int j = 0; j < k && root >= 0; j++)
        if (m[j] == root)
            ri = j;
    int xid = pb_exchange(h->p, kind, comm, buf, ri, layer);
    mi_op op = pb_compute(kind, layer, buf, 0, mi_buf_width(&h->plan->cfg, buf));
    op.xid = xid;
    op.flags = (unsigned char)flags;
    to_all(h, s, op);
    return &h->p->xchg[xid];
}

static mi_op norm_op(int layer, int kind, int flags)
{
    mi_op op = pb_compute(MI_OP_NORM, layer, MI_BUF_XN, 0, 0);
    op.norm = (short)kind;
    op.flags = (unsigned char)flags;
    return op;
}

/* Broadcast the residual (flag: with the speculation decision) from root to s. */
static void bcast(hl *h, const rankset *s, int root, int layer, int kind, int flag)
{
    mi_exchange *x = comm_step(h, kind, s, root, MI_BUF_X, layer, flag ? MI_OPF_FLAG : 0);
    x->flag = flag;
    pb_cols_add(&x->send[x->root], 0, h->plan->cfg.dim);
}

/* Make sure every rank in `need` holds the current residual: one broadcast
 * from a holder to the ranks that lack it. */
static void ensure(hl *h, rankset *holders, const rankset *need, int layer)
{
    rankset missing;
    set_clear(&missing);
    int any = 0;
    for (int r = 0; r < h->n; r++)
        if (need->has[r] && !holders->has[r]) {
            missing.has[r] = 1;
            any = 1;
        }
    if (!any)
        return;
    int root = lowest(holders, h->n);
    missing.has[root] = 1;
    bcast(h, &missing, root, layer, MI_OP_BCAST, 0);
    for (int r = 0; r < h->n; r++)
        holders->has[r] |= missing.has[r];
}

/* Columns of HEADS that rank r's KV heads (with their query heads) fill. */
static void head_cols(const mi_plan *plan, int l, int r, mi_colset *s)
{
    const mi_config *c = &plan->cfg;
    int w = mi_kv_group(c) * c->head_dim;
    for (int k = 0; k < c->n_kv_heads; k++)
        if (plan->layers[l].kv_rank[k] == r)
            pb_cols_add(s, k * w, w);
}

static int held_heads_width(const mi_plan *plan, int l, int r)
{
    const mi_config *c = &plan->cfg;
    int n = 0;
    for (int k = 0; k < c->n_kv_heads; k++)
        n += plan->layers[l].kv_rank[k] == r;
    return n * mi_kv_group(c) * c->head_dim;
}

static void attention(hl *h, const rankset *heads, int l, int flags)
{
    to_all(h, heads, norm_op(l, MI_NORM_ATTN, flags));
    for (int r = 0; r < h->n; r++)
        if (heads->has[r]) {
            mi_op op = pb_compute(MI_OP_ATTN, l, MI_BUF_HEADS_LOCAL, 0, held_heads_width(h->plan, l, r));
            op.flags = (unsigned char)flags;
            to_one(h, r, op);
        }
}

/* The FFN units [f0, f0+nf) of rank r into TMP (the whole dim); a mixture
 * of experts' experts [f0, f0+nf) (expert parallelism: the router on every
 * expert rank, its selected held experts weighted, the shared expert with
 * the first slice), a partial sum the reduce adds up. */
static void ffn(hl *h, int l, int r, int f0, int nf)
{
    const mi_config *c = &h->plan->cfg;
    to_one(h, r, norm_op(l, MI_NORM_FFN, 0));
    if (mi_config_is_moe(c)) {
        mi_op op = pb_compute(MI_OP_MOE, l, MI_BUF_TMP, 0, c->dim);
        op.i0 = f0;
        op.ni = nf;
        op.flags = f0 == 0 && c->shared_hidden_dim > 0 ? MI_OPF_SHARED : 0;
        to_one(h, r, op);
        return;
    }
    to_one(h, r, pb_compute(MI_OP_FFN_UP, l, MI_BUF_HIDDEN, f0, nf));
    mi_op d = pb_compute(MI_OP_FFN_DOWN, l, MI_BUF_TMP, 0, c->dim);
    d.in = MI_BUF_HIDDEN;
    d.i0 = f0;
    d.ni = nf;
    to_one(h, r, d);
}

/* X += TMP for block `which` (MI_NORM_ATTN, MI_NORM_FFN) of layer l: the
 * post-norm variant is the family's (compile.c). */
static mi_op add_op(const mi_config *c, int l, int which)
{
    mi_op op = pb_compute(MI_OP_ADD, l, MI_BUF_X, 0, c->dim);
    op.norm = (short)which;
    return op;
}

/* TMP summed over the members of s into X (a lone member just adds); with
 * post-norms the sum stays in TMP and every member joins it to X itself. */
static void reduce(hl *h, const rankset *s, int l, int which)
{
    const mi_config *c = &h->plan->cfg;
    int m[MI_MAX_RANKS], k = members_of(s, h->n, m);
    if (k == 1) {
        to_one(h, m[0], add_op(c, l, which));
        return;
    }
    mi_exchange *x = comm_step(h, MI_OP_ALLREDUCE, s, -1, MI_BUF_X, l, c->post_norms ? MI_OPF_SUM : 0);
    x->rounds = h->ph == MI_PHASE_DECODE ? 1 : 2;
    for (int j = 0; j < k; j++)
        pb_cols_add(&x->send[j], 0, c->dim);
    if (c->post_norms)
        to_all(h, s, add_op(c, l, which));
}

/* Expert parallelism's sparse dispatch of layer l's experts, the residual
 * held by `holders`: a holder holding experts (else the lowest expert rank,
 * sent the residual first: the router's weights are with the experts)
 * normalises and routes, sends each other expert rank only the rows of the positions
 * that chose one of its experts, runs its own, and sums the rows that come
 * back into X in the one-device order; it alone then holds the residual.
 * (post-norm families keep the reduction: their ADD norms the whole sum.) */
static void dispatch(hl *h, rankset *holders, const rankset *f, int l)
{
    const mi_plan *plan = h->plan;
    const mi_config *c = &plan->cfg;
    const mi_layer_plan *lp = &plan->layers[l];
    int root = -1;
    for (int r = 0; r < h->n && root < 0; r++)
        if (holders->has[r] && f->has[r])
            root = r;
    if (root < 0) { /* the router's weights are with the experts: the residual goes to an expert rank */
        rankset one;
        set_clear(&one);
        root = lowest(f, h->n);
        one.has[root] = 1;
        ensure(h, holders, &one, l);
    }
    rankset s = *f;
    s.has[root] = 1;
    to_one(h, root, norm_op(l, MI_NORM_FFN, 0));
    to_one(h, root, pb_compute(MI_OP_ROUTE, l, MI_BUF_XN, 0, c->dim));
    int kinds[2] = {MI_OP_DISPATCH, MI_OP_COMBINE};
    for (int e = 0; e < 2; e++) {
        if (e == 1) /* every expert rank runs its selected experts between the two, once */
            for (int r = 0; r < h->n; r++) {
                if (!f->has[r])
                    continue;
                mi_op op = pb_compute(MI_OP_MOE, l, MI_BUF_TMP, 0, c->dim);
                op.flags = MI_OPF_ROUTED;
                op.i0 = -1;
                for (int i = 0; i < lp->n_ffn; i++)
                    if (lp->ffn[i].rank == r) {
                        op.i0 = op.i0 < 0 ? lp->ffn[i].v0 : op.i0;
                        op.ni += lp->ffn[i].n;
                        if (lp->ffn[i].v0 == 0 && c->shared_hidden_dim > 0)
                            op.flags |= MI_OPF_SHARED;
                    }
                to_one(h, r, op);
            }
        /* (x is filled before the next exchange may move the array) */
        mi_exchange *x = comm_step(h, kinds[e], &s, root, MI_BUF_XN, l, 0);
        int m[MI_MAX_RANKS], k = members_of(&s, h->n, m);
        x->top_k = c->n_experts_used;
        x->n_experts = c->n_experts;
        x->own = mi_calloc((size_t)k, sizeof(mi_colset), "exchange");
        pb_cols_add(&x->send[x->root], 0, c->dim);
        for (int j = 0; j < k; j++)
            for (int i = 0; i < lp->n_ffn; i++)
                if (lp->ffn[i].rank == m[j]) {
                    pb_cols_add(&x->own[j], lp->ffn[i].v0, lp->ffn[i].n);
                    if (lp->ffn[i].v0 == 0 && c->shared_hidden_dim > 0)
                        x->shared = j;
                }
    }
    set_clear(holders);
    holders->has[root] = 1;
}

/* Each PUT window of this phase exposed at the start of its root's program. */
static void post_ahead(hl *h, int first_xid)
{
    mi_programs *p = h->p;
    for (int r = 0; r < h->n; r++) {
        int n_post = 0;
        for (int x = first_xid; x < p->n_xchg; x++)
            n_post += p->xchg[x].kind == MI_OP_PUT && p->comms[p->xchg[x].comm].n_members > 1 &&
                      p->comms[p->xchg[x].comm].members[p->xchg[x].root] == r;
        if (!n_post)
            continue;
        mi_program *g = &p->prog[h->ph][r];
        int old = g->n_ops;
        for (int i = 0; i < n_post; i++)
            pb_op(p, h->ph, r, pb_compute(MI_OP_ADD, -1, 0, 0, 0)); /* room */
        memmove(g->ops + n_post, g->ops, (size_t)old * sizeof(mi_op));
        int k = 0;
        for (int x = first_xid; x < p->n_xchg; x++) {
            const mi_exchange *e = &p->xchg[x];
            if (e->kind == MI_OP_PUT && p->comms[e->comm].n_members > 1 && p->comms[e->comm].members[e->root] == r) {
                mi_op op = pb_compute(MI_OP_POST, e->layer, MI_BUF_HEADS, 0, 0);
                op.xid = x;
                g->ops[k++] = op;
            }
        }
    }
}

/* The tokens' embedding rows into rank 0's X: rank 0 embeds them, or (a
 * split vocabulary) every classifier rank embeds the tokens among its rows,
 * zeros for the others, and rank 0 keeps each position's row from its
 * token's owner (a gather of [T, dim] rows from each: the bytes do not
 * depend on the tokens, so the cost model and the counters agree). */
static void embed(hl *h)
{
    const mi_plan *plan = h->plan;
    const mi_config *c = &plan->cfg;
    if (!plan->split_vocab) {
        to_one(h, 0, pb_compute(MI_OP_EMBED, -1, MI_BUF_X, 0, c->dim));
        return;
    }
    rankset s;
    set_clear(&s);
    s.has[0] = 1;
    for (int i = 0; i < plan->n_cls; i++) {
        mi_op op = pb_compute(MI_OP_EMBED, -1, MI_BUF_X, 0, c->dim);
        op.variant = MI_OPV_EMBED_ROWS;
        op.i0 = plan->cls[i].v0;
        op.ni = plan->cls[i].n;
        to_one(h, plan->cls[i].rank, op);
        s.has[plan->cls[i].rank] = 1;
    }
    int m[MI_MAX_RANKS], k = members_of(&s, h->n, m);
    if (k < 2)
        return;
    mi_exchange *x = comm_step(h, MI_OP_GATHERV, &s, 0, MI_BUF_X, -1, 0);
    x->by_token = 1;
    x->own = mi_calloc((size_t)k, sizeof(mi_colset), "exchange");
    for (int j = 0; j < k; j++) {
        if (m[j] != 0)
            pb_cols_add(&x->send[j], 0, c->dim);
        for (int i = 0; i < plan->n_cls; i++)
            if (plan->cls[i].rank == m[j])
                pb_cols_add(&x->own[j], plan->cls[i].v0, plan->cls[i].n);
    }
}

static void compile_phase(hl *h);

int pb_compile_headlevel(const mi_plan *plan, mi_programs *p, char *err)
{
    (void)err;
    pb_init(p, plan->n_ranks, plan->wire);
    p->embed_all = plan->split_vocab && plan->n_ranks > 1; /* the workers embed: they need the tokens */
    for (int ph = 0; ph < MI_N_PHASES; ph++) {
        hl h = {plan, p, plan->n_ranks, ph};
        int first = p->n_xchg;
        compile_phase(&h);
        post_ahead(&h, first);
    }
    return 0;
}

static void compile_phase(hl *h)
{
    const mi_plan *plan = h->plan;
    const mi_config *c = &plan->cfg;
    int nq = c->n_heads * c->head_dim;
    rankset holders, need, heads;
    set_clear(&holders);
    holders.has[0] = 1; /* the controller embeds the tokens, or gathers their rows */
    embed(h);
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        set_clear(&heads);
        for (int k = 0; k < c->n_kv_heads; k++)
            heads.has[lp->kv_rank[k]] = 1;
        need = heads;
        if (lp->proj_rank >= 0)
            need.has[lp->proj_rank] = 1;
        if (l > 0 && plan->layers[l - 1].speculate) {
            /* attention already ran on Z; the decision gave every member X */
            attention(h, &heads, l, MI_OPF_IF_REJECTED);
        } else {
            ensure(h, &holders, &need, l);
            attention(h, &heads, l, 0);
        }
        if (lp->proj_rank >= 0) {
            int pr = lp->proj_rank;
            rankset g = heads;
            g.has[pr] = 1;
            int m[MI_MAX_RANKS], k = members_of(&g, h->n, m);
            mi_exchange *x = comm_step(h, MI_OP_PUT, &g, pr, MI_BUF_HEADS, l, 0);
            for (int j = 0; j < k; j++)
                head_cols(plan, l, m[j], &x->send[j]);
            /* into X, or (post-norms) into TMP, then normed into X */
            mi_op op = pb_compute(MI_OP_PROJ, l, c->post_norms ? MI_BUF_TMP : MI_BUF_X, 0, c->dim);
            op.in = MI_BUF_HEADS;
            op.i0 = 0;
            op.ni = nq;
            op.flags = c->post_norms ? 0 : MI_OPF_ADD;
            to_one(h, pr, op);
            if (c->post_norms)
                to_one(h, pr, add_op(c, l, MI_NORM_ATTN));
            set_clear(&holders);
            holders.has[pr] = 1;
        } else {
            for (int r = 0; r < h->n; r++)
                if (heads.has[r]) {
                    mi_op op = pb_compute(MI_OP_PROJ, l, MI_BUF_TMP, 0, c->dim);
                    op.in = MI_BUF_HEADS_LOCAL;
                    op.ni = held_heads_width(plan, l, r);
                    to_one(h, r, op);
                }
            reduce(h, &heads, l, MI_NORM_ATTN);
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
            int sm[MI_MAX_RANKS];
            if (members_of(&sb, h->n, sm) > 1)
                bcast(h, &sb, lp->proj_rank, l, MI_OP_IBCAST, 0);
            attention(h, &h1, l + 1, 0);
            ffn(h, l, fr, 0, mi_plan_ffn_units(c));
            to_one(h, fr, pb_compute(MI_OP_SPEC_TEST, l, MI_BUF_X, 0, c->dim));
            to_one(h, fr, add_op(c, l, MI_NORM_FFN));
            dec = h1;
            dec.has[fr] = 1;
            if (nx->proj_rank >= 0)
                dec.has[nx->proj_rank] = 1;
            if (members_of(&dec, h->n, sm) > 1)
                bcast(h, &dec, fr, l, MI_OP_BCAST, 1);
            holders = dec;
            continue;
        }
        int nf = 0;
        for (int r = 0; r < h->n; r++)
            nf += f.has[r];
        if (mi_config_is_moe(c) && nf > 1 && !c->post_norms) {
            dispatch(h, &holders, &f, l);
            continue;
        }
        ensure(h, &holders, &f, l);
        for (int i = 0; i < lp->n_ffn; i++)
            ffn(h, l, lp->ffn[i].rank, lp->ffn[i].v0, lp->ffn[i].n);
        reduce(h, &f, l, MI_NORM_FFN);
        holders = f;
    }
    rankset cls;
    set_clear(&cls);
    for (int i = 0; i < plan->n_cls; i++)
        cls.has[plan->cls[i].rank] = 1;
    ensure(h, &holders, &cls, -1);
    for (int i = 0; i < plan->n_cls; i++) {
        to_one(h, plan->cls[i].rank, norm_op(-1, MI_NORM_FINAL, MI_OPF_LAST));
        mi_op op = pb_compute(MI_OP_LOGITS, -1, MI_BUF_LOGITS, plan->cls[i].v0, plan->cls[i].n);
        op.flags = MI_OPF_LAST;
        to_one(h, plan->cls[i].rank, op);
    }
    cls.has[0] = 1; /* logits are gathered at the controller */
    int m[MI_MAX_RANKS], k = members_of(&cls, h->n, m);
    if (k > 1) {
        mi_exchange *x = comm_step(h, MI_OP_GATHERV, &cls, 0, MI_BUF_LOGITS, -1, MI_OPF_LAST);
        x->cand = plan->logits_k;
        for (int j = 0; j < k; j++)
            for (int i = 0; i < plan->n_cls; i++)
                if (plan->cls[i].rank == m[j])
                    pb_cols_add(&x->send[j], plan->cls[i].v0, plan->cls[i].n);
    }
}
