/* The event walk of one forward pass (simulate.h mi_sim_pass): every rank's
 * program as events on its own clock, every message a send and an arrival,
 * over links with jitter, loss and an optional shared medium. The
 * generation over many passes is sim_run.c. */
#include "meshinfer/simulate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "sim_internal.h"

void mi_sim_links_of(const mi_cluster *cl, mi_sim_links *lk)
{
    *lk = (mi_sim_links){.jitter_s = cl->jitter_s, .loss = cl->loss, .rto_s = 0.2,
                         .shared_medium = cl->shared_medium, .spec_draws = 0, .seed = 1};
}

int mi_sim_links_exact(const mi_sim_links *lk)
{
    return lk->jitter_s <= 0 && lk->loss <= 0 && !lk->shared_medium && !lk->spec_draws;
}

/* ------------------------------------------------------------ events */

enum { EV_RESUME = 0, EV_COMMAND, EV_ARRIVE, EV_POSTED };

typedef struct {
    double t;
    uint64_t seq;   /* ties go in the order pushed: the walk is deterministic */
    int kind, rank, xid, member, round;
} event;

typedef struct {
    event *a;
    size_t n, cap;
    uint64_t seq;
} heap;

static int before(const event *x, const event *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static void push(heap *h, double t, int kind, int rank, int xid, int member, int round)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 256;
        event *a = realloc(h->a, h->cap * sizeof *h->a);
        if (!a)
            mi_fatal("out of memory (simulator events, %zu)", h->cap);
        h->a = a;
    }
    event e = {t, h->seq++, kind, rank, xid, member, round};
    size_t i = h->n++;
    while (i > 0 && before(&e, &h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = e;
}

static int pop(heap *h, event *out)
{
    if (!h->n)
        return 0;
    *out = h->a[0];
    event last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(&h->a[c + 1], &h->a[c]))
            c++;
        if (!before(&h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = last;
    return 1;
}

/* splitmix64: a uniform double in [0, 1) */
static double uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* ------------------------------------------------------------- the walk */

enum { WAIT_NONE = 0, WAIT_MSGS, WAIT_POST };

typedef struct {
    const mi_plan *plan;
    mi_plan spec[2];          /* speculation drawn: every transition rejected [0] or accepted [1] */
    const mi_programs *p;
    const mi_program *prog;   /* [n] the phase's */
    const mi_cluster *cl;
    const mi_sim_links *lk;
    int n, T, T_logits, ctx;
    uint64_t *rng;
    double *link_bytes, *link_msgs;
    mi_sim_pass_out *out;
    heap h;
    int *pc, *round, *sent, *wait, *wait_xid, *wait_round, *wait_need;
    double *done;             /* [n] when each rank finished its program (-1: not yet) */
    int *off;                 /* [n_xchg + 1] slot of member 0 of each exchange */
    int *cnt[2];              /* [slots] messages arrived per member and round */
    unsigned char *posted;    /* [slots] the root's window post has reached the member */
    unsigned char *spec_ok;   /* [n_layers] this pass's draw per transition */
    double medium_free;       /* the shared medium is busy until then */
    mi_sim_cpu *cpu;          /* the quotas' state (the caller's or own) */
    int *owed;                /* [n] messages taken in by the op under way, their CPU not yet charged */
    double *wait_t;           /* [n] when each rank began the wait it is in */
    const mi_sim_rows *rows;  /* pipelined micro-batches' rows per op and exchange, or NULL */
} walk;

/* When work seconds of CPU started at pass time t end on rank r (its quota). */
static double run_cpu(walk *w, int r, double t, double work)
{
    const mi_device *d = &w->cl->dev[r];
    if (d->cpu_quota <= 0)
        return t + work;
    mi_sim_cpu *c = w->cpu;
    double o = c->t0 - c->phase[r]; /* pass time to the device's period clock */
    return mi_sim_cfs_run(o + t, work, d->cpu_quota, d->cpu_period_s, &c->period[r], &c->used[r]) - o;
}

/* When rank r, waiting since ts, sees a message that arrived at t (its quota). */
static double wait_end(walk *w, int r, double ts, double t)
{
    const mi_device *d = &w->cl->dev[r];
    if (d->cpu_quota <= 0 || (d->spin_s <= 0 && d->poll <= 0) || ts >= t)
        return t;
    mi_sim_cpu *c = w->cpu;
    double o = c->t0 - c->phase[r];
    return mi_sim_cfs_wait(o + ts, o + t, d->spin_s, d->poll, d->cpu_quota, d->cpu_period_s, &c->period[r],
                           &c->used[r]) - o;
}

/* Op i of rank r's program (a micro-batch's rows, every one with logits, when pipelined). */
static double op_time(const walk *w, const mi_op *op, int r, int i)
{
    const mi_plan *pl = w->plan;
    if (w->lk->spec_draws && (op->flags & MI_OPF_IF_REJECTED) && op->layer > 0)
        pl = &w->spec[w->spec_ok[op->layer - 1]];
    int T = w->rows ? w->rows->op_rows[r][i] : w->T, Tl = w->rows ? T : w->T_logits;
    double t = mi_op_compute_s(pl, op, w->cl, r, T, w->ctx);
    if (op->kind == MI_OP_LOGITS && Tl > 1) /* every row's logits (cost.c's batch pass) */
        t += (double)op->n * pl->cfg.dim * (Tl - 1) * w->cl->dev[r].pos_s[pl->cfg.cls_dtype];
    return t;
}

/* One message from world rank a to b at time t: its arrival event. */
static void send(walk *w, int a, int b, double t, double bytes, int kind, int xid, int member, int round)
{
    const mi_cluster *cl = w->cl;
    double lat = mi_cluster_latency(cl, a, b), arr;
    if (w->lk->jitter_s > 0) {
        lat += w->lk->jitter_s * (2 * uniform(w->rng) - 1);
        if (lat < 0)
            lat = 0;
    }
    int rdv = bytes > cl->eager_bytes; /* the receiver's go-ahead first: one more round trip */
    if (w->lk->shared_medium && bytes > 0) {
        double start = t + (rdv ? 2 * lat : 0);
        if (start < w->medium_free)
            start = w->medium_free;
        w->medium_free = start + bytes / cl->bandwidth;
        arr = w->medium_free + lat;
    } else {
        arr = t + (lat * (rdv ? 3 : 1) + bytes / mi_cluster_bandwidth(cl, a, b));
    }
    while (w->lk->loss > 0 && uniform(w->rng) < w->lk->loss)
        arr += w->lk->rto_s;
    push(&w->h, arr, kind, b, xid, member, round);
    w->out->sends++;
    w->out->bytes += bytes;
    if (w->link_bytes)
        w->link_bytes[(size_t)a * w->n + b] += bytes;
    if (w->link_msgs)
        w->link_msgs[(size_t)a * w->n + b] += 1;
}

/* Payload of exchange xid's message from member i to member j. */
static double msg_bytes(const walk *w, int xid, int i, int j)
{
    double npos = w->rows ? w->rows->x_rows[xid] : w->p->xchg[xid].buf == MI_BUF_LOGITS ? w->T_logits : w->T;
    return npos * mi_exchange_bytes(w->p, xid, i, j);
}

/* Member i's message to j leaves once i's CPU has paid for it (*t: i's clock, advanced). */
static void xsend(walk *w, int xid, int i, int j, int round, double *t, double bytes)
{
    const mi_comm *cm = &w->p->comms[w->p->xchg[xid].comm];
    int a = cm->members[i];
    if (w->cl->dev[a].msg_s > 0)
        *t = run_cpu(w, a, *t, w->cl->dev[a].msg_s);
    send(w, a, cm->members[j], *t, bytes, EV_ARRIVE, xid, j, round);
}

/* The root of a PUT exposes its window: a notice to every origin. */
static void post(walk *w, int xid, double t)
{
    const mi_comm *cm = &w->p->comms[w->p->xchg[xid].comm];
    int root = w->p->xchg[xid].root;
    for (int j = 0; j < cm->n_members; j++)
        if (j != root)
            send(w, cm->members[root], cm->members[j], t, 0, EV_POSTED, xid, j, 0);
}

/* Member i has received what it needs in this round of xid; else rank r waits from t. */
static int got(walk *w, int r, int xid, int i, int round, int need, double t)
{
    if (w->cnt[round][w->off[xid] + i] >= need) {
        w->owed[r] += need;
        return 1;
    }
    w->wait[r] = WAIT_MSGS;
    w->wait_t[r] = t;
    w->wait_xid[r] = xid;
    w->wait_round[r] = round;
    w->wait_need[r] = need;
    return 0;
}

/* Rank r at its communication op at time *t: 1 when it is done with it
 * (*t: when, after the CPU its messages cost), 0 when it waits (an arrival
 * or, after sends' CPU, a resume event resumes it). Sends are eager: a
 * sender goes on. */
static int comm_step(walk *w, int r, double *t)
{
    const mi_op *op = &w->prog[r].ops[w->pc[r]];
    int xid = op->xid;
    const mi_exchange *x = &w->p->xchg[xid];
    const mi_comm *cm = &w->p->comms[x->comm];
    int n = cm->n_members, i = mi_comm_index(cm, r), root = x->root;
    if (n >= 2)
        switch (x->kind) {
        case MI_OP_BCAST:
        case MI_OP_IBCAST:
        case MI_OP_DISPATCH: /* (a member's message, possibly empty, always travels) */
            if (i == root) {
                for (int j = 0; j < n; j++)
                    if (j != root)
                        xsend(w, xid, root, j, 0, t, msg_bytes(w, xid, root, j));
            } else if (!got(w, r, xid, i, 0, 1, *t)) {
                return 0;
            }
            break;
        case MI_OP_PUT: /* an origin puts once the root's post has reached it */
            if (i == root) {
                if (!got(w, r, xid, i, 0, n - 1, *t))
                    return 0;
            } else if (!w->posted[w->off[xid] + i]) {
                w->wait[r] = WAIT_POST;
                w->wait_t[r] = *t;
                w->wait_xid[r] = xid;
                return 0;
            } else {
                xsend(w, xid, i, root, 0, t, msg_bytes(w, xid, i, root));
            }
            break;
        case MI_OP_GATHERV:
        case MI_OP_COMBINE:
            if (i != root)
                xsend(w, xid, i, root, 0, t, msg_bytes(w, xid, i, root));
            else if (!got(w, r, xid, i, 0, n - 1, *t))
                return 0;
            break;
        default: {
            /* every member to every other it has payload for (allgathers, reductions); a two-round
             * reduction's payload is all in the first round's messages, the second carries none
             * (each link crosses once with mi_exchange_bytes, the sum of both rounds' slices) */
            int rounds = x->kind == MI_OP_ALLREDUCE && n > 2 && x->rounds != 1 ? 2 : 1;
            for (; w->round[r] < rounds; w->round[r]++, w->sent[r] = 0) {
                int k = w->round[r], need = 0;
                double t0 = *t;
                for (int j = 0; j < n; j++)
                    if (j != i) {
                        need += mi_exchange_bytes(w->p, xid, j, i) > 0;
                        if (!w->sent[r] && mi_exchange_bytes(w->p, xid, i, j) > 0)
                            xsend(w, xid, i, j, k, t, k == 0 ? msg_bytes(w, xid, i, j) : 0.0);
                    }
                w->sent[r] = 1;
                if (*t > t0) { /* the sends' CPU: look for arrivals once it is paid */
                    push(&w->h, *t, EV_RESUME, r, -1, 0, 0);
                    return 0;
                }
                if (!got(w, r, xid, i, k, need, *t))
                    return 0;
            }
        }
        }
    if (w->owed[r] > 0) { /* what it took in: its CPU before it goes on */
        *t = run_cpu(w, r, *t, w->owed[r] * w->cl->dev[r].msg_s);
        w->owed[r] = 0;
    }
    w->pc[r]++;
    w->round[r] = 0;
    w->sent[r] = 0;
    return 1;
}

/* An op that exchanges messages (a window's post is local: it only starts the origins' clocks). */
static int is_comm(const mi_op *op)
{
    return mi_op_is_comm(op->kind) && op->kind != MI_OP_POST;
}

/* Run rank r from time t until it waits, computes (a resume event then) or
 * finishes. A run of compute ops is one busy interval. */
static void advance(walk *w, int r, double t)
{
    const mi_program *pg = &w->prog[r];
    for (;;) {
        if (w->pc[r] >= pg->n_ops) {
            w->done[r] = t;
            return;
        }
        if (is_comm(&pg->ops[w->pc[r]])) {
            double t1 = t;
            if (!comm_step(w, r, &t1))
                return;
            if (t1 > t) { /* its messages' CPU: every arrival before t1 is counted when it resumes */
                push(&w->h, t1, EV_RESUME, r, -1, 0, 0);
                return;
            }
            continue;
        }
        double acc = 0;
        for (; w->pc[r] < pg->n_ops && !is_comm(&pg->ops[w->pc[r]]); w->pc[r]++) {
            const mi_op *op = &pg->ops[w->pc[r]];
            if (op->kind == MI_OP_POST)
                post(w, op->xid, t + acc);
            else
                acc += op_time(w, op, r, w->pc[r]);
        }
        if (acc > 0) {
            w->out->busy_s[r] += acc;
            push(&w->h, run_cpu(w, r, t, acc), EV_RESUME, r, -1, 0, 0);
            return;
        }
    }
}

/* Rank r's wait from ts ends with an arrival at t: it goes on then, or,
 * when its polling used up its quota, in the next period. */
static void wake(walk *w, int r, double ts, double t)
{
    double go = wait_end(w, r, ts, t);
    if (go > t)
        push(&w->h, go, EV_RESUME, r, -1, 0, 0);
    else
        advance(w, r, t);
}

/* The plans whose speculated transitions are all rejected or all accepted. */
static void spec_plans(walk *w)
{
    const mi_plan *pl = w->plan;
    for (int a = 0; a < 2; a++) {
        w->spec[a] = *pl;
        w->spec[a].layers = mi_malloc((size_t)pl->cfg.n_layers * sizeof *pl->layers, "speculation draws");
        memcpy(w->spec[a].layers, pl->layers, (size_t)pl->cfg.n_layers * sizeof *pl->layers);
        for (int l = 0; l < pl->cfg.n_layers; l++)
            w->spec[a].layers[l].accept_permille = a ? 1000 : 0;
    }
    for (int l = 0; l < pl->cfg.n_layers; l++)
        w->spec_ok[l] = pl->layers[l].speculate && uniform(w->rng) * 1000 < pl->layers[l].accept_permille;
}

int mi_sim_pass(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, const mi_sim_links *lk, int ph,
                int T, int T_logits, int ctx, uint64_t *rng, double *link_bytes, double *link_msgs,
                mi_sim_cpu *cpu, mi_sim_pass_out *out, char *err)
{
    return mi_sim_walk(plan, p, cl, lk, ph, T, T_logits, ctx, rng, link_bytes, link_msgs, cpu, NULL, out, err);
}

int mi_sim_walk(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, const mi_sim_links *lk, int ph,
                int T, int T_logits, int ctx, uint64_t *rng, double *link_bytes, double *link_msgs,
                mi_sim_cpu *cpu, const mi_sim_rows *rows, mi_sim_pass_out *out, char *err)
{
    int n = plan->n_ranks;
    memset(out, 0, sizeof *out);
    mi_sim_cpu *own = NULL;
    if (!cpu) { /* every quota whole, a period starting with the pass */
        cpu = own = mi_malloc(sizeof *own, "simulator quotas");
        own->t0 = 0;
        for (int r = 0; r < MI_MAX_RANKS; r++)
            own->period[r] = 0, own->used[r] = 0, own->idle_since[r] = -1, own->phase[r] = 0;
    }
    walk w = {.plan = plan, .p = p, .prog = p->prog[ph], .cl = cl, .lk = lk, .n = n, .T = T,
              .T_logits = T_logits, .ctx = ctx, .rng = rng, .link_bytes = link_bytes, .link_msgs = link_msgs,
              .out = out, .cpu = cpu, .rows = rows};
    int *ints = mi_calloc(8 * (size_t)n + (size_t)p->n_xchg + 1, sizeof(int), "simulator ranks");
    w.pc = ints, w.round = ints + n, w.sent = ints + 2 * n, w.wait = ints + 3 * n, w.wait_xid = ints + 4 * n;
    w.wait_round = ints + 5 * n, w.wait_need = ints + 6 * n, w.owed = ints + 7 * n;
    w.off = ints + 8 * n;
    w.wait_t = mi_calloc((size_t)n, sizeof(double), "simulator waits");
    for (int x = 0; x < p->n_xchg; x++)
        w.off[x + 1] = w.off[x] + p->comms[p->xchg[x].comm].n_members;
    size_t slots = (size_t)w.off[p->n_xchg] + 1;
    w.cnt[0] = mi_calloc(2 * slots, sizeof(int), "simulator arrivals");
    w.cnt[1] = w.cnt[0] + slots;
    w.posted = mi_calloc(slots, 1, "simulator posts");
    w.done = mi_malloc((size_t)n * sizeof(double), "simulator clocks");
    w.spec_ok = mi_calloc((size_t)plan->cfg.n_layers + 1, 1, "speculation draws");
    if (lk->spec_draws)
        spec_plans(&w);
    /* a PUT whose root posts nothing counts as posted when the pass starts (the cost model's rule) */
    unsigned char *has_post = mi_calloc((size_t)p->n_xchg + 1, 1, "simulator posts");
    for (int r = 0; r < n; r++) {
        w.done[r] = -1;
        for (int i = 0; i < w.prog[r].n_ops; i++)
            if (w.prog[r].ops[i].kind == MI_OP_POST)
                has_post[w.prog[r].ops[i].xid] = 1;
    }
    for (int r = 0; r < n; r++)
        for (int i = 0; i < w.prog[r].n_ops; i++) {
            const mi_op *op = &w.prog[r].ops[i];
            if (op->kind == MI_OP_PUT && !has_post[op->xid] &&
                p->comms[p->xchg[op->xid].comm].members[p->xchg[op->xid].root] == r) {
                has_post[op->xid] = 1;
                post(&w, op->xid, 0.0);
            }
        }
    free(has_post);
    /* the pass's command reaches each worker over its link from rank 0 (each paid for on rank 0's
     * CPU before it leaves, rank 0 going on after the last) */
    double t0 = 0;
    for (int r = 1; r < n; r++) {
        if (cl->dev[0].msg_s > 0)
            t0 = run_cpu(&w, 0, t0, cl->dev[0].msg_s);
        send(&w, 0, r, t0, 0, EV_COMMAND, -1, 0, 0);
    }
    if (t0 > 0)
        push(&w.h, t0, EV_RESUME, 0, -1, 0, 0);
    else
        advance(&w, 0, 0.0);
    event e;
    while (pop(&w.h, &e)) {
        out->events++;
        int r = e.rank;
        if (e.kind == EV_RESUME) {
            advance(&w, r, e.t);
            continue;
        }
        out->recvs++;
        if (e.kind == EV_COMMAND) {
            /* the worker has waited for it since its last pass ended (polling: quota used) */
            double since = cpu->idle_since[r] >= 0 ? cpu->idle_since[r] - cpu->t0 : e.t;
            if (cl->dev[r].msg_s > 0) { /* the command's CPU before the program starts */
                push(&w.h, run_cpu(&w, r, wait_end(&w, r, since, e.t), cl->dev[r].msg_s), EV_RESUME, r, -1, 0, 0);
            } else {
                wake(&w, r, since < e.t ? since : e.t, e.t);
            }
            continue;
        }
        size_t s = (size_t)w.off[e.xid] + e.member;
        if (e.kind == EV_POSTED) {
            w.posted[s] = 1;
            if (w.wait[r] == WAIT_POST && w.wait_xid[r] == e.xid) {
                w.wait[r] = WAIT_NONE;
                wake(&w, r, w.wait_t[r], e.t);
            }
            continue;
        }
        w.cnt[e.round][s]++;
        if (w.wait[r] == WAIT_MSGS && w.wait_xid[r] == e.xid && w.wait_round[r] == e.round &&
            w.cnt[e.round][s] >= w.wait_need[r]) {
            w.wait[r] = WAIT_NONE;
            wake(&w, r, w.wait_t[r], e.t);
        }
    }
    int rc = 0;
    for (int r = 0; r < n && !rc; r++)
        if (w.done[r] < 0)
            rc = mi_set_error(err, "simulator: rank %d waits at op %d (%s) of its %s program for messages no rank "
                                   "sends (the programs' exchanges do not match)", r, w.pc[r],
                              mi_op_name(w.prog[r].ops[w.pc[r]].kind), ph ? "decode" : "prefill");
    /* the next pass starts when rank 0 has its logits and every worker would be ready by the time its
     * next command arrives (cost.c) */
    double end = w.done[0];
    for (int r = 1; r < n && !rc; r++)
        if (w.done[r] - mi_cluster_latency(cl, 0, r) > end)
            end = w.done[r] - mi_cluster_latency(cl, 0, r);
    out->token_s = end;
    for (int r = 1; r < n && !rc; r++) /* from here each worker waits for its next command */
        cpu->idle_since[r] = cpu->t0 + w.done[r];
    if (lk->spec_draws)
        free(w.spec[0].layers), free(w.spec[1].layers);
    free(w.h.a);
    free(ints);
    free(w.cnt[0]);
    free(w.posted);
    free(w.done);
    free(w.spec_ok);
    free(own);
    free(w.wait_t);
    return rc;
}
